"""``deco-sgd-robust``: THIS PROJECT'S named variant of DeCo-SGD that plans for the
network's variation (docs/methods/deco-sgd-robust.md; its pieces in
:mod:`decobench.planning.robust`). The paper's ``deco-sgd`` is untouched and stays what the
paper's claims are judged on.

What changes against DeCo-SGD, each piece with an off switch:

- robust samples (``--robust-samples``): â, b̂, T̂ from windows of recent measurements that
  hold back single bad samples; the first plan waits for ``--min-samples`` of each;
- δ for the distribution (``--bubble-share β``, ``--plan-for-distribution``): δ sized so the
  predicted bubble over the window's bandwidths stays within β, not for one smoothed â;
- re-planning by change (``--change-factor``): a re-plan as soon as the recent bandwidth
  leaves the planned one by more than the factor, or the window sees a new level;
- a period from the measured rate of change (``--adaptive-interval``): F between
  ``--interval-min`` and ``--deco-interval``;
- τ by time to accuracy (``--planner time-to-accuracy``, the default; ``--planner paper``
  is Algorithm 1's rule) with the Φ model ``ef`` (``--phi``): both chosen on the tuning
  trace families (suite ``robust-tuning``); the iteration model's constants are not fitted
  online.

The windows' medians replace DeCo's EWMA, so the variant has no ``--estimator-alpha``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from decobench.compression.compressors import TopKCompressor
from decobench.methods.base import Method, MethodContext, Observation
from decobench.methods.controllers import Schedule, plan_fields
from decobench.methods.ddefsgd import DDEFSGD
from decobench.methods.options import PlanModelOptions
from decobench.planning.estimators import NetworkEstimate
from decobench.planning.phi import PhiModel, get_phi
from decobench.planning.planner import Plan
from decobench.planning.robust import SampleWindow, level_changed, replan_period, robust_plan


class RobustDecoOptions(PlanModelOptions):
    """deco-sgd-robust: DeCo-SGD planning for the bandwidth's recent distribution, re-planning
    on change (this project's variant, not the paper's). The objective and Φ defaults were
    chosen on the tuning trace families (docs/methods/deco-sgd-robust.md "Tuning")."""

    planner: Literal["paper", "time-to-accuracy"] = Field(
        "time-to-accuracy", description="'time-to-accuracy' (default) = minimise "
        "mean_i T_avg·(1 + κ·sqrt(Φ)) over every (δ, τ) (grid ∪ each τ's edge of the bubble "
        "share); 'paper' = among the τ whose edge meets the bubble share, the least Φ "
        "(Algorithm 1's rule)")
    phi: Literal["paper", "ef"] = Field("ef", description="Φ model; 'ef' (default) = τ + "
                                        "0.003·(1−δ)/(δ(1−δ)^τ); 'paper' = τ + "
                                        "(1−δ)/(δ(1−δ)^τ) (docs/deco-planner.md)")

    deco_interval: int = Field(100, ge=1, description="the longest re-plan period F in "
                               "iterations (the paper's F = 100)")
    interval_min: int = Field(10, ge=1, description="the shortest re-plan period F")
    adaptive_interval: bool = Field(True, description="choose F from the measured rate of "
                                    "change of the bandwidth (off: F = --deco-interval)")
    bubble_share: float = Field(0.05, ge=0, lt=1, description="largest predicted bubble "
                                "share over the window's bandwidths that δ may cause")
    plan_for_distribution: bool = Field(True, description="size δ for every bandwidth sample "
                                        "of the window (off: for their median alone)")
    window: int = Field(50, ge=3, description="measurements kept per quantity (â, b̂, T̂)")
    robust_samples: bool = Field(True, description="hold back a sample more than 4x off the "
                                 "window's median until 3 in a row confirm a new level (off: "
                                 "keep every sample)")
    min_samples: int = Field(3, ge=1, description="measurements of each quantity before the "
                             "first plan (the probe δ and τ = 0 until then)")
    change_factor: float = Field(1.5, ge=0, description="re-plan at once when the median of "
                                 "the last 5 bandwidth samples is more than this factor off "
                                 "the planned one (0: only by the period)")


LATENCY_FLOOR_S = 1e-9
"""A latency sample below 1 ns is kept as 1 ns (the windows compare samples by their ratio; no
plan changes at that scale)."""

OUTLIER_FACTOR, CONFIRM, RECENT = 4.0, 3, 5
"""A sample more than 4x off the window's median is held back; 3 in a row are a new level; the
change trigger reads the median of the last 5 bandwidth samples."""


class RobustDecoController:
    """Plans (δ, τ) with :func:`decobench.planning.robust.robust_plan` from sample windows;
    re-plans when the period is up or the bandwidth changed (module docstring)."""

    def __init__(self, *, d: int, workers: int, topology: str, phi: PhiModel,
                 options: RobustDecoOptions) -> None:
        self.d, self.workers, self.topology, self.phi = d, workers, topology, phi
        self.options = options
        factor = OUTLIER_FACTOR if options.robust_samples else None
        self.bandwidth, self.latency, self.compute = (
            SampleWindow(options.window, factor, CONFIRM) for _ in range(3))
        self._current = Schedule(options.initial_delta, 0)
        self._last_plan_at: int | None = None
        self._planned_bandwidth: float | None = None
        self._level_changes = 0
        self._period = options.deco_interval
        self._fresh: tuple[NetworkEstimate, Plan, str] | None = None
        self.history: list[tuple[int, NetworkEstimate, Plan]] = []

    def observe(self, observation: Observation) -> None:
        """One iteration's measurements: â from the transfer (its burst left out, as DeCo's
        estimator does), b̂ per latency hop, T̂."""
        if observation.compute_s > 0:
            self.compute.add(observation.compute_s)
        duration = observation.tx_end_s - observation.tx_start_s
        at_rate = observation.link_bits - observation.burst_bits
        if duration > 0 and at_rate > 0:
            self.bandwidth.add(at_rate / duration)
        if observation.latency_factor > 0:
            latency = (observation.arrive_s - observation.tx_end_s) / observation.latency_factor
            self.latency.add(max(latency, LATENCY_FLOOR_S))

    def ready(self) -> bool:
        need = self.options.min_samples
        return all(len(w.values()) >= need for w in (self.bandwidth, self.latency, self.compute))

    def _reason(self, iteration: int) -> str | None:
        """Why a plan is due now (None: not due)."""
        if self._last_plan_at is None:
            return "first"
        if self.bandwidth.level_changes != self._level_changes:
            return "change"
        if (self.options.change_factor > 1 and self._planned_bandwidth is not None
                and level_changed(self._planned_bandwidth,
                                  self.bandwidth.recent_median(RECENT),
                                  self.options.change_factor)):
            return "change"
        if iteration - self._last_plan_at >= self._period:
            return "period"
        return None

    def schedule(self, iteration: int) -> Schedule:
        self._fresh = None
        if not self.ready():
            return self._current
        reason = self._reason(iteration)
        if reason is None:
            return self._current
        options = self.options
        samples = self.bandwidth.values()
        if not options.plan_for_distribution:
            samples = [self.bandwidth.median()]
        estimate = NetworkEstimate(self.bandwidth.median(), self.latency.median(),
                                   self.compute.median())
        chosen = robust_plan(self.d, self.workers, estimate.compute_s, samples,
                             estimate.latency_s, topology=self.topology, phi=self.phi,
                             tau_max=options.tau_max, delta_min=options.delta_min,
                             bubble_share=options.bubble_share, kappa=options.kappa,
                             objective=options.planner)
        self._period = (replan_period(samples, options.interval_min, options.deco_interval)
                        if options.adaptive_interval else options.deco_interval)
        self._current = Schedule(chosen.delta, chosen.staleness)
        self._last_plan_at = iteration
        self._planned_bandwidth = self.bandwidth.recent_median(RECENT)
        self._level_changes = self.bandwidth.level_changes
        self._fresh = (estimate, chosen, reason)
        self.history.append((iteration, estimate, chosen))
        return self._current

    def log(self) -> dict[str, Any]:
        if self._fresh is None:
            return {}
        estimate, chosen, reason = self._fresh
        return {**plan_fields(estimate, chosen), "plan_reason": reason,
                "plan_period": self._period,
                "plan_bandwidth_min_mbps": min(self.bandwidth.values()) / 1e6}


def robust_controller(context: MethodContext, options: RobustDecoOptions) -> RobustDecoController:
    return RobustDecoController(d=context.d, workers=context.workers, topology=context.topology,
                                phi=get_phi(options.phi), options=options)


def build_deco_sgd_robust(context: MethodContext, options: RobustDecoOptions) -> Method:
    return DDEFSGD(context, TopKCompressor(), robust_controller(context, options))
