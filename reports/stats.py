"""Pure statistics of the report: censored medians, olympic means, ranks, median curves.

Rules (docs/reports.md "Rules"; docs/design.md §6.5):

- A run that did not reach the target is *censored*: its time to target is unknown but larger
  than the simulated time it ran (its budget). It is an :class:`Obs` with ``censored=True`` and
  ``value`` = that lower bound.
- Ordering treats a censored value as slower than every value that was measured (``+inf``);
  censored values are ordered among themselves by their lower bounds. This is exact when the
  seeds of a cell share a budget, since a run that reached did so within it.
- A statistic that selects censored values is itself censored; its value is the statistic
  computed with those values replaced by their lower bounds (the tightest bound the data
  give), printed ``"> X"``.
- Median: the middle value, or the mean of the two middle values.
- Olympic mean (MLPerf): drop the single fastest and the single slowest value, average the
  rest. With fewer than 3 values it is the plain mean.
- Spearman's rank correlation: Pearson's correlation of average ranks (ties share the mean of
  the ranks they span).
- Interval of a speed-up (:func:`speedup_interval`): a paired percentile bootstrap over seeds.
  Each resample draws seeds with replacement (a seed carries both methods' runs, which share
  its network realisation and training seed); the statistic is the ratio of medians, as the
  figure is. Censored times enter at their bound on the side where that can only widen the
  interval: the lower end reads the baseline's censored times at their bound and the method's
  as +inf, the upper end the reverse. :data:`RESAMPLES` resamples from a generator seeded with
  :data:`BOOTSTRAP_SEED`, so a report is identical twice. With k seeds the percentile interval
  of a median is at best the range of the per-seed values, whose coverage of the median is
  1 − 2·(1/2)^k: 75 % with 3 seeds, 94 % with 5 (docs/reports.md "Intervals").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Obs:
    """A measured value, or (``censored``) a lower bound on a value not observed."""

    value: float
    censored: bool = False

    def sort_key(self) -> tuple[bool, float]:
        return (self.censored, self.value)

    def text(self, fmt: str = "{:.2f}") -> str:
        """``"12.34"`` or ``"> 12.34"`` for a lower bound."""
        return ("> " if self.censored else "") + fmt.format(self.value)


def _ordered(values: Sequence[Obs]) -> list[Obs]:
    if not values:
        raise ValueError("no values")
    return sorted(values, key=Obs.sort_key)


def _mean_of(selected: Sequence[Obs]) -> Obs:
    return Obs(float(sum(o.value for o in selected) / len(selected)),
               any(o.censored for o in selected))


def median(values: Sequence[Obs]) -> Obs:
    """Median with censoring (module docstring)."""
    ordered = _ordered(values)
    n = len(ordered)
    middle = ordered[n // 2: n // 2 + 1] if n % 2 else ordered[n // 2 - 1: n // 2 + 1]
    return _mean_of(middle)


def olympic_mean(values: Sequence[Obs]) -> Obs:
    """Mean without the single fastest and single slowest value; the plain mean below 3."""
    ordered = _ordered(values)
    return _mean_of(ordered[1:-1] if len(ordered) >= 3 else ordered)


def value_range(values: Sequence[Obs]) -> tuple[Obs, Obs]:
    """(fastest, slowest) in the censoring order."""
    ordered = _ordered(values)
    return ordered[0], ordered[-1]


def range_text(values: Sequence[Obs], fmt: str = "{:.2f}") -> str:
    """``"[min, max]"``; a censored end prints ``not reached`` (its lower bound may be below
    the measured minimum, e.g. a seed that diverged early), all censored ``"not reached"``."""
    low, high = value_range(values)
    if low.censored:
        return "not reached"
    return f"[{low.text(fmt)}, {'not reached' if high.censored else high.text(fmt)}]"


def ratio(numerator: Obs, denominator: Obs) -> Obs | None:
    """``numerator / denominator``; a lower bound when only the numerator is censored.

    ``None`` when the denominator is censored (an upper bound on it gives no bound on the
    ratio from below) or zero.
    """
    if denominator.censored or denominator.value <= 0:
        return None
    return Obs(numerator.value / denominator.value, numerator.censored)


RESAMPLES = 10_000
"""Bootstrap resamples of :func:`speedup_interval`."""
BOOTSTRAP_SEED = 20_250_723
"""Seed of the bootstrap's generator (fixed: a report is a pure function of its runs)."""
LEVEL = 0.95
"""Two-sided level of the intervals."""


def _medians(columns: Sequence[np.ndarray], resamples: int, seed: int) -> list[np.ndarray]:
    """Median of each column over the same ``resamples`` draws of row indices with
    replacement (paired: row i of every column is one seed)."""
    n = len(columns[0])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    return [np.median(c[idx], axis=1) for c in columns]


def _values(values: Sequence[Obs], censored_as: float | None = None) -> np.ndarray:
    """The values, censored ones at their bound or at ``censored_as``."""
    return np.array([censored_as if o.censored and censored_as is not None else o.value
                     for o in values], dtype=float)


def ratio_interval(numerators: Sequence[Obs], denominators: Sequence[Obs],
                   level: float = LEVEL, resamples: int = RESAMPLES,
                   seed: int = BOOTSTRAP_SEED) -> tuple[float, float] | None:
    """Paired bootstrap interval of median(numerators) / median(denominators) (module
    docstring: censored values widen it). ``None`` with fewer than 2 pairs: one seed gives
    no interval."""
    if len(numerators) != len(denominators):
        raise ValueError(f"unpaired values ({len(numerators)} != {len(denominators)})")
    if len(numerators) < 2:
        return None
    # a censored value is a lower bound: at its bound it can only shrink its side of the
    # ratio, at +inf only grow it
    a, b, c, d = _medians([_values(numerators), _values(denominators, censored_as=math.inf),
                           _values(numerators, censored_as=math.inf), _values(denominators)],
                          resamples, seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        low = np.where(np.isinf(b), 0.0, a / b)
        high = np.where(np.isinf(c) | (d <= 0), math.inf, c / np.where(d > 0, d, 1.0))
    tail = (1.0 - level) / 2.0
    return (float(np.quantile(low, tail, method="lower")),
            float(np.quantile(high, 1.0 - tail, method="higher")))


def median_interval(columns: Sequence[Sequence[float]],
                    statistic: Callable[[list[np.ndarray]], np.ndarray],
                    level: float = LEVEL, resamples: int = RESAMPLES,
                    seed: int = BOOTSTRAP_SEED) -> tuple[float, float] | None:
    """Paired bootstrap interval of ``statistic`` of the columns' medians (row i of every
    column is seed i; ``statistic`` maps the resampled medians, one array per column, to one
    array of values). ``None`` with fewer than 2 rows."""
    if len({len(c) for c in columns}) != 1:
        raise ValueError("unpaired columns")
    if len(columns[0]) < 2:
        return None
    values = statistic(_medians([np.asarray(c, dtype=float) for c in columns], resamples,
                                seed))
    tail = (1.0 - level) / 2.0
    return (float(np.quantile(values, tail, method="lower")),
            float(np.quantile(values, 1.0 - tail, method="higher")))


def speedup_interval(method: Sequence[Obs], baseline: Sequence[Obs],
                     level: float = LEVEL) -> tuple[float, float] | None:
    """Interval of the speed-up median(baseline) / median(method) over paired seeds
    (``method[i]`` and ``baseline[i]`` share seed i); ``None`` with fewer than 2 seeds."""
    return ratio_interval(baseline, method, level)


def interval_text(interval: tuple[float, float] | None, fmt: str = "{:.2f}x") -> str:
    """``"[1.20x, 2.31x]"``; ``"n/a (one seed)"`` without an interval."""
    if interval is None:
        return "n/a (one seed)"
    low, high = interval
    high_text = "inf" if math.isinf(high) else fmt.format(high)
    return f"[{fmt.format(low)}, {high_text}]"


def outcome(interval: tuple[float, float] | None) -> str:
    """``faster`` (the interval lies above 1), ``slower`` (below 1) or ``inconclusive``
    (it holds 1, or there is none)."""
    if interval is None:
        return "inconclusive"
    if interval[0] > 1.0:
        return "faster"
    if interval[1] < 1.0:
        return "slower"
    return "inconclusive"


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n; tied values (``inf`` included) share the mean of the ranks they span."""
    x = np.asarray(values, dtype=float)
    if np.isnan(x).any():
        raise ValueError("ranks of NaN are undefined")
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=float)
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rho with average ranks for ties; ``None`` if either side is constant or
    there are fewer than 2 pairs."""
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length ({len(x)} != {len(y)})")
    if len(x) < 2:
        return None
    rx, ry = average_ranks(x), average_ranks(y)
    dx, dy = rx - rx.mean(), ry - ry.mean()
    denominator = math.sqrt(float((dx * dx).sum()) * float((dy * dy).sum()))
    if denominator == 0.0:
        return None
    return float((dx * dy).sum()) / denominator


@dataclass(frozen=True)
class Band:
    """Median and min–max of several step-wise series on a common grid."""

    times: tuple[float, ...]
    median: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    count: tuple[int, ...]


def step_band(series: Sequence[Sequence[tuple[float, float]]]) -> Band:
    """Median, min and max across series of ``(time, value)`` points on the union grid.

    Each series holds its last point until its next one (step-wise hold) and contributes only
    within its own span ``[first time, last time]``. Points must be sorted by time.
    """
    grid = sorted({t for s in series for t, _ in s})
    med: list[float] = []
    low: list[float] = []
    high: list[float] = []
    count: list[int] = []
    for t in grid:
        current = []
        for s in series:
            if not s or t < s[0][0] or t > s[-1][0]:
                continue
            current.append(next(v for tt, v in reversed(s) if tt <= t))
        med.append(float(np.median(current)))
        low.append(min(current))
        high.append(max(current))
        count.append(len(current))
    return Band(tuple(grid), tuple(med), tuple(low), tuple(high), tuple(count))
