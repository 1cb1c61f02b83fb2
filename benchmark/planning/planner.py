"""DeCo's planner, Algorithm 1 of docs/design.md §5.3, as one pure function.

Given estimates ``T̂`` (compute), ``â`` (bandwidth), ``b̂`` (latency):

1. for ``τ = 0 .. τ_max``: ``δ*(τ)`` = the largest ``δ = k/d`` in ``[δ_min, 1]`` with
   ``h W(δ) / â <= min(T̂, τ T̂ − l b̂)`` (the bubble-free condition, so ``T_avg = T̂``);
2. among bubble-free ``τ``, pick the one minimising ``Φ(δ*(τ), τ)``, ties to the smallest τ;
3. if none is bubble-free, minimise ``J(δ, τ) = T_avg(δ, τ) · (1 + κ sqrt(Φ(δ, τ)))`` over
   ``τ = 0 .. τ_max`` and a log-spaced grid of ``δ`` in ``[δ_min, 1]``.

Step 1 costs O(1) per τ (:func:`decobench.clock.wire.max_topk_count_within`), so a plan is
O(τ_max) when some τ is bubble-free, O(τ_max · grid_points) otherwise; never O(d) or O(n).

Topology factors: a message with ``δ < 1`` goes by all-gather (``topology_factors(...,
dense=False)``), ``δ = 1`` by all-reduce (``dense=True``), matching :func:`wire.wire_bits`.
Under ``paper`` both are ``h = l = 1``. Under ``ring`` the two cases are checked separately
for each τ: ``δ = 1`` is bubble-free iff the dense message fits the dense budget (dense
``h = 2(n−1)/n``, ``l = 2(n−1)``); otherwise the sparse budget (``h = l = n−1``) gives
``k <= d − 1`` (a sparse message that would keep every coordinate is sent as ``δ = 1``,
i.e. dense, so ``k = d`` is only reachable through the dense check).

Objectives (``objective=``): ``"paper"`` is Algorithm 1 above, the default and the method the
paper's claims are judged on. ``"time-to-accuracy"`` is THIS PROJECT'S NAMED ALTERNATIVE
(docs/deco-planner.md): it minimises step 3's ``J = T_avg (1 + κ sqrt(Φ))``, the predicted
time per iteration times the iteration factor of the paper's Theorem 1, over EVERY pair
``τ = 0 .. τ_max`` × (the δ grid ∪ {δ*(τ)}), bubble-free or not, so it can trade a small
bubble for less staleness, or a smaller δ for nothing, where Algorithm 1 cannot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from decobench.clock.timemodel import t_avg
from decobench.clock.topology import TopologyFactors, topology_factors
from decobench.clock.wire import dense_wire_bits, max_topk_count_within, topk_count, topk_wire_bits
from decobench.errors import DecobenchError
from decobench.planning.phi import PhiModel, phi_paper

OBJECTIVES = ("paper", "time-to-accuracy")
"""Planner objectives: ``paper`` (Algorithm 1, the default) and ``time-to-accuracy`` (this
project's alternative: ``J`` over every pair, see the module docstring)."""


@dataclass(frozen=True)
class Plan:
    """One plan: ratio ``delta`` (always ``k/d`` for an integer ``k``) and ``staleness``.

    ``t_avg_s`` is the predicted average iteration time (``T̂`` when ``bubble_free``, else the
    closed form of docs/design.md §4.4); ``phi`` is ``Φ(delta, staleness)``; ``objective`` is what
    was minimised: ``Φ`` in step 2, ``J`` in step 3.
    """

    delta: float
    staleness: int
    bubble_free: bool
    t_avg_s: float
    phi: float
    objective: float


def check_inputs(
    d: int,
    workers: int,
    compute_s: float,
    bandwidth_bps: float,
    latency_s: float,
    tau_max: int,
    delta_min: float,
    kappa: float,
    grid_points: int,
) -> None:
    def is_int(x: object) -> bool:
        return isinstance(x, int) and not isinstance(x, bool)

    def is_num(x: object) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

    problems = []
    if not (is_int(d) and d >= 1):
        problems.append(f"d (parameters) must be an integer >= 1, got {d!r}")
    if not (is_int(workers) and workers >= 1):
        problems.append(f"workers must be an integer >= 1, got {workers!r}")
    if not (is_num(compute_s) and compute_s > 0):
        problems.append(f"compute time must be finite and > 0 s, got {compute_s!r}")
    if not (is_num(bandwidth_bps) and bandwidth_bps > 0):
        problems.append(f"bandwidth must be finite and > 0 bit/s, got {bandwidth_bps!r}")
    if not (is_num(latency_s) and latency_s >= 0):
        problems.append(f"latency must be finite and >= 0 s, got {latency_s!r}")
    if not (is_int(tau_max) and tau_max >= 0):
        problems.append(f"tau_max must be an integer >= 0, got {tau_max!r}")
    if not (is_num(delta_min) and 0 < delta_min <= 1):
        problems.append(f"delta_min must be in (0, 1], got {delta_min!r}")
    if not (is_num(kappa) and kappa >= 0):
        problems.append(f"kappa must be finite and >= 0, got {kappa!r}")
    if not (is_int(grid_points) and grid_points >= 2):
        problems.append(f"grid_points must be an integer >= 2, got {grid_points!r}")
    if problems:
        raise DecobenchError("invalid planner input: " + "; ".join(problems))


def _budget_s(tau: int, compute_s: float, latency_s: float, f: TopologyFactors) -> float:
    """``min(T̂, τ T̂ − l b̂)``: the link time one message may take without a bubble."""
    return min(compute_s, tau * compute_s - f.l * latency_s)


def bubble_free_count(
    tau: int,
    d: int,
    compute_s: float,
    bandwidth_bps: float,
    latency_s: float,
    sparse: TopologyFactors,
    dense: TopologyFactors,
) -> int:
    """Largest ``k`` (``δ = k/d``) with ``h W(k) / â <= min(T̂, τ T̂ − l b̂)``; 0 if none.

    Step 1 of docs/design.md §5.3 for one τ. A negative budget has no bubble-free ``k``; a zero
    budget has none either unless the message costs no link time (``h = 0``: one worker
    under ``ring``), since ``W(k) >= 32`` for ``k >= 1``.
    """
    dense_budget = _budget_s(tau, compute_s, latency_s, dense)
    if dense_budget >= 0 and dense.h * dense_wire_bits(d) <= bandwidth_bps * dense_budget:
        return d
    sparse_budget = _budget_s(tau, compute_s, latency_s, sparse)
    if sparse_budget < 0:
        return 0
    if sparse.h == 0:
        return d
    k = max_topk_count_within(bandwidth_bps * sparse_budget / sparse.h, d)
    return min(k, d - 1) if sparse != dense else k


def delta_grid(delta_min: float, grid_points: int) -> list[float]:
    """``grid_points`` log-spaced values from ``delta_min`` to 1, both endpoints exact."""
    if delta_min >= 1:
        return [1.0]
    log_min = math.log(delta_min)
    inner = [math.exp(log_min * (1 - i / (grid_points - 1))) for i in range(1, grid_points - 1)]
    return [delta_min, *inner, 1.0]


def plan(
    d: int,
    workers: int,
    compute_s: float,
    bandwidth_bps: float,
    latency_s: float,
    topology: str = "paper",
    phi: PhiModel = phi_paper,
    tau_max: int = 32,
    delta_min: float = 1e-4,
    kappa: float = 1.0,
    grid_points: int = 64,
    objective: str = "paper",
) -> Plan:
    """DeCo's plan (δ, τ) for ``d`` parameters and ``workers`` workers (docs/design.md §5.3).

    ``compute_s``, ``bandwidth_bps``, ``latency_s`` are the estimates ``T̂, â, b̂``.
    Step 2 ties go to the smallest τ. Step 3 evaluates the grid of :func:`delta_grid`,
    each value snapped to ``k/d`` with ``k = topk_count(δ, d)``; ties go to the smallest τ,
    then the largest δ. ``κ`` (``kappa``, default 1) weighs the iteration factor against
    time in ``J = T_avg (1 + κ sqrt(Φ))``: THIS PROJECT'S MODELLING CHOICE, not the paper's.

    ``objective="time-to-accuracy"`` (not the paper's; docs/deco-planner.md) skips steps 1-2
    and minimises ``J`` over every τ and every δ of the grid plus each τ's largest
    bubble-free δ*(τ), with the same tie rule (smallest τ, then largest δ); a pair with
    ``k <= δ*(τ) d`` is reported ``bubble_free`` with ``t_avg_s = T̂``.
    """
    check_inputs(
        d, workers, compute_s, bandwidth_bps, latency_s, tau_max, delta_min, kappa, grid_points
    )
    if objective not in OBJECTIVES:
        raise DecobenchError(
            f"invalid planner input: objective must be one of {', '.join(OBJECTIVES)}, "
            f"got {objective!r}"
        )
    sparse = topology_factors(topology, workers, dense=False)
    dense = topology_factors(topology, workers, dense=True)
    k_min = topk_count(delta_min, d)

    if objective == "time-to-accuracy":
        return _plan_time_to_accuracy(d, compute_s, bandwidth_bps, latency_s, sparse, dense,
                                      phi, tau_max, k_min, kappa, delta_min, grid_points)

    best: Plan | None = None
    for tau in range(tau_max + 1):
        k = bubble_free_count(tau, d, compute_s, bandwidth_bps, latency_s, sparse, dense)
        if k < k_min:
            continue
        delta = 1.0 if k == d else k / d
        value = phi(delta, tau)
        if best is None or value < best.objective:
            best = Plan(delta, tau, True, compute_s, value, value)
    if best is not None:
        return best

    deltas = sorted({topk_count(x, d) for x in delta_grid(delta_min, grid_points)}, reverse=True)
    for tau in range(tau_max + 1):
        for k in deltas:
            delta = 1.0 if k == d else k / d
            f = dense if k == d else sparse
            bits = topk_wire_bits(k, d)  # k == d gives 32 d, the dense message
            time_s = t_avg(compute_s, bits, bandwidth_bps, latency_s, tau, f.h, f.l)
            value = phi(delta, tau)
            objective = time_s * (1.0 + kappa * math.sqrt(value))
            if best is None or objective < best.objective:
                best = Plan(delta, tau, False, time_s, value, objective)
    assert best is not None  # the grid always holds δ = 1
    return best


def _plan_time_to_accuracy(
    d: int,
    compute_s: float,
    bandwidth_bps: float,
    latency_s: float,
    sparse: TopologyFactors,
    dense: TopologyFactors,
    phi: PhiModel,
    tau_max: int,
    k_min: int,
    kappa: float,
    delta_min: float,
    grid_points: int,
) -> Plan:
    """Minimise ``J = T_avg (1 + κ sqrt(Φ))`` over every τ and δ (see :func:`plan`)."""
    grid = {topk_count(x, d) for x in delta_grid(delta_min, grid_points)}
    best: Plan | None = None
    for tau in range(tau_max + 1):
        edge = bubble_free_count(tau, d, compute_s, bandwidth_bps, latency_s, sparse, dense)
        counts = grid | ({edge} if edge >= k_min else set())
        for k in sorted(counts, reverse=True):
            delta = 1.0 if k == d else k / d
            f = dense if k == d else sparse
            bits = topk_wire_bits(k, d)  # k == d gives 32 d, the dense message
            budget = _budget_s(tau, compute_s, latency_s, f)
            free = k == edge or (budget >= 0 and (f.h == 0 or f.h * bits <= bandwidth_bps * budget))
            # bubble-free: the closed form's max is T̂ (set exactly, not through float noise)
            time_s = compute_s if free else t_avg(compute_s, bits, bandwidth_bps, latency_s,
                                                  tau, f.h, f.l)
            value = phi(delta, tau)
            objective = time_s * (1.0 + kappa * math.sqrt(value))
            if best is None or objective < best.objective:
                best = Plan(delta, tau, free, time_s, value, objective)
    assert best is not None  # the grid always holds δ = 1
    return best
