"""DeCo's planner (docs/design.md §5.3, Algorithm 1) and the Φ models, with hand-checked values."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decobench.clock.timemodel import t_avg
from decobench.clock.topology import TOPOLOGIES, topology_factors
from decobench.clock.wire import dense_wire_bits, topk_count, topk_wire_bits
from decobench.errors import DecobenchError
from decobench.methods.base import MethodContext, Observation
from decobench.methods.controllers import deco_controller
from decobench.methods.optimizer import OptimizerConfig
from decobench.methods.options import DecoOptions
from decobench.planning.phi import EF_DELTA0, PHI_MODELS, get_phi, phi_ef, phi_paper
from decobench.planning.planner import OBJECTIVES, Plan, bubble_free_count, delta_grid, plan

D = 1_000_000  # L = ceil(log2 1e6) = 20: packed indices cost 52 bits per value


# --- Φ ---------------------------------------------------------------------------------


def test_phi_paper_hand_values() -> None:
    assert phi_paper(0.5, 1) == 3.0  # 1 + 0.5 / (0.5 * 0.5)
    assert phi_paper(0.5, 0) == 1.0  # D-EF-SGD: (1 - δ)/δ
    assert phi_paper(0.5, 2) == 6.0  # 2 + 0.5 / (0.5 * 0.25)
    assert phi_paper(0.1, 0) == pytest.approx(9.0)  # 0.9 / 0.1
    assert phi_paper(1.0, 0) == 0.0  # D-SGD
    assert phi_paper(1.0, 7) == 7.0  # DD-SGD: τ
    # (0.28125, 3): 3 + 1/(0.28125 * 0.71875^2) = 3 + 1/0.145294189453125 = 9.88258769...
    assert phi_paper(0.28125, 3) == pytest.approx(9.882587691661415, rel=1e-15)


def test_phi_paper_overflow_is_inf() -> None:
    assert phi_paper(0.5, 1100) == math.inf  # 0.5**1100 underflows to 0
    assert phi_paper(0.5, 1030) == math.inf  # 0.5 / 2**-1031 overflows
    assert phi_paper(0.999, 200) == math.inf


def test_phi_paper_grows_with_tau() -> None:
    for delta in (1e-4, 0.01, 0.28125, 0.9, 1.0):
        values = [phi_paper(delta, tau) for tau in range(40)]
        assert values == sorted(values) and len(set(values)) == len(values)


def test_phi_ef_hand_values() -> None:
    assert EF_DELTA0 == 0.003
    assert phi_ef(1.0, 0) == 0.0 and phi_ef(1.0, 3) == 3.0  # δ = 1: DD-SGD's τ, as Φ_paper
    assert phi_ef(0.5, 0) == pytest.approx(0.003)  # 0.003 * 0.5 / 0.5
    assert phi_ef(0.5, 2) == pytest.approx(2.012)  # 2 + 0.003 * 0.5 / (0.5 * 0.25)
    assert phi_ef(0.003, 0) == pytest.approx(0.997)  # δ = δ₀ costs ~ one step of staleness
    assert phi_ef(0.01, 1) == pytest.approx(1.3)  # 1 + 0.003 * 0.99 / (0.01 * 0.99)
    # the measured grid's two contested pairs (docs/deco-planner.md): Φ_paper ranks
    # (0.01, 1) far behind (0.2435, 2); Φ_ef ranks it ahead
    assert phi_paper(0.01, 1) > 13 * phi_paper(0.2435, 2)
    assert phi_ef(0.01, 1) < phi_ef(0.2435, 2)
    # the compression term is Φ_paper's scaled by δ₀
    for delta, tau in ((0.28125, 3), (0.01, 0), (0.2, 5)):
        assert phi_ef(delta, tau) - tau == pytest.approx(0.003 * (phi_paper(delta, tau) - tau))
    assert phi_ef(0.5, 1100) == math.inf


@pytest.mark.parametrize("delta,tau", [(0.0, 1), (1.5, 1), (math.nan, 1), (0.5, -1), (0.5, 1.5)])
def test_phi_ef_rejects_bad_input(delta: float, tau: int) -> None:
    with pytest.raises(DecobenchError):
        phi_ef(delta, tau)


def test_phi_registry() -> None:
    assert get_phi("paper") is phi_paper
    assert get_phi("ef") is phi_ef
    assert set(PHI_MODELS) == {"paper", "ef"}
    with pytest.raises(DecobenchError, match="paper"):
        get_phi("nope")
    with pytest.raises(TypeError):
        PHI_MODELS["x"] = phi_paper  # type: ignore[index]


@pytest.mark.parametrize("delta,tau", [(0.0, 1), (1.5, 1), (math.nan, 1), (0.5, -1), (0.5, 1.5)])
def test_phi_paper_rejects_bad_input(delta: float, tau: int) -> None:
    with pytest.raises(DecobenchError):
        phi_paper(delta, tau)


# --- hand-checked plans ----------------------------------------------------------------


def test_plan_paper_example() -> None:
    # d = 1e6, n = 4, T = 0.1 s, a = 1e8 bit/s, b = 0.2 s, paper topology (h = l = 1).
    # τ = 0, 1: τT - b < 0. τ = 2: 2*0.1 - 0.2 == 0.0 exactly in floats (2*0.1 is the float
    #   0.2): budget 0, and W(k) >= 52 > 0 for k >= 1, so not bubble-free either.
    # τ = 3: budget = min(0.1, 0.3 - 0.2) = 0.1 (the float 3*0.1 - 0.2 is 0.10000000000000003,
    #   the min keeps 0.1) -> B = 1e8 * 0.1 = 1e7 bits.
    #   packed: floor(1e7 / 52) = 192_307; mask: floor((1e7 - 1e6) / 32) = 281_250;
    #   32 d = 3.2e7 > 1e7. k = 281_250, δ = 0.28125 (W = 32*281_250 + 1e6 = 1e7 exactly).
    # τ >= 3: the budget stays min(T, ...) = 0.1, so δ*(τ) = 0.28125, and Φ grows with τ:
    #   Φ(0.28125, 3) = 9.8826 < Φ(0.28125, 4) = 4 + 1/(0.28125 * 0.71875^3) = 13.5758.
    result = plan(D, 4, 0.1, 100e6, 0.2)
    assert result.delta == 0.28125 and topk_count(result.delta, D) == 281_250
    assert result.staleness == 3
    assert result.bubble_free
    assert result.t_avg_s == 0.1
    assert result.phi == result.objective == pytest.approx(9.882587691661415)
    # the closed form agrees: max(0.1, 1e7/1e8, (0.1 + 0.1 + 0.2)/4) = 0.1
    assert t_avg(0.1, topk_wire_bits(281_250, D), 100e6, 0.2, 3) == pytest.approx(0.1)
    sparse = topology_factors("paper", 4, dense=False)
    counts = [bubble_free_count(t, D, 0.1, 100e6, 0.2, sparse, sparse) for t in range(6)]
    assert counts == [0, 0, 0, 281_250, 281_250, 281_250]


def test_plan_smaller_delta_beats_larger_tau() -> None:
    # As above with b = 0.25: τ <= 2 have τT - b < 0.
    # τ = 3: budget = min(0.1, 0.05) = 0.05 -> B = 5e6 bits; packed floor(5e6/52) = 96_153,
    #   mask floor(4e6/32) = 125_000 -> δ = 0.125, Φ = 3 + 1/(0.125 * 0.875^2) = 3 + 512/49
    #   = 13.4490.
    # τ = 4: budget = min(0.1, 0.15) = 0.1 -> δ = 0.28125, Φ = 13.5758 (above). τ > 4: Φ grows.
    # So τ = 3 with the smaller δ = 0.125 wins, narrowly.
    result = plan(D, 4, 0.1, 100e6, 0.25)
    assert (result.delta, result.staleness, result.bubble_free) == (0.125, 3, True)
    assert result.phi == pytest.approx(3 + 512 / 49)
    assert phi_paper(0.28125, 4) == pytest.approx(13.575774179702838)


def test_plan_dense_when_bandwidth_is_plentiful() -> None:
    # a = 1e12, b = 0.01, T = 0.1: τ = 0 has budget min(0.1, -0.01) < 0. τ = 1: budget
    # min(0.1, 0.09) = 0.09 s -> 9e10 bits >= 32 d = 3.2e7, so δ*(1) = 1 with Φ(1, 1) = 1;
    # every τ >= 2 has Φ >= τ >= 2.
    result = plan(D, 4, 0.1, 1e12, 0.01)
    assert result == Plan(1.0, 1, True, 0.1, 1.0, 1.0)


def test_plan_without_bubble_free_tau() -> None:
    # b = 10 s, T = 0.1 s, τ_max = 32: τT - b <= 3.2 - 10 < 0 for every τ, so step 3.
    # a = 1e9: the dense message takes 32e6/1e9 = 0.032 s.
    # Candidate (δ=1, τ=32): T_avg = max(0.1, 0.032, 10.132/33) = 0.307030..., Φ = 32,
    #   J = 0.307030 * (1 + sqrt 32) = 2.043856.
    # Any τ <= 31: T_avg >= (T + b)/(τ+1) = 10.1/(τ+1) and Φ >= τ, so
    #   J >= 10.1 (1 + sqrt τ)/(τ + 1) >= 10.1 * (1 + sqrt 31)/32 = 2.0730 > 2.0439
    #   ((1 + sqrt τ)/(τ + 1) decreases over the integers τ >= 1, and τ = 0 gives 10.1).
    # τ = 32, δ < 1: T_avg >= 10.1/33 = 0.30606, so J <= 2.0439 needs sqrt Φ <= 5.678, i.e.
    #   Φ <= 32.24; but Φ(δ, 32) - 32 = (1 - δ)^-31 / δ > 1. So the plan is (1, 32).
    result = plan(D, 4, 0.1, 1e9, 10.0, tau_max=32)
    assert not result.bubble_free
    assert (result.delta, result.staleness) == (1.0, 32)
    assert result.t_avg_s == pytest.approx(10.132 / 33) and result.t_avg_s > 0.1
    assert result.phi == 32.0
    assert result.objective == pytest.approx(10.132 / 33 * (1 + math.sqrt(32)))
    assert 10.1 * (1 + math.sqrt(31)) / 32 > result.objective


def test_ties_go_to_the_smallest_tau() -> None:
    # With a constant Φ every bubble-free τ ties: the smallest bubble-free τ (3, above) wins.
    flat = plan(D, 4, 0.1, 100e6, 0.2, phi=lambda delta, tau: 1.0)
    assert (flat.delta, flat.staleness, flat.bubble_free) == (0.28125, 3, True)
    # Step 3 ties: a = 1e3 bit/s makes even δ_min (k = 100, W = 5200 bits) take 5.2 s > T, so
    # nothing is bubble-free; with Φ = 0, J = T_avg = max(5.2, 5.5/(τ+1)) = 5.2 for every
    # τ >= 1 (τ = 0 gives 5.5): the tie goes to τ = 1, at the cheapest message δ = 1e-4.
    tied = plan(D, 4, 0.1, 1e3, 0.2, phi=lambda delta, tau: 0.0)
    assert (tied.delta, tied.staleness, tied.bubble_free) == (1e-4, 1, False)
    assert tied.t_avg_s == pytest.approx(5.2)


def test_plan_ring_topology() -> None:
    # ring, n = 4, same network as the paper example: sparse h = l = 3, dense h = 1.5, l = 6.
    # Dense: 1.5 * 3.2e7 / 1e8 = 0.48 s > T, never bubble-free.
    # Sparse: τT - 3b <= 0 for τ <= 6 (6*0.1 - 0.6 is 0.0 in floats). τ = 7: budget =
    #   min(0.1, 0.7 - 0.6) ~ 0.1 (0.09999999999999998) -> B = 1e8 * budget / 3 = 3_333_333.3
    #   bits; packed floor(B/52) = 64_102; mask floor((B - 1e6)/32) = 72_916 -> δ = 0.072916.
    #   τ = 8 has the same budget (capped at T) and a larger Φ.
    result = plan(D, 4, 0.1, 100e6, 0.2, topology="ring")
    assert (result.delta, result.staleness, result.bubble_free) == (0.072916, 7, True)
    # One worker under ring communicates nothing: bubble-free at τ = 0 with δ = 1 (Φ = 0).
    alone = plan(D, 1, 0.1, 100e6, 0.2, topology="ring")
    assert (alone.delta, alone.staleness, alone.bubble_free, alone.phi) == (1.0, 0, True, 0.0)


def test_ring_dense_choice_uses_all_reduce_factors() -> None:
    # n = 4, d = 1000: the dense message is 32_000 bits. a = 1e6, T = 0.1, b = 0.001.
    # Dense all-reduce: h = 1.5 -> 0.048 s; l = 6 -> budget min(0.1, 0.1τ - 0.006):
    #   τ = 1 gives 0.094 >= 0.048, so δ*(1) = 1 (Φ = 1).
    # Sparse all-gather alone would need 3 * 32_000 / 1e6 = 0.096 s for a full message.
    sparse = topology_factors("ring", 4, dense=False)
    dense = topology_factors("ring", 4, dense=True)
    assert bubble_free_count(1, 1000, 0.1, 1e6, 0.001, sparse, dense) == 1000
    assert plan(1000, 4, 0.1, 1e6, 0.001, topology="ring") == Plan(1.0, 1, True, 0.1, 1.0, 1.0)
    # With b = 0.02 the dense budget at τ = 1 is 0.1 - 0.12 < 0 while the sparse one is
    # 0.1 - 0.06 = 0.04 s -> B = 1e6 * 0.04 / 3 = 13_333 bits (L = 10: 42 bits per index):
    # packed floor(13_333.3/42) = 317, mask floor(12_333.3/32) = 385 -> k = 385 (< d).
    assert bubble_free_count(1, 1000, 0.1, 1e6, 0.02, sparse, dense) == 385


def test_sparse_ring_never_claims_every_coordinate() -> None:
    # n = 2: sparse h = l = 1, dense h = 1, l = 2. d = 100, a = 1e6 (W = 3200 bits: 3.2 ms),
    # T = 0.1, b = 0.06. τ = 1: dense budget 0.1 - 0.12 < 0; sparse budget 0.04 s would fit
    # every coordinate, but a full message is sent dense, so the sparse path keeps k = d - 1.
    sparse = topology_factors("ring", 2, dense=False)
    dense = topology_factors("ring", 2, dense=True)
    assert bubble_free_count(1, 100, 0.1, 1e6, 0.06, sparse, dense) == 99


def test_delta_min_one_allows_only_dense() -> None:
    result = plan(D, 4, 0.1, 1e9, 10.0, tau_max=4, delta_min=1.0)
    assert result.delta == 1.0 and not result.bubble_free
    assert plan(D, 4, 0.1, 100e6, 0.2, delta_min=1.0).delta == 1.0


def test_tau_max_zero() -> None:
    # Only τ = 0 (not bubble-free with b > 0): J = (T + W/a + b)(1 + sqrt((1-δ)/δ)).
    # δ = 1: (0.1 + 0.032 + 0.2) * 1 = 0.332. Any grid δ < 1 is <= 10^(-4/63) = 0.8639, so
    # (1-δ)/δ >= 0.1575 and J >= (0.1 + 0.2) * (1 + 0.397) = 0.419 > 0.332.
    result = plan(D, 4, 0.1, 1e9, 0.2, tau_max=0)
    assert (result.delta, result.staleness, result.bubble_free) == (1.0, 0, False)
    assert result.t_avg_s == pytest.approx(0.332)


# --- the time-to-accuracy objective (this project's alternative) -----------------------


def test_time_to_accuracy_trades_a_bubble_for_less_staleness() -> None:
    # d = 1e6, T = 0.1, a = 1e8, b = 0.1, τ_max = 2, grid {0.01, 0.1, 1}, Φ = τ/4, κ = 1.
    # Messages: k = 1e4 -> min(52e4, 32e4 + 1e6) = 520_000 bits, 5.2 ms; k = 1e5 -> mask
    #   4.2e6 bits, 42 ms; k = 1e6 -> 3.2e7 bits, 0.32 s.
    # τ = 0 (budget < 0): J = T_avg = 0.2 + tx >= 0.2052.
    # τ = 1 (budget 0.1 - 0.1 = 0: nothing bubble-free): T_avg = max(0.1, tx, (0.2 + tx)/2):
    #   k = 1e4: 0.1026, J = 0.1026 * (1 + sqrt(0.25)) = 0.1539; k = 1e5: 0.121 -> 0.1815.
    # τ = 2: budget min(0.1, 0.1) -> δ*(2) = 0.28125 (above) and the grid's 0.01, 0.1 are
    #   bubble-free: J = 0.1 * (1 + sqrt(0.5)) = 0.17071; k = 1e6: T_avg 0.32 -> 0.546.
    # Algorithm 1 sees only τ = 2 and takes its largest δ; the alternative takes (0.01, 1).
    phi = lambda delta, tau: tau / 4  # noqa: E731
    args = dict(tau_max=2, delta_min=0.01, grid_points=3, phi=phi)
    paper = plan(D, 4, 0.1, 100e6, 0.1, **args)
    assert (paper.delta, paper.staleness, paper.bubble_free) == (0.28125, 2, True)
    tta = plan(D, 4, 0.1, 100e6, 0.1, objective="time-to-accuracy", **args)
    assert (tta.delta, tta.staleness, tta.bubble_free) == (0.01, 1, False)
    assert tta.t_avg_s == pytest.approx(0.1026)
    assert tta.phi == 0.25 and tta.objective == pytest.approx(0.1026 * 1.5)
    # with Φ = 2τ staleness is dear: τ = 2 gives 0.1 (1 + 2) = 0.3, τ = 1 gives
    # 0.1026 (1 + sqrt 2) = 0.2477, τ = 0 gives 0.2052 (Φ = 0): (0.01, 0) wins
    dear = plan(D, 4, 0.1, 100e6, 0.1, objective="time-to-accuracy", tau_max=2,
                delta_min=0.01, grid_points=3, phi=lambda delta, tau: 2.0 * tau)
    assert (dear.delta, dear.staleness, dear.bubble_free) == (0.01, 0, False)
    assert dear.objective == pytest.approx(0.2052)


def test_time_to_accuracy_bubble_free_ties_go_to_the_largest_delta() -> None:
    # Φ = τ/4 and b = 0.25: τ <= 2 are never bubble-free (τ = 2: 0.2 - 0.25 < 0) and pay
    # T_avg >= (0.1 + 0.25)/(τ + 1); τ = 2 with k = 1e4: max(0.1, (0.3552)/3) = 0.1184,
    # J = 0.1184 * 1.7071 = 0.2021. τ = 3 (budget 0.05 -> δ*(3) = 0.125 from the hand case
    # above, and the grid's 0.01, 0.1 also fit): J = 0.1 * (1 + sqrt 0.75) = 0.18660 for all
    # three; the tie goes to the largest, δ*(3) = 0.125.
    result = plan(D, 4, 0.1, 100e6, 0.25, objective="time-to-accuracy", tau_max=3,
                  delta_min=0.01, grid_points=3, phi=lambda delta, tau: tau / 4)
    assert (result.delta, result.staleness, result.bubble_free) == (0.125, 3, True)
    assert result.t_avg_s == 0.1
    assert result.objective == pytest.approx(0.1 * (1 + math.sqrt(0.75)))


def test_time_to_accuracy_on_the_measured_condition() -> None:
    # CNN@FashionMNIST (d = 454_922), T̂ = 0.2 s, â = 20 Mbit/s, b̂ = 0.2 s (docs/deco-planner.md).
    # Algorithm 1: τ = 0, 1 have no bubble-free δ (budgets -0.2, 0); every τ >= 2 has the
    # budget T̂ = 0.2 s -> 4 Mbit -> mask format k = (4e6 - 454_922)/32 -> 110_783, and Φ_paper
    # grows with τ: (0.2435, 2) with Φ = 2 + 1/(δ(1 - δ)) = 7.4283.
    d = 454_922
    paper = plan(d, 4, 0.2, 20e6, 0.2)
    assert (topk_count(paper.delta, d), paper.staleness) == (110_783, 2)
    assert paper.phi == pytest.approx(7.4283, abs=1e-4)
    # the time-to-accuracy objective with Φ_paper agrees with Algorithm 1 here ...
    same = plan(d, 4, 0.2, 20e6, 0.2, objective="time-to-accuracy")
    assert (same.delta, same.staleness) == (paper.delta, paper.staleness)
    assert same.objective == pytest.approx(0.2 * (1 + math.sqrt(paper.phi)))
    # ... and with Φ_ef it takes τ = 1 and a small δ, paying a 4% bubble
    ef = plan(d, 4, 0.2, 20e6, 0.2, objective="time-to-accuracy", phi=phi_ef)
    assert ef.staleness == 1 and not ef.bubble_free and 0.005 < ef.delta < 0.03
    bits = topk_wire_bits(topk_count(ef.delta, d), d)
    assert ef.t_avg_s == pytest.approx((0.2 + bits / 20e6 + 0.2) / 2)
    assert ef.objective == pytest.approx(ef.t_avg_s * (1 + math.sqrt(phi_ef(ef.delta, 1))))
    assert ef.objective < 0.2 * (1 + math.sqrt(phi_ef(paper.delta, 2)))


def test_unknown_objective_is_rejected() -> None:
    assert OBJECTIVES == ("paper", "time-to-accuracy")
    with pytest.raises(DecobenchError, match="objective"):
        plan(D, 4, 0.1, 1e8, 0.2, objective="fastest")


def test_controller_uses_the_planner_option() -> None:
    context = MethodContext(d=454_922, workers=4, topology="paper", optimizer=OptimizerConfig())
    obs = Observation(iteration=0, compute_s=0.2, link_bits=232_050.0, tx_start_s=0.2,
                      tx_end_s=0.2 + 232_050 / 20e6, arrive_s=0.2 + 232_050 / 20e6 + 0.2,
                      latency_factor=1.0)
    plans = {}
    for name, options in (("paper", DecoOptions()),
                          ("tta", DecoOptions(planner="time-to-accuracy", phi="ef"))):
        ctrl = deco_controller(context, options, interval=options.deco_interval)
        assert ctrl.schedule(0).staleness == 0  # the probe
        ctrl.observe(obs)
        plans[name] = ctrl.schedule(1)
    expected = plan(454_922, 4, 0.2, 20e6, 0.2, objective="time-to-accuracy", phi=phi_ef)
    assert (plans["tta"].delta, plans["tta"].staleness) == (expected.delta, 1)
    assert plans["paper"].staleness == 2 and plans["paper"].delta == pytest.approx(0.2435, 1e-3)
    assert DecoOptions().planner == "paper" and DecoOptions().phi == "paper"
    with pytest.raises(ValueError):
        DecoOptions(planner="fastest")
    with pytest.raises(ValueError):
        DecoOptions(phi="nope")


def test_delta_grid() -> None:
    grid = delta_grid(1e-4, 5)
    assert grid[0] == 1e-4 and grid[-1] == 1.0 and len(grid) == 5
    assert grid == pytest.approx([1e-4, 1e-3, 1e-2, 1e-1, 1.0])
    assert delta_grid(1.0, 64) == [1.0]
    assert len(delta_grid(1e-4, 64)) == 64


@pytest.mark.parametrize(
    "kwargs",
    [
        {"d": 0},
        {"d": 1.5},
        {"workers": 0},
        {"compute_s": 0.0},
        {"compute_s": -1.0},
        {"bandwidth_bps": 0.0},
        {"bandwidth_bps": -1.0},
        {"bandwidth_bps": math.inf},
        {"bandwidth_bps": math.nan},
        {"latency_s": -0.1},
        {"latency_s": math.nan},
        {"delta_min": 0.0},
        {"delta_min": 1.5},
        {"tau_max": -1},
        {"kappa": -1.0},
        {"grid_points": 1},
        {"topology": "star"},
    ],
)
def test_plan_rejects_bad_input(kwargs: dict) -> None:
    args = {"d": D, "workers": 4, "compute_s": 0.1, "bandwidth_bps": 1e8, "latency_s": 0.2}
    args.update(kwargs)
    with pytest.raises(DecobenchError):
        plan(**args)


# --- properties ------------------------------------------------------------------------


def _brute_bubble_free_count(
    tau: int, d: int, T: float, a: float, b: float, topology: str, n: int
) -> int:
    """Largest k whose own message (dense factors iff k == d) meets the bubble-free test."""
    best = 0
    for k in range(1, d + 1):
        f = topology_factors(topology, n, dense=k == d)
        budget = min(T, tau * T - f.l * b)
        if budget < 0:
            continue
        if k == d:
            fits = f.h * dense_wire_bits(d) <= a * budget
        else:
            fits = f.h == 0 or topk_wire_bits(k, d) <= a * budget / f.h
        if fits:
            best = k
    return best


@settings(max_examples=200, deadline=None)
@given(
    tau=st.integers(0, 12),
    d=st.integers(1, 300),
    T=st.floats(1e-3, 1.0),
    a=st.floats(1e2, 1e6),
    b=st.floats(0.0, 0.5),
    topology=st.sampled_from(TOPOLOGIES),
    n=st.integers(1, 8),
)
def test_bubble_free_count_matches_brute_force(
    tau: int, d: int, T: float, a: float, b: float, topology: str, n: int
) -> None:
    sparse = topology_factors(topology, n, dense=False)
    dense = topology_factors(topology, n, dense=True)
    assert bubble_free_count(tau, d, T, a, b, sparse, dense) == _brute_bubble_free_count(
        tau, d, T, a, b, topology, n
    )


@settings(max_examples=200, deadline=None)
@given(
    d=st.integers(1, 10**8),
    n=st.integers(1, 16),
    T=st.floats(1e-3, 1.0),
    a=st.floats(1e4, 1e11),
    b=st.one_of(st.just(0.0), st.floats(0.0, 1.0)),
    topology=st.sampled_from(TOPOLOGIES),
    tau_max=st.integers(0, 40),
    delta_min=st.sampled_from([1e-4, 1e-3, 0.05, 1.0]),
)
def test_plan_properties(
    d: int, n: int, T: float, a: float, b: float, topology: str, tau_max: int, delta_min: float
) -> None:
    result = plan(
        d, n, T, a, b, topology=topology, tau_max=tau_max, delta_min=delta_min, grid_points=16
    )
    k = topk_count(result.delta, d)
    assert k / d == result.delta or (k == d and result.delta == 1.0)
    assert k >= topk_count(delta_min, d)
    assert 0 <= result.staleness <= tau_max
    assert result.phi == phi_paper(result.delta, result.staleness)
    f = topology_factors(topology, n, dense=k == d)
    bits = topk_wire_bits(k, d)
    closed = t_avg(T, bits, a, b, result.staleness, f.h, f.l)
    if result.bubble_free:
        assert result.t_avg_s == T
        assert closed == pytest.approx(T, rel=1e-9)
        budget = min(T, result.staleness * T - f.l * b)
        assert f.h * bits / a <= budget * (1 + 1e-9) + 1e-15
        assert result.objective == result.phi
        # ties to the smallest τ: no smaller τ is bubble-free with a Φ as small
        sparse = topology_factors(topology, n, dense=False)
        dense = topology_factors(topology, n, dense=True)
        for tau in range(result.staleness):
            kk = bubble_free_count(tau, d, T, a, b, sparse, dense)
            if kk >= topk_count(delta_min, d):
                assert phi_paper(1.0 if kk == d else kk / d, tau) > result.phi
    else:
        assert result.t_avg_s == closed
        assert result.objective == pytest.approx(closed * (1 + math.sqrt(result.phi)))
        assert closed > T or math.isclose(closed, T)


@settings(max_examples=200, deadline=None)
@given(
    d=st.integers(1, 10**8),
    n=st.integers(1, 16),
    T=st.floats(1e-3, 1.0),
    a=st.floats(1e4, 1e11),
    b=st.one_of(st.just(0.0), st.floats(0.0, 1.0)),
    topology=st.sampled_from(TOPOLOGIES),
    tau_max=st.integers(0, 12),
    phi_name=st.sampled_from(sorted(PHI_MODELS)),
)
def test_time_to_accuracy_properties(
    d: int, n: int, T: float, a: float, b: float, topology: str, tau_max: int, phi_name: str
) -> None:
    phi = get_phi(phi_name)
    kwargs = dict(topology=topology, tau_max=tau_max, phi=phi, grid_points=16)
    result = plan(d, n, T, a, b, objective="time-to-accuracy", **kwargs)
    k = topk_count(result.delta, d)
    assert 0 <= result.staleness <= tau_max and k >= topk_count(1e-4, d)
    assert result.phi == phi(result.delta, result.staleness)
    f = topology_factors(topology, n, dense=k == d)
    closed = t_avg(T, topk_wire_bits(k, d), a, b, result.staleness, f.h, f.l)
    if result.bubble_free:
        assert result.t_avg_s == T and closed == pytest.approx(T, rel=1e-9)
    else:
        assert result.t_avg_s == closed
    assert result.objective == pytest.approx(result.t_avg_s * (1 + math.sqrt(result.phi)))
    # it minimises J over a set that holds Algorithm 1's plan, so it never predicts worse
    paper = plan(d, n, T, a, b, **kwargs)
    paper_j = paper.t_avg_s * (1 + math.sqrt(paper.phi))
    assert result.objective <= paper_j * (1 + 1e-12)
