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
  trace families (suite ``robust-tuning``);
- the objective's κ from the paper's Theorem 1 (``--iteration-model theorem-1``, the
  default): ``κ = sqrt(n ĝ²/v̂)`` with ĝ² and v̂ measured online from the applied updates
  (:class:`UpdateNoiseMeter`); ``fixed`` keeps ``--kappa``. Φ_ef's δ₀ stays the constant
  calibrated offline (docs/deco-planner.md).

The windows' medians replace DeCo's EWMA, so the variant has no ``--estimator-alpha``.
"""

from __future__ import annotations

from collections import deque
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from decobench.methods.base import Method, MethodContext, Observation
from decobench.methods.controllers import Schedule, plan_fields
from decobench.methods.ddefsgd import DDEFSGD, topk_compressor
from decobench.methods.options import PlanModelOptions
from decobench.planning.estimators import NetworkEstimate
from decobench.planning.phi import EF_DELTA0, PhiModel, get_phi, phi_ef_scaled
from decobench.planning.planner import Plan
from decobench.planning.robust import (
    SampleWindow,
    level_changed,
    replan_period,
    robust_plan,
    theorem1_kappa,
)


class RobustDecoOptions(PlanModelOptions):
    """deco-sgd-robust: DeCo-SGD planning for the bandwidth's recent distribution, re-planning
    on change (this project's variant, not the paper's). The objective and Φ defaults were
    chosen on the tuning trace families (docs/methods/deco-sgd-robust.md "Tuning")."""

    added_later: ClassVar[frozenset[str]] = frozenset({"ef_delta0"})
    """``ef_delta0``'s default is the constant Φ_ef had before the option existed."""

    planner: Literal["paper", "time-to-accuracy"] = Field(
        "time-to-accuracy", description="'time-to-accuracy' (default) = minimise "
        "mean_i T_avg·(1 + κ·sqrt(Φ)) over every (δ, τ) (grid ∪ each τ's edge of the bubble "
        "share); 'paper' = among the τ whose edge meets the bubble share, the least Φ "
        "(Algorithm 1's rule)")
    phi: Literal["paper", "ef"] = Field("ef", description="Φ model; 'ef' (default) = τ + "
                                        "0.003·(1−δ)/(δ(1−δ)^τ); 'paper' = τ + "
                                        "(1−δ)/(δ(1−δ)^τ) (docs/deco-planner.md)")

    ef_delta0: float = Field(EF_DELTA0, gt=0, le=1, description="δ₀ of Φ_ef (with --phi ef): "
                             "the compression term's scale, calibrated on the CNN's static grid "
                             "(docs/deco-planner.md)")
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
    iteration_model: Literal["theorem-1", "fixed"] = Field(
        "theorem-1", description="κ of the time-to-accuracy objective: 'theorem-1' (default) = "
        "sqrt(n·ĝ²/v̂) from Theorem 1's two leading terms, ĝ² and v̂ measured online from "
        "consecutive applied updates (--kappa until 3 pairs exist); 'fixed' = --kappa "
        "throughout (docs/methods/deco-sgd-robust.md)")
    change_factor: float = Field(1.5, ge=0, description="re-plan at once when the median of "
                                 "the last 5 bandwidth samples is more than this factor off "
                                 "the planned one (0: only by the period)")


LATENCY_FLOOR_S = 1e-9
"""A latency sample below 1 ns is kept as 1 ns (the windows compare samples by their ratio; no
plan changes at that scale)."""

OUTLIER_FACTOR, CONFIRM, RECENT = 4.0, 3, 5
"""A sample more than 4x off the window's median is held back; 3 in a row are a new level; the
change trigger reads the median of the last 5 bandwidth samples."""


class UpdateNoiseMeter:
    """ĝ² and v̂ of :func:`decobench.planning.robust.theorem1_kappa` from consecutive applied
    updates u_t (each the mean of the n workers' messages, the same tensor on every rank, so
    every rank plans alike): ``⟨u_t, u_{t−1}⟩`` estimates ``||∇f||²`` and
    ``||u_t − u_{t−1}||²/2`` the variance of the mean, averaged over the last ``window``
    pairs. Keeps one copy of the last update (d numbers)."""

    def __init__(self, window: int = 50) -> None:
        self._previous: Tensor | None = None
        self._previous_sq = 0.0
        self._pairs: deque[tuple[float, float]] = deque(maxlen=window)

    def add(self, update: Tensor) -> None:
        u = update.detach().reshape(-1)
        u_sq = float(torch.dot(u, u))
        if u_sq == 0.0:                         # nothing applied (staleness warm-up)
            return
        if self._previous is not None:
            inner = float(torch.dot(u, self._previous))
            self._pairs.append((inner, max(u_sq + self._previous_sq - 2 * inner, 0.0) / 2))
        self._previous, self._previous_sq = u.clone(), u_sq

    def kappa(self, workers: int, minimum_pairs: int) -> float | None:
        """κ from the window's pairs; None before ``minimum_pairs`` or with no noise seen."""
        if len(self._pairs) < minimum_pairs:
            return None
        signal = sum(p[0] for p in self._pairs) / len(self._pairs)
        noise = sum(p[1] for p in self._pairs) / len(self._pairs)
        return theorem1_kappa(signal, noise, workers) if noise > 0 else None


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
        self.updates = UpdateNoiseMeter(options.window)
        self._kappa = options.kappa

    def observe_update(self, update: Tensor) -> None:
        """The applied mean update u_t (DD-EF-SGD calls this when one message is due)."""
        if self.options.iteration_model == "theorem-1":
            self.updates.add(update)

    def kappa(self) -> float:
        """κ for the next plan: --kappa, or Theorem 1's from the measured updates once the
        window holds ``min_samples`` pairs (--kappa until then)."""
        if self.options.iteration_model == "fixed":
            return self.options.kappa
        fitted = self.updates.kappa(self.workers, self.options.min_samples)
        return self.options.kappa if fitted is None else fitted

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
        self._kappa = self.kappa()
        estimate = NetworkEstimate(self.bandwidth.median(), self.latency.median(),
                                   self.compute.median())
        chosen = robust_plan(self.d, self.workers, estimate.compute_s, samples,
                             estimate.latency_s, topology=self.topology, phi=self.phi,
                             tau_max=options.tau_max, delta_min=options.delta_min,
                             bubble_share=options.bubble_share, kappa=self._kappa,
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
        return {**plan_fields(estimate, chosen), "plan_reason": reason, "plan_kappa": self._kappa,
                "plan_period": self._period,
                "plan_bandwidth_min_mbps": min(self.bandwidth.values()) / 1e6}


def robust_controller(context: MethodContext, options: RobustDecoOptions) -> RobustDecoController:
    return RobustDecoController(d=context.d, workers=context.workers, topology=context.topology,
                                phi=(phi_ef_scaled(options.ef_delta0) if options.phi == "ef"
                                     else get_phi(options.phi)), options=options)


def build_deco_sgd_robust(context: MethodContext, options: RobustDecoOptions) -> Method:
    return DDEFSGD(context, topk_compressor(context), robust_controller(context, options))
