"""Bits on the wire (docs/design.md §3)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decobench.clock.topology import TOPOLOGIES, TopologyFactors, topology_factors
from decobench.clock.wire import (
    dense_wire_bits,
    index_bits,
    max_topk_count_within,
    topk_count,
    topk_wire_bits,
    wire_bits,
)
from decobench.errors import DecobenchError


def test_index_bits_is_ceil_log2_at_least_one() -> None:
    assert index_bits(1) == 1
    assert index_bits(2) == 1
    assert index_bits(3) == 2
    assert index_bits(4) == 2
    assert index_bits(5) == 3
    assert index_bits(1_000_000) == 20  # 2^19 = 524288 < 1e6 <= 2^20 = 1048576
    assert index_bits(2**20) == 20
    assert index_bits(2**20 + 1) == 21
    for d in range(2, 5000):
        assert index_bits(d) == math.ceil(math.log2(d))


def test_topk_count_basic() -> None:
    assert topk_count(0.1, 10) == 1
    assert topk_count(0.15, 10) == 2  # ceil(1.5)
    assert topk_count(1e-9, 10) == 1  # at least one coordinate
    assert topk_count(1.0, 10) == 10
    assert topk_count(0.28125, 1_000_000) == 281_250
    assert topk_count(0.999999, 10) == 10  # ceil(9.99999), capped at d


def test_topk_count_round_trips_k_over_d_exhaustively_small() -> None:
    for d in range(1, 400):
        for k in range(1, d + 1):
            assert topk_count(k / d, d) == k, (k, d)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10**12), st.data())
def test_topk_count_round_trips_k_over_d(d: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(1, d))
    assert topk_count(k / d, d) == k


@pytest.mark.parametrize("bad", [0.0, -0.1, math.nan, math.inf])
def test_topk_count_rejects_bad_delta(bad: float) -> None:
    with pytest.raises(DecobenchError):
        topk_count(bad, 10)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_d_rejected(bad: object) -> None:
    with pytest.raises(DecobenchError):
        topk_count(0.5, bad)  # type: ignore[arg-type]
    with pytest.raises(DecobenchError):
        dense_wire_bits(bad)  # type: ignore[arg-type]


def test_topk_wire_bits_hand_values() -> None:
    d = 1_000_000  # L = 20, packed index costs 52 bits per kept value
    assert topk_wire_bits(1, d) == 52
    # k = 192_307: packed 52 k = 9_999_964, mask 32 k + d = 7_153_824 -> the mask wins
    assert topk_wire_bits(192_307, d) == 7_153_824
    # crossover of packed vs mask: 52 k <= 32 k + d  <=>  k <= d / 20 = 50_000
    assert topk_wire_bits(50_000, d) == 2_600_000 == 32 * 50_000 + d
    assert topk_wire_bits(10_000, d) == 520_000
    assert topk_wire_bits(100_000, d) == 4_200_000  # mask: 3.2e6 + 1e6
    assert topk_wire_bits(d, d) == 32 * d
    assert topk_wire_bits(0, d) == 0
    assert topk_wire_bits(281_250, d) == 10_000_000  # 32 * 281_250 + 1e6 = 1e7 exactly
    # tiny model: d = 8, L = 3; k=1: min(35, 40, 256) = 35
    assert topk_wire_bits(1, 8) == 35
    assert topk_wire_bits(8, 8) == 256


def test_dense_and_wire_bits() -> None:
    assert dense_wire_bits(10) == 320
    assert wire_bits(1.0, 10) == 320
    assert wire_bits(0.5, 10) == topk_wire_bits(5, 10)
    assert wire_bits(0.28125, 1_000_000) == 10_000_000


def test_topk_wire_bits_rejects_bad_k() -> None:
    for bad in (-1, 11, 1.5):
        with pytest.raises(DecobenchError):
            topk_wire_bits(bad, 10)  # type: ignore[arg-type]


def _brute_max_k(budget: float, d: int) -> int:
    fits = [k for k in range(d + 1) if topk_wire_bits(k, d) <= budget]
    return max(fits) if fits else 0


def test_max_topk_count_within_matches_brute_force_small() -> None:
    for d in (1, 2, 3, 7, 8, 9, 31, 32, 33, 64, 100, 257):
        budgets = sorted({topk_wire_bits(k, d) for k in range(d + 1)})
        probes = set()
        for b in budgets:
            probes.update({b - 1, b - 0.5, b, b + 0.5, b + 1})
        probes.update({-5, 0, 32 * d - 1, 32 * d, 32 * d + 1, 10**9, math.inf})
        for budget in probes:
            assert max_topk_count_within(budget, d) == _brute_max_k(budget, d), (budget, d)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3000), st.floats(-100, 1e6, allow_nan=False))
def test_max_topk_count_within_brute_force(d: int, budget: float) -> None:
    assert max_topk_count_within(budget, d) == _brute_max_k(budget, d)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 10**10), st.floats(0, 1e12, allow_nan=False))
def test_max_topk_count_within_is_the_largest(d: int, budget: float) -> None:
    k = max_topk_count_within(budget, d)
    assert 0 <= k <= d
    if k > 0:
        assert topk_wire_bits(k, d) <= budget
    if k < d:
        assert topk_wire_bits(k + 1, d) > budget


def test_max_topk_count_within_hand_value() -> None:
    # B = 1e7, d = 1e6: packed floor(1e7/52) = 192_307, mask floor(9e6/32) = 281_250
    assert max_topk_count_within(1e7, 1_000_000) == 281_250
    assert max_topk_count_within(math.inf, 5) == 5
    with pytest.raises(DecobenchError):
        max_topk_count_within(math.nan, 5)


def test_topology_factors() -> None:
    assert topology_factors("paper", 8, dense=False) == TopologyFactors(1.0, 1.0)
    assert topology_factors("paper", 8, dense=True) == TopologyFactors(1.0, 1.0)
    assert topology_factors("ring", 4, dense=False) == TopologyFactors(3.0, 3.0)
    assert topology_factors("ring", 4, dense=True) == TopologyFactors(1.5, 6.0)
    assert topology_factors("ring", 1, dense=True) == TopologyFactors(0.0, 0.0)
    assert topology_factors("ring", 1, dense=False) == TopologyFactors(0.0, 0.0)
    assert TOPOLOGIES == ("paper", "ring")


def test_topology_factors_bad_input() -> None:
    with pytest.raises(DecobenchError, match="paper, ring"):
        topology_factors("star", 4, dense=False)
    with pytest.raises(DecobenchError):
        topology_factors("ring", 0, dense=False)
