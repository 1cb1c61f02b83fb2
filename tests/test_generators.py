"""Trace generators: hand-checked rows, periods, determinism and bounds."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decobench.netem.generators import constant, on_off, random_walk, steps
from decobench.netem.trace import TraceError, parse_trace_csv


def rows(trace):  # type: ignore[no-untyped-def]
    """(time s, Mbit/s, ms) rows of a trace, rounded against unit-conversion noise."""
    return [
        (t, round(a / 1e6, 9), round(b * 1e3, 9))
        for t, a, b in zip(trace.times_s, trace.bandwidth_bps, trace.latency_s, strict=True)
    ]


def test_constant() -> None:
    trace = constant(20, 100)
    assert rows(trace) == [(0.0, 20.0, 100.0)]
    assert trace.period_s == math.inf
    assert trace.bandwidth_at(1e6) == 20e6
    with pytest.raises(TraceError, match="^constant: bandwidth"):
        constant(0, 100)
    with pytest.raises(TraceError, match="latency"):
        constant(1, -1)


def test_steps_equal_durations() -> None:
    trace = steps([(120, 300, 150), (120, 100, 150), (120, 30, 150), (120, 100, 150)])
    assert rows(trace) == [
        (0.0, 300.0, 150.0),
        (120.0, 100.0, 150.0),
        (240.0, 30.0, 150.0),
        (360.0, 100.0, 150.0),
    ]
    assert trace.period_s == 480.0


def test_steps_split_a_last_step_of_different_length_so_period_is_the_total() -> None:
    trace = steps([(10, 5, 20), (30, 7, 40)])
    assert rows(trace) == [(0.0, 5.0, 20.0), (10.0, 7.0, 40.0), (25.0, 7.0, 40.0)]
    assert trace.period_s == 40.0
    looped = trace.with_loop(True)
    assert looped.bandwidth_at(39.9) == 7e6 and looped.bandwidth_at(40.0) == 5e6


def test_single_step_is_constant() -> None:
    trace = steps([(10, 5, 20)])
    assert rows(trace) == [(0.0, 5.0, 20.0)]


@pytest.mark.parametrize(
    "levels",
    [[], [(0, 1, 1)], [(1, 0, 1)], [(1, 1, -1)], [(1, 1)], [(math.inf, 1, 1)]],
)
def test_steps_rejects_bad_levels(levels) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TraceError, match="^steps: "):
        steps(levels)


WALK = dict(
    mean_mbps=20.0,
    latency_ms=200.0,
    duration_s=600.0,
    step_s=5.0,
    sigma=0.3,
    low_mbps=5.0,
    high_mbps=60.0,
    seed=7,
    latency_jitter_ms=10.0,
)


def test_random_walk_is_deterministic_for_a_seed() -> None:
    a, b = random_walk(**WALK), random_walk(**WALK)
    assert a == b and a.to_csv() == b.to_csv()
    assert random_walk(**{**WALK, "seed": 8}).bandwidth_bps != a.bandwidth_bps


def test_random_walk_layout_and_bounds() -> None:
    trace = random_walk(**WALK)
    assert len(trace.times_s) == 120
    assert trace.times_s[:3] == (0.0, 5.0, 10.0) and trace.times_s[-1] == 595.0
    assert trace.period_s == 600.0
    assert trace.bandwidth_bps[0] == 20e6  # x_0 = ln(mean)
    mbps = [a / 1e6 for a in trace.bandwidth_bps]
    assert all(5.0 <= m <= 60.0 for m in mbps)
    assert all(round(m, 3) == m for m in mbps)
    ms = [b * 1e3 for b in trace.latency_s]
    assert all(190.0 <= m <= 210.0 for m in ms)
    assert len(set(ms)) > 100  # jitter is applied


def test_random_walk_jitter_does_not_change_the_bandwidth_path() -> None:
    plain = random_walk(**{**WALK, "latency_jitter_ms": 0.0})
    assert plain.bandwidth_bps == random_walk(**WALK).bandwidth_bps
    assert set(plain.latency_s) == {0.2}


def test_random_walk_mean_is_roughly_the_target() -> None:
    long = random_walk(**{**WALK, "duration_s": 50_000.0, "sigma": 0.1})
    # unclipped stationary sd of ln a: 0.1 / sqrt(1 - 0.9^2) = 0.229; E[a] = 20 e^{0.026}
    assert long.mean_bandwidth_bps() / 1e6 == pytest.approx(20.0 * math.exp(0.229**2 / 2), rel=0.1)


def test_random_walk_without_noise_stays_at_the_mean() -> None:
    trace = random_walk(**{**WALK, "sigma": 0.0, "latency_jitter_ms": 0.0})
    assert set(trace.bandwidth_bps) == {20e6}


def test_random_walk_reverts_toward_the_mean_from_a_clip() -> None:
    trace = random_walk(**{**WALK, "mean_mbps": 100.0, "sigma": 0.0})
    assert set(trace.bandwidth_bps) == {60e6}  # the mean is clipped into [low, high]


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"duration_s": 601.0}, "whole multiple"),
        ({"low_mbps": 0.0}, "low_mbps"),
        ({"high_mbps": 1.0}, "high_mbps"),
        ({"sigma": -1.0}, "sigma"),
        ({"reversion": 2.0}, "reversion"),
        ({"latency_jitter_ms": -1.0}, "jitter"),
        ({"step_s": 0.0}, "step_s"),
    ],
)
def test_random_walk_rejects_bad_arguments(change: dict, fragment: str) -> None:
    with pytest.raises(TraceError, match=fragment):
        random_walk(**{**WALK, **change})


@settings(max_examples=200, deadline=None)
@given(
    mean=st.floats(0.5, 500.0),
    low=st.integers(1, 10_000).map(lambda k: k / 1000),
    width=st.floats(1.0, 100.0),
    sigma=st.floats(0.0, 2.0),
    seed=st.integers(0, 2**32),
    jitter=st.floats(0.0, 500.0),
)
def test_random_walk_stays_in_range_and_round_trips(
    mean: float, low: float, width: float, sigma: float, seed: int, jitter: float
) -> None:
    high = low * width
    trace = random_walk(mean, 50.0, 100.0, 1.0, sigma, low, high, seed, latency_jitter_ms=jitter)
    slack = 1e-9  # high = low * width carries float noise, e.g. 0.011 * 5 = 0.05499999999999999
    assert all(
        low * 1e6 * (1 - slack) <= a <= high * 1e6 * (1 + slack) for a in trace.bandwidth_bps
    )
    assert all(b >= 0.0 for b in trace.latency_s)
    assert parse_trace_csv(trace.to_csv(), name=trace.name) == trace


def test_random_walk_rounds_clip_bounds_inward() -> None:
    trace = random_walk(1.0, 0.0, 10.0, 1.0, 5.0, 0.0015, 0.0025, seed=1)
    assert set(trace.bandwidth_bps) <= {2000.0}  # only 0.002 Mbit/s lies in [0.0015, 0.0025]
    with pytest.raises(TraceError, match="multiple of 0.001"):
        random_walk(1.0, 0.0, 10.0, 1.0, 5.0, 0.0011, 0.0019, seed=1)


def test_on_off() -> None:
    trace = on_off(100, 5, 50, duration_s=120, on_s=30, off_s=30, congested_latency_ms=80)
    assert rows(trace) == [
        (0.0, 100.0, 50.0),
        (30.0, 5.0, 80.0),
        (60.0, 100.0, 50.0),
        (90.0, 5.0, 80.0),
    ]
    assert trace.period_s == 120.0
    assert trace.with_loop(True).bandwidth_at(150.0) == 5e6
    assert trace.mean_bandwidth_bps() == pytest.approx(52.5e6)


def test_on_off_cuts_the_last_phase_at_the_duration() -> None:
    trace = on_off(10, 1, 5, duration_s=50, on_s=20, off_s=10)
    # phases 20 on, 10 off, 20 on; the last is longer than the one before, so it is split
    assert rows(trace) == [(0.0, 10.0, 5.0), (20.0, 1.0, 5.0), (30.0, 10.0, 5.0), (40.0, 10.0, 5.0)]
    assert trace.period_s == 50.0
    trace = on_off(10, 1, 5, duration_s=25, on_s=20, off_s=10)
    assert trace.period_s == 25.0 and trace.bandwidth_at(22.0) == 1e6


def test_on_off_rejects_bad_arguments() -> None:
    with pytest.raises(TraceError, match="^on_off: "):
        on_off(10, 1, 5, duration_s=50, on_s=0, off_s=10)
