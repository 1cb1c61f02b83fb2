"""Pure statistics of the report, against hand-computed values (reports/stats.py)."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decobench.reports.stats import (
    Obs,
    average_ranks,
    interval_text,
    median,
    median_interval,
    olympic_mean,
    outcome,
    range_text,
    ratio,
    spearman,
    speedup_interval,
    step_band,
)


def obs(*values):
    """Numbers are measured values, strings '>X' are lower bounds (not reached)."""
    return [Obs(float(v[1:]), True) if isinstance(v, str) else Obs(float(v)) for v in values]


def test_median_without_censoring():
    assert median(obs(3, 1, 2)) == Obs(2.0)
    assert median(obs(4, 1, 3, 2)) == Obs(2.5)
    assert median(obs(7)) == Obs(7.0)


def test_median_with_censoring():
    # censored values rank after every measured one: 1, 2, >5 -> the middle is measured
    assert median(obs(1, ">5", 2)) == Obs(2.0)
    # 1, >4, >5 -> the middle is the bound 4
    assert median(obs(1, ">5", ">4")) == Obs(4.0, True)
    # even: 1, 2, >4, >5 -> (2 + 4) / 2 = 3, a lower bound
    assert median(obs(1, 2, ">5", ">4")) == Obs(3.0, True)
    assert median(obs(1, 2, ">5", ">4")).text() == "> 3.00"


def test_olympic_mean():
    assert olympic_mean(obs(5, 1, 3, 10)) == Obs(4.0)  # drop 1 and 10
    assert olympic_mean(obs(1, 2)) == Obs(1.5)  # fewer than 3: the plain mean
    assert olympic_mean(obs(1, 2, 3, ">4")) == Obs(2.5)  # the censored one is dropped
    assert olympic_mean(obs(1, ">3", ">4")) == Obs(3.0, True)
    assert olympic_mean(obs(2, ">6")) == Obs(4.0, True)


def test_range_and_ratio():
    assert range_text(obs(3, 1, 2)) == "[1.00, 3.00]"
    assert range_text(obs(80, 100, ">50")) == "[80.00, not reached]"
    assert range_text(obs(">50", ">60")) == "not reached"
    assert ratio(Obs(300.0), Obs(100.0)) == Obs(3.0)
    assert ratio(Obs(300.0, True), Obs(100.0)) == Obs(3.0, True)
    assert ratio(Obs(300.0), Obs(100.0, True)) is None


def test_average_ranks_share_ties_and_rank_inf_last():
    assert average_ranks([10, math.inf, 5, math.inf]).tolist() == [2.0, 3.5, 1.0, 3.5]
    assert average_ranks([2, 2, 2]).tolist() == [2.0, 2.0, 2.0]


def test_spearman_hand_computed_with_ties():
    # ranks x: 1, 2.5, 2.5, 4; ranks y: 1, 3, 2, 4; deviations (-1.5, 0, 0, 1.5) and
    # (-1.5, .5, -.5, 1.5): cov 4.5, var 4.5 and 5 -> 4.5 / sqrt(22.5)
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    assert spearman([1], [2]) is None


def test_step_band_holds_each_series_within_its_span():
    band = step_band([[(0.0, 0.1), (10.0, 0.5)], [(5.0, 0.2), (20.0, 0.6)]])
    assert band.times == (0.0, 5.0, 10.0, 20.0)
    assert band.median == pytest.approx((0.1, 0.15, 0.35, 0.6))
    assert band.low == pytest.approx((0.1, 0.1, 0.2, 0.6))
    assert band.high == pytest.approx((0.1, 0.2, 0.5, 0.6))
    assert band.count == (1, 2, 2, 1)


def test_speedup_interval_hand_checked():
    """Seeds with speed-ups 3, 5.56 and 3.33 (d-sgd 300/500/400 s over deco 100/90/120 s):
    with three seeds the percentile bootstrap of a median spans the per-seed extremes (a
    resample's median is the smallest value with probability 7/27 > 2.5%)."""
    method = [Obs(100.0), Obs(90.0), Obs(120.0)]
    baseline = [Obs(300.0), Obs(500.0), Obs(400.0)]
    low, high = speedup_interval(method, baseline)
    assert low == pytest.approx(3.0) and high == pytest.approx(500 / 90)
    assert outcome((low, high)) == "faster" and interval_text((low, high)) == "[3.00x, 5.56x]"
    assert speedup_interval([Obs(100.0)], [Obs(300.0)]) is None           # one seed
    assert outcome(None) == "inconclusive" and interval_text(None) == "n/a (one seed)"
    assert outcome((0.5, 0.9)) == "slower" and outcome((0.9, 1.2)) == "inconclusive"
    # a censored method time reads as +inf at the lower end: no lower bound above 0 when
    # a resample's median can fall on it; a censored baseline leaves the upper end open
    low, high = speedup_interval([Obs(100.0, True), Obs(90.0), Obs(120.0)],
                                 [Obs(300.0), Obs(500.0, True), Obs(400.0)])
    assert low == 0.0 and math.isinf(high)
    # the same draws twice: the report is a pure function of its runs
    assert speedup_interval(method, baseline) == speedup_interval(method, baseline)


def test_median_interval_of_a_ratio_of_ratios():
    """Four paired columns with constant ratios: the statistic is exact, so is the interval."""
    columns = [[300.0, 310.0], [100.0, 100.0], [120.0, 120.0], [100.0, 100.0]]
    low, high = median_interval(columns, lambda m: (m[0] / m[1]) / (m[2] / m[3]))
    assert low == pytest.approx(2.5) and high == pytest.approx(3.1 / 1.2)
    assert median_interval([[1.0], [2.0]], lambda m: m[0]) is None
    with pytest.raises(ValueError, match="unpaired"):
        median_interval([[1.0, 2.0], [2.0]], lambda m: m[0])


times = st.floats(min_value=1.0, max_value=1e4, allow_nan=False)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(times, times, st.booleans(), st.booleans()), min_size=2, max_size=6))
def test_speedup_interval_lies_within_the_per_seed_extremes_and_censoring_widens_it(rows):
    """Paired seeds: every resample's ratio of medians lies between the smallest and the
    largest per-seed ratio (the median is monotone and scales), so the interval does; read
    with censored values it contains the interval of the same values read as exact."""
    method = [Obs(a) for a, _, _, _ in rows]
    baseline = [Obs(b) for _, b, _, _ in rows]
    ratios = [b / a for a, b, _, _ in rows]
    low, high = speedup_interval(method, baseline)
    assert min(ratios) * (1 - 1e-12) <= low <= high <= max(ratios) * (1 + 1e-12)
    censored_low, censored_high = speedup_interval(
        [Obs(a, ca) for a, _, ca, _ in rows], [Obs(b, cb) for _, b, _, cb in rows])
    assert censored_low <= low * (1 + 1e-12) and censored_high >= high * (1 - 1e-12)
