"""Trace families for judging a planner on unseen networks (decobench.netem.families)."""

from __future__ import annotations

import pytest

from decobench.netem.families import (
    FAMILIES,
    HELD_OUT,
    TUNING,
    coefficient_of_variation,
    family_trace,
)
from decobench.netem.trace import TraceError


def test_tuning_and_held_out_split_the_families():
    assert set(TUNING) | set(HELD_OUT) == set(FAMILIES) and not set(TUNING) & set(HELD_OUT)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_realisation_is_a_pure_function_of_its_arguments(family):
    one = family_trace(family, 10.0, 200.0, 400.0, 3)
    two = family_trace(family, 10.0, 200.0, 400.0, 3)
    assert [one.bandwidth_at(t) for t in range(0, 400, 5)] == \
        [two.bandwidth_at(t) for t in range(0, 400, 5)]
    if family != "constant":
        other = family_trace(family, 10.0, 200.0, 400.0, 4)
        assert [one.bandwidth_at(t) for t in range(0, 400, 5)] != \
            [other.bandwidth_at(t) for t in range(0, 400, 5)]


def test_each_family_varies_as_it_says():
    cv = {f: coefficient_of_variation(family_trace(f, 10.0, 200.0, 400.0, 0), 400.0)
          for f in FAMILIES}
    assert cv["constant"] == 0.0
    assert cv["walk"] >= 0.3 and cv["high-latency"] == cv["walk"]
    # diurnal: exp(0.5 sin) has CV sqrt(I0(1) - I0(0.5)^2) / I0(0.5) = 0.346 (two full periods)
    assert cv["diurnal"] == pytest.approx(0.346, abs=0.005)
    assert family_trace("high-latency", 10.0, 200.0, 400.0, 0).mean_latency_s() == \
        pytest.approx(1.0)


def test_the_step_drop_falls_5x_and_comes_back():
    trace = family_trace("step-drop", 10.0, 200.0, 400.0, 1)
    levels = [trace.bandwidth_at(t) / 1e6 for t in range(0, 400, 5)]
    assert levels[0] == 10.0 and levels[-1] == 10.0 and min(levels) == pytest.approx(2.0)
    low = [i for i, a in enumerate(levels) if a < 10.0]
    assert low == list(range(low[0], low[-1] + 1))          # one contiguous drop
    assert 0.25 * 80 <= low[0] <= 0.5 * 80 and 0.1 * 80 <= len(low) <= 0.3 * 80


def test_bad_input_is_one_line():
    with pytest.raises(TraceError, match="unknown trace family"):
        family_trace("weekly", 10.0, 200.0, 400.0, 0)
    with pytest.raises(TraceError, match="mean bandwidth must be > 0"):
        family_trace("walk", 0.0, 200.0, 400.0, 0)
    with pytest.raises(TraceError, match="too short"):
        family_trace("step-drop", 10.0, 200.0, 10.0, 0)
