"""Pure statistics of the report: censored medians, olympic means, ranks, median curves.

Rules (docs/reports.md "Rules"; deco-sgd.md §6 "Metrics"):

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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
