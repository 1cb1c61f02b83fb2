"""Pure statistics of the report, against hand-computed values (reports/stats.py)."""

import math

import pytest

from decobench.reports.stats import (
    Obs,
    average_ranks,
    median,
    olympic_mean,
    range_text,
    ratio,
    spearman,
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
