"""Planning for the network's variation, not its point estimate: the pieces of this
project's named variant ``deco-sgd-robust`` (docs/methods/deco-sgd-robust.md), never the
paper's DeCo (docs/design.md §5.7).

- :class:`SampleWindow`: the last ``size`` measurements of one quantity (â, b̂ or T̂). A
  sample more than ``outlier_factor`` times off the window's median, either way, is held
  back (a transfer stalled by TCP loss recovery, a shaper's burst, the first iteration's
  one-off compute); ``confirm`` such samples in a row on the same side are a change of
  level, not outliers: the window restarts from them. Read-time filtering drops what the
  window's own median says is an outlier, so a bad first sample cannot set a plan either.
- :func:`robust_plan`: for each τ, the largest δ whose *predicted bubble share* over the
  window's bandwidths stays within ``bubble_share``: with ``t_i = T_avg(δ, τ; a_i)`` the
  closed form of §4.4 at each sample ``a_i``, the share is ``1 − T̂ / mean_i t_i``. Then τ is
  chosen as Algorithm 1 chooses it (least Φ, ties to the smallest τ), or, with
  ``objective="time-to-accuracy"``, by ``J = mean_i t_i · (1 + κ sqrt(Φ))`` over every τ and
  δ (grid ∪ each τ's edge). With one sample and ``bubble_share = 0`` this is Algorithm 1.
- :func:`replan_period`: the re-plan period F from the measured rate of change of ``ln â``
  (a random walk drifts by ``σ sqrt(F)`` in F steps: F = (ln(1 + drift) / σ)², clamped).
- :func:`level_changed`: whether the recent bandwidth left the planned one by more than a
  factor (a re-plan triggered by change, not only by the period).
- :func:`theorem1_kappa`: κ of the objective from the paper's Theorem 1 and two measured
  quantities (docs/design.md §5.7).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence

from decobench.clock.timemodel import t_avg
from decobench.clock.topology import TopologyFactors, topology_factors
from decobench.clock.wire import topk_count, topk_wire_bits
from decobench.errors import DecobenchError
from decobench.planning.phi import PhiModel, phi_paper
from decobench.planning.planner import OBJECTIVES, Plan, check_inputs, delta_grid


class SampleWindow:
    """The recent samples of one measured quantity, robust to single bad ones (module
    docstring). ``outlier_factor = None`` keeps every sample (the filter off)."""

    def __init__(self, size: int = 50, outlier_factor: float | None = 4.0,
                 confirm: int = 3) -> None:
        if size < 1 or confirm < 1 or (outlier_factor is not None and outlier_factor <= 1):
            raise DecobenchError(f"sample window: size >= 1, confirm >= 1 and outlier factor "
                                 f"> 1 (or None), got {size}, {confirm}, {outlier_factor}")
        self.size, self.confirm = size, confirm
        self._log_limit = None if outlier_factor is None else math.log(outlier_factor)
        self._kept: deque[float] = deque(maxlen=size)
        self._held: list[float] = []
        self.level_changes = 0
        """How often ``confirm`` held-back samples in a row restarted the window."""

    def add(self, x: float) -> None:
        """One sample (finite, > 0)."""
        if not (math.isfinite(x) and x > 0):
            raise DecobenchError(f"a measured sample must be finite and > 0, got {x!r}")
        if self._log_limit is None or len(self._kept) < self.confirm:
            self._kept.append(x)
            return
        middle = statistics.median(self._kept)
        if abs(math.log(x / middle)) <= self._log_limit:
            self._kept.append(x)
            self._held.clear()
            return
        if self._held and (self._held[-1] > middle) != (x > middle):   # the other side
            self._held.clear()
        self._held.append(x)
        if len(self._held) >= self.confirm:           # a new level: restart from it
            self._kept.clear()
            self._kept.extend(self._held)
            self._held.clear()
            self.level_changes += 1

    def values(self) -> list[float]:
        """The kept samples within ``outlier_factor`` of their median (all, filter off)."""
        kept = list(self._kept)
        if self._log_limit is None or len(kept) < self.confirm:
            return kept
        middle = statistics.median(kept)
        return [x for x in kept if abs(math.log(x / middle)) <= self._log_limit]

    def median(self) -> float:
        values = self.values()
        if not values:
            raise DecobenchError("no samples yet")
        return statistics.median(values)

    def recent_median(self, last: int) -> float:
        """The median of the last ``last`` samples taken in, held-back ones included (what the
        link does now, before the window agrees it changed)."""
        recent = [*self._kept, *self._held][-last:]
        if not recent:
            raise DecobenchError("no samples yet")
        return statistics.median(recent)


def predicted_time(compute_s: float, bits: float, bandwidths: Sequence[float],
                   latency_s: float, tau: int, f: TopologyFactors) -> float:
    """Mean over the sampled bandwidths of the closed-form iteration time (design §4.4)."""
    return statistics.fmean(t_avg(compute_s, bits, a, latency_s, tau, f.h, f.l)
                            for a in bandwidths)


def _fits(k: int, d: int, tau: int, compute_s: float, bandwidths: Sequence[float],
          latency_s: float, f: TopologyFactors, bubble_share: float) -> bool:
    time_s = predicted_time(compute_s, topk_wire_bits(k, d), bandwidths, latency_s, tau, f)
    return compute_s >= (1.0 - bubble_share) * time_s


def largest_count_within(tau: int, d: int, compute_s: float, bandwidths: Sequence[float],
                         latency_s: float, sparse: TopologyFactors, dense: TopologyFactors,
                         bubble_share: float, k_min: int) -> int:
    """Largest ``k`` (``δ = k/d``) whose predicted bubble share is at most ``bubble_share``;
    0 if not even ``k_min`` fits. The share grows with k (W(k) and T_avg are monotone), so a
    binary search over ``[k_min, d − 1]`` finds it; the dense message (k = d, its own
    topology factors) is checked first, as :func:`decobench.planning.planner.bubble_free_count`
    does."""
    if _fits(d, d, tau, compute_s, bandwidths, latency_s, dense, bubble_share):
        return d
    sparse_top = d - 1 if sparse != dense else d
    if k_min > sparse_top or not _fits(k_min, d, tau, compute_s, bandwidths, latency_s, sparse,
                                       bubble_share):
        return 0
    lo, hi = k_min, sparse_top                  # lo fits; find the last k that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fits(mid, d, tau, compute_s, bandwidths, latency_s, sparse, bubble_share):
            lo = mid
        else:
            hi = mid - 1
    return lo


def robust_plan(d: int, workers: int, compute_s: float, bandwidths: Sequence[float],
                latency_s: float, *, topology: str = "paper", phi: PhiModel = phi_paper,
                tau_max: int = 32, delta_min: float = 1e-4, bubble_share: float = 0.05,
                kappa: float = 1.0, grid_points: int = 64, objective: str = "paper") -> Plan:
    """The plan (δ, τ) for a window of bandwidth samples (module docstring). ``Plan.bubble_free``
    says the predicted share is within ``bubble_share``; ``t_avg_s`` is the predicted mean
    iteration time over the samples."""
    if not bandwidths or not all(math.isfinite(a) and a > 0 for a in bandwidths):
        raise DecobenchError(f"invalid planner input: bandwidth samples must be finite and > 0, "
                             f"got {list(bandwidths)!r}")
    if not 0 <= bubble_share < 1:
        raise DecobenchError(f"invalid planner input: bubble share must be in [0, 1), got "
                             f"{bubble_share!r}")
    if objective not in OBJECTIVES:
        raise DecobenchError(f"invalid planner input: objective must be one of "
                             f"{', '.join(OBJECTIVES)}, got {objective!r}")
    check_inputs(d, workers, compute_s, min(bandwidths), latency_s, tau_max, delta_min, kappa,
                 grid_points)
    sparse = topology_factors(topology, workers, dense=False)
    dense = topology_factors(topology, workers, dense=True)
    k_min = topk_count(delta_min, d)

    def pair(k: int, tau: int) -> tuple[float, float, float]:
        f = dense if k == d else sparse
        time_s = predicted_time(compute_s, topk_wire_bits(k, d), bandwidths, latency_s, tau, f)
        delta = 1.0 if k == d else k / d
        return delta, time_s, phi(delta, tau)

    edges = {tau: largest_count_within(tau, d, compute_s, bandwidths, latency_s, sparse, dense,
                                       bubble_share, k_min) for tau in range(tau_max + 1)}
    best: Plan | None = None
    if objective == "paper":
        for tau, k in edges.items():
            if k < k_min:
                continue
            delta, time_s, value = pair(k, tau)
            if best is None or value < best.objective:
                best = Plan(delta, tau, True, time_s, value, value)
        if best is not None:
            return best
    grid = {topk_count(x, d) for x in delta_grid(delta_min, grid_points)}
    for tau in range(tau_max + 1):
        edge = edges[tau]
        counts = grid | ({edge} if edge >= k_min else set())
        for k in sorted(counts, reverse=True):
            delta, time_s, value = pair(k, tau)
            score = time_s * (1.0 + kappa * math.sqrt(value))
            if best is None or score < best.objective:
                best = Plan(delta, tau, k <= edge and edge >= k_min, time_s, value, score)
    assert best is not None                      # the grid always holds δ = 1
    return best


def replan_period(bandwidths: Sequence[float], shortest: int, longest: int,
                  drift: float = 0.2) -> int:
    """F from the window's rate of change: ``σ²`` = the mean of ``(ln a_i − ln a_{i−1})²``
    over consecutive samples (per iteration; a link that holds still for m iterations and
    then jumps by s has σ² = s²/m). A random walk drifts by about ``σ sqrt(F)`` in F steps, so
    F = ``(ln(1 + drift) / σ)²``, clamped to ``[shortest, longest]`` (``longest`` when the
    link did not move)."""
    steps = [math.log(b / a) ** 2 for a, b in zip(bandwidths, bandwidths[1:], strict=False)]
    sigma = math.sqrt(statistics.fmean(steps)) if steps else 0.0
    if sigma <= 0:
        return longest
    return max(shortest, min(longest, round((math.log1p(drift) / sigma) ** 2)))


def level_changed(planned: float, now: float, factor: float) -> bool:
    """Whether ``now`` is more than ``factor`` times away from ``planned`` (either way)."""
    return abs(math.log(now / planned)) > math.log(factor)


def theorem1_kappa(signal: float, noise: float, workers: int) -> float:
    """κ of ``J = T_avg·(1 + κ sqrt(Φ))`` from the two leading terms of the paper's Theorem 1
    (docs/methods/deco-sgd-robust.md "Iteration model"): iterations to ``E||∇f||² <= ε`` are
    ``σ²/(nε²) + sqrt(Φ)·σ/ε^{3/2}`` = ``σ²/(nε²)·(1 + sqrt(Φ)·n sqrt(ε)/σ)``, so
    ``κ = n sqrt(ε)/σ``. ``signal`` estimates ``||∇f||²`` (taken as ε, the level the run works
    at now) and ``noise`` the variance of the mean of the n workers' gradients (``σ²/n``), so
    ``κ = sqrt(n · signal / noise)``; 0 when the signal is not positive (noise dominates).
    The theorem's O(·) constants are taken as 1."""
    if workers < 1 or not (math.isfinite(signal) and math.isfinite(noise)) or noise <= 0:
        raise DecobenchError(f"Theorem-1 κ: workers >= 1, finite signal and noise > 0, got "
                             f"{workers}, {signal!r}, {noise!r}")
    return math.sqrt(workers * signal / noise) if signal > 0 else 0.0
