"""How DD-EF-SGD's (δ, τ) are chosen: statically, or by the DeCo planner (docs/design.md §5).

A controller sees only measurements (the :class:`~decobench.methods.base.Observation` of each
transfer that has arrived), never the trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from decobench.methods.base import MethodContext, Observation
from decobench.methods.options import PlannerOptions
from decobench.planning.estimators import LinkEstimator, NetworkEstimate
from decobench.planning.phi import PhiModel, get_phi
from decobench.planning.planner import Plan, plan


@dataclass(frozen=True)
class Schedule:
    """The compression ratio δ and staleness τ used for one iteration."""

    delta: float
    staleness: int


class Controller(Protocol):
    def schedule(self, iteration: int) -> Schedule: ...

    def observe(self, observation: Observation) -> None: ...

    def log(self) -> dict[str, Any]:
        """Fields to add to this iteration's metrics row (e.g. a fresh plan)."""
        ...


class StaticController:
    """A fixed (δ, τ) for the whole run (D-SGD, DD-EF-SGD)."""

    def __init__(self, delta: float, staleness: int) -> None:
        self._schedule = Schedule(delta, staleness)

    def schedule(self, iteration: int) -> Schedule:
        return self._schedule

    def observe(self, observation: Observation) -> None:
        return None

    def log(self) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class PlanRecord:
    iteration: int
    estimate: NetworkEstimate
    plan: Plan


PLAN_ONCE = 2**62
"""A re-plan interval no run reaches: the controller plans once and keeps that plan."""

CHANGE_WARNING = 2.0
"""DeCo-SGD warns once when â moves more than this factor away from the last plan's."""


class DecoController:
    """DeCo (Algorithm 1) inside DeCo-SGD (Algorithm 2): re-plan (δ, τ) every F iterations
    from the smoothed measurements â, b̂, T̂.

    Before the first measurement exists the run sends with (``initial_delta``, τ = 0); that
    first message is also the probe the first plan is made from. A plan is made as soon as
    the estimator has a measurement, then every ``interval`` iterations.
    """

    def __init__(self, *, d: int, workers: int, topology: str, phi: PhiModel, interval: int,
                 tau_max: int, delta_min: float, kappa: float, initial_delta: float,
                 estimator: LinkEstimator, objective: str = "paper") -> None:
        self.d, self.workers, self.topology, self.phi = d, workers, topology, phi
        self.interval, self.tau_max = interval, tau_max
        self.delta_min, self.kappa, self.objective = delta_min, kappa, objective
        self.estimator = estimator
        self._current = Schedule(initial_delta, 0)
        self._last_plan_at: int | None = None
        self._fresh: PlanRecord | None = None
        self.history: list[PlanRecord] = []
        self._warned = False
        self._warning: str | None = None

    def observe(self, observation: Observation) -> None:
        self.estimator.observe_compute(observation.compute_s)
        self.estimator.observe_transfer(observation.link_bits, observation.tx_start_s,
                                        observation.tx_end_s, observation.arrive_s,
                                        observation.latency_factor, observation.burst_bits)
        self._notice_change()

    def _notice_change(self) -> None:
        """Warn once when the plan is held across a bandwidth change of more than
        :data:`CHANGE_WARNING` x (â now against â at the last plan): the paper's F = 100 can
        hold a plan for many trace steps; the warning names ``--deco-interval``. A method that
        plans once on purpose (PLAN_ONCE: the static strategy) never warns."""
        if self._warned or self.interval >= PLAN_ONCE or not self.history:
            return
        planned = self.history[-1].estimate.bandwidth_bps
        now = self.estimator.estimate().bandwidth_bps
        ratio = max(now / planned, planned / now)
        if ratio > CHANGE_WARNING:
            self._warned = True
            self._warning = (
                f"DeCo's plan (made at â = {planned / 1e6:.3g} Mbit/s) is held for F = "
                f"{self.interval} iterations, but the bandwidth estimate is now "
                f"{now / 1e6:.3g} Mbit/s ({ratio:.1f}x); a smaller --deco-interval re-plans "
                "sooner (the paper suggests a smaller F for dynamic networks, its §4.2)")

    def schedule(self, iteration: int) -> Schedule:
        estimator = self.estimator
        self._fresh = None
        due = self._last_plan_at is None or iteration - self._last_plan_at >= self.interval
        if due and estimator.ready():
            estimate = estimator.estimate()
            chosen = plan(self.d, self.workers, estimate.compute_s, estimate.bandwidth_bps,
                          estimate.latency_s, topology=self.topology, phi=self.phi,
                          tau_max=self.tau_max, delta_min=self.delta_min, kappa=self.kappa,
                          objective=self.objective)
            self._current = Schedule(chosen.delta, chosen.staleness)
            self._last_plan_at = iteration
            self._fresh = PlanRecord(iteration, estimate, chosen)
            self.history.append(self._fresh)
        return self._current

    def log(self) -> dict[str, Any]:
        warning = {} if self._warning is None else {"warning": self._warning}
        self._warning = None
        if self._fresh is None:
            return warning
        return {**warning, **plan_fields(self._fresh.estimate, self._fresh.plan)}


def plan_fields(estimate: NetworkEstimate, chosen: Plan) -> dict[str, Any]:
    """The metrics-row fields of a plan: the figures it was made from and what it predicts."""
    return {
        "plan_bandwidth_mbps": estimate.bandwidth_bps / 1e6,
        "plan_latency_ms": estimate.latency_s * 1e3,
        "plan_compute_ms": estimate.compute_s * 1e3,
        "plan_bubble_free": chosen.bubble_free,
        "plan_t_avg_s": chosen.t_avg_s,
        "plan_phi": chosen.phi,
    }


class ReplayController:
    """Replays a recorded (δ_t, τ_t) sequence, holding the last entry afterwards.

    ``decobench fidelity`` uses it to charge the simulated clock for exactly the schedule an
    emulated run chose, so the comparison tests the time model rather than the two runs'
    different measurements.
    """

    def __init__(self, schedules: Sequence[Schedule]) -> None:
        if not schedules:
            raise ValueError("a replayed schedule needs at least one (delta, tau) entry")
        self.schedules = tuple(schedules)

    def schedule(self, iteration: int) -> Schedule:
        return self.schedules[min(iteration, len(self.schedules) - 1)]

    def observe(self, observation: Observation) -> None:
        return None

    def log(self) -> dict[str, Any]:
        return {}




def deco_controller(context: MethodContext, options: PlannerOptions,
                    interval: int, initial_delta: float | None = None) -> DecoController:
    """A :class:`DecoController` built from the planner options; ``interval = PLAN_ONCE``
    freezes the first plan (CocktailSGD as the DeCo paper runs it). ``initial_delta``
    overrides the options' probe δ (CocktailSGD sizes its probe like DeCo-SGD's)."""
    return DecoController(
        d=context.d, workers=context.workers, topology=context.topology,
        phi=get_phi(options.phi), interval=interval, tau_max=options.tau_max,
        delta_min=options.delta_min, kappa=options.kappa,
        initial_delta=options.initial_delta if initial_delta is None else initial_delta,
        estimator=LinkEstimator(alpha=options.estimator_alpha), objective=options.planner)
