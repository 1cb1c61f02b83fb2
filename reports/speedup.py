"""Speed-up over a baseline (docs/design.md §6.3).

Speed-up of A over B = TTT_B / TTT_A. When B did not reach the target within its budget,
the speed-up is a lower bound ``>= budget_B / TTT_A`` (budget_B = the simulated time B ran);
when A did not reach it, there is no speed-up to give, and the table says so. Over seeds the
same rule applies to the medians (:func:`speedup_of` with censored medians from
:mod:`decobench.reports.stats`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from decobench.reports.stats import Obs, ratio

REFERENCES = ("d-sgd", "cocktail-sgd-topk", "static-mean-plan", "cocktail-sgd")
"""The labels every other is compared with (where present): D-SGD, the paper's static
strategy (its 'CocktailSGD' row: Top-k at DeCo's first plan), the static strategy at DeCo's
plan for the condition's mean, and CocktailSGD with its own compressor."""


@dataclass(frozen=True)
class Speedup:
    """``value`` is ``None`` when the method did not reach the target."""

    value: float | None
    lower_bound: bool

    def __str__(self) -> str:
        if self.value is None:
            return "n/a (not reached)"
        return f"{'>= ' if self.lower_bound else ''}{self.value:.2f}x"

    @property
    def kind(self) -> str:
        """``exact``, ``lower_bound`` or ``not_reached`` (for machine-readable tables)."""
        if self.value is None:
            return "not_reached"
        return "lower_bound" if self.lower_bound else "exact"


def ttt_obs(summary: dict[str, Any]) -> Obs:
    """A run's time to target, censored at the simulated time it ran when not reached."""
    if summary.get("reached") and summary.get("time_to_target_s") is not None:
        return Obs(float(summary["time_to_target_s"]))
    return Obs(float(summary.get("sim_time_s") or 0.0), censored=True)


def speedup_of(method: Obs, baseline: Obs) -> Speedup:
    """``baseline / method`` for times to target that may be censored (lower bounds)."""
    if method.censored:
        return Speedup(None, False)
    value = ratio(baseline, method)
    if value is None:  # a zero time to target: nothing meaningful to print
        return Speedup(None, False)
    return Speedup(value.value, value.censored)


def speedup(method: dict[str, Any], baseline: dict[str, Any]) -> Speedup:
    """TTT_baseline / TTT_method from two run summaries."""
    return speedup_of(ttt_obs(method), ttt_obs(baseline))
