"""Trace generators: constant, steps, seeded random walk and on/off congestion.

Pure functions; each returns a :class:`decobench.netem.trace.Trace`. Arguments use the CSV units:
times and durations in seconds, bandwidth in Mbit/s, latency in ms. Every generator that is
given a duration D writes its rows so that the trace's period (see :mod:`decobench.netem.trace`) is D, so
``trace.with_loop(True)`` repeats it every D seconds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from itertools import pairwise

from decobench.netem.trace import Trace, TraceError, as_trace

DECIMALS: int = 3
"""Generated bandwidth (Mbit/s) and latency (ms) values are rounded to this many decimals."""

TIME_DECIMALS: int = 6
"""Generated row times (s) are rounded to this many decimals (1 µs)."""


def _require(ok: bool, where: str, message: str) -> None:
    if not ok:
        raise TraceError(f"{where}: {message}")


def _finite_positive(x: float) -> bool:
    return math.isfinite(x) and x > 0.0


def constant(bandwidth_mbps: float, latency_ms: float, name: str | None = None) -> Trace:
    """A one-row trace: a(t) = bandwidth_mbps, b(t) = latency_ms for all t (period infinite)."""
    _require(_finite_positive(bandwidth_mbps), "constant", "bandwidth_mbps must be > 0")
    _require(math.isfinite(latency_ms) and latency_ms >= 0, "constant", "latency_ms must be >= 0")
    label = name or f"constant {bandwidth_mbps:g} Mbit/s {latency_ms:g} ms"
    return as_trace([0.0], [bandwidth_mbps], [latency_ms], name=label)


def steps(levels: Sequence[tuple[float, float, float]], name: str | None = None) -> Trace:
    """Consecutive steps ``(duration_s, bandwidth_mbps, latency_ms)``.

    Step j starts at ``t_j = sum_{i<j} duration_i`` (rounded to 1 µs). To make the period equal
    ``sum_i duration_i`` under the period rule (the last row lasts as long as the row before
    it), a last step whose duration differs from the previous one is written as two rows of
    half its duration each. A single step gives a constant (one-row) trace.
    """
    _require(len(levels) > 0, "steps", "at least one step is required")
    rows: list[tuple[float, float, float]] = []
    for j, level in enumerate(levels):
        _require(len(level) == 3, "steps", f"step {j + 1}: expected (duration_s, mbps, ms)")
        d, a, b = (float(x) for x in level)
        _require(_finite_positive(d), "steps", f"step {j + 1}: duration_s must be > 0")
        _require(_finite_positive(a), "steps", f"step {j + 1}: bandwidth_mbps must be > 0")
        _require(math.isfinite(b) and b >= 0, "steps", f"step {j + 1}: latency_ms must be >= 0")
        rows.append((d, a, b))
    times: list[float] = []
    t = 0.0
    for d, _, _ in rows:
        times.append(round(t, TIME_DECIMALS))
        t += d
    bandwidth = [a for _, a, _ in rows]
    latency = [b for _, _, b in rows]
    if len(rows) >= 2 and rows[-1][0] != rows[-2][0]:
        times.append(round(times[-1] + rows[-1][0] / 2.0, TIME_DECIMALS))
        bandwidth.append(bandwidth[-1])
        latency.append(latency[-1])
    _require(
        all(t1 > t0 for t0, t1 in pairwise(times)),
        "steps",
        "step durations are too short for 1 µs time resolution",
    )
    label = name or "steps " + " ".join(f"{d:g}s@{a:g}Mbps/{b:g}ms" for d, a, b in rows)
    return as_trace(times, bandwidth, latency, name=label)


def _row_count(duration_s: float, step_s: float, where: str) -> int:
    """Number of rows n = duration_s / step_s, which must be a whole number >= 1."""
    _require(_finite_positive(duration_s), where, "duration_s must be > 0")
    _require(_finite_positive(step_s), where, "step_s must be > 0")
    n = round(duration_s / step_s)
    _require(
        n >= 1 and math.isclose(n * step_s, duration_s, rel_tol=1e-9),
        where,
        f"duration_s ({duration_s:g}) must be a whole multiple of step_s ({step_s:g})",
    )
    _require(step_s >= 10.0**-TIME_DECIMALS, where, "step_s must be >= 1e-6")
    return n


def random_walk(
    mean_mbps: float,
    latency_ms: float,
    duration_s: float,
    step_s: float,
    sigma: float,
    low_mbps: float,
    high_mbps: float,
    seed: int,
    latency_jitter_ms: float = 0.0,
    reversion: float = 0.1,
    name: str | None = None,
    stationary_mean: bool = False,
) -> Trace:
    """A seeded, mean-reverting random walk of log-bandwidth, clipped to [low, high].

    Rows at ``t_i = i * step_s`` for ``i = 0 .. n-1``, ``n = duration_s / step_s`` (so the
    period is duration_s). With ``mu = ln(mean_mbps)``, ``x_0 = clip(mu)`` and, for i >= 0,
    an Ornstein-Uhlenbeck (AR(1)) step in log space::

        x_{i+1} = clip( x_i + reversion * (mu - x_i) + sigma * eps_i ),  eps_i ~ N(0, 1)
        clip(x) = min(max(x, ln(low)), ln(high))
        low = ceil(1000 * low_mbps) / 1000,  high = floor(1000 * high_mbps) / 1000
        bandwidth_i = round(exp(x_i), 3) Mbit/s

    Unclipped, the stationary standard deviation of x is
    ``s = sigma / sqrt(1 - (1 - reversion)^2)``, so ``exp(x)`` has median ``mean_mbps`` and
    mean ``mean_mbps * exp(s^2 / 2)``. With ``stationary_mean=True`` the walk reverts to
    ``mu = ln(mean_mbps) - s^2 / 2`` instead, so that the unclipped stationary mean of the
    bandwidth is ``mean_mbps`` (needs ``reversion > 0``). Latency is
    ``latency_i = max(0, round(latency_ms + U(-j, j), 3))`` with ``j = latency_jitter_ms``.

    Determinism: ``eps_i`` come from ``random.Random(seed).gauss`` and the latency jitter from
    a separate ``random.Random(f"latency:{seed}")`` (so the bandwidth path does not depend on
    the jitter); values are rounded to 3 decimals so files are stable across platforms.
    """
    where = "random_walk"
    n = _row_count(duration_s, step_s, where)
    _require(_finite_positive(mean_mbps), where, "mean_mbps must be > 0")
    _require(math.isfinite(low_mbps) and low_mbps >= 0.001, where, "low_mbps must be >= 0.001")
    _require(
        math.isfinite(high_mbps) and high_mbps >= low_mbps, where, "need high_mbps >= low_mbps"
    )
    _require(math.isfinite(sigma) and sigma >= 0, where, "sigma must be >= 0")
    _require(0.0 <= reversion <= 1.0, where, "reversion must be in [0, 1]")
    _require(math.isfinite(latency_ms) and latency_ms >= 0, where, "latency_ms must be >= 0")
    _require(
        math.isfinite(latency_jitter_ms) and latency_jitter_ms >= 0,
        where,
        "latency_jitter_ms must be >= 0",
    )
    _require(not stationary_mean or reversion > 0.0, where, "stationary_mean needs reversion > 0")
    bw_rng = random.Random(seed)
    lat_rng = random.Random(f"latency:{seed}")
    scale = 10.0**DECIMALS
    low3 = math.ceil(low_mbps * scale - 1e-6) / scale  # tolerance: 5.0 * 1000 may not be 5000
    high3 = math.floor(high_mbps * scale + 1e-6) / scale
    _require(low3 <= high3, where, "[low_mbps, high_mbps] must contain a multiple of 0.001")
    mu, lo, hi = math.log(mean_mbps), math.log(low3), math.log(high3)
    if stationary_mean:
        mu -= stationary_log_variance(sigma, reversion) / 2.0
    x = min(max(mu, lo), hi)
    times: list[float] = []
    bandwidth: list[float] = []
    latency: list[float] = []
    for i in range(n):
        times.append(round(i * step_s, TIME_DECIMALS))
        bandwidth.append(min(max(round(math.exp(x), DECIMALS), low3), high3))
        jitter = (
            lat_rng.uniform(-latency_jitter_ms, latency_jitter_ms) if latency_jitter_ms else 0.0
        )
        latency.append(max(0.0, round(latency_ms + jitter, DECIMALS)))
        x = min(max(x + reversion * (mu - x) + sigma * bw_rng.gauss(0.0, 1.0), lo), hi)
    label = name or (
        f"random walk mean {mean_mbps:g} Mbit/s in [{low_mbps:g}, {high_mbps:g}], "
        f"{'stationary mean, ' if stationary_mean else ''}sigma {sigma:g}, reversion {reversion:g}, step {step_s:g} s, seed {seed}, "
        f"{latency_ms:g}+-{latency_jitter_ms:g} ms"
    )
    return as_trace(times, bandwidth, latency, name=label)


def stationary_log_variance(sigma: float, reversion: float) -> float:
    """Stationary variance ``sigma^2 / (1 - (1 - reversion)^2)`` of the unclipped log walk."""
    _require(0.0 < reversion <= 1.0, "stationary_log_variance", "reversion must be in (0, 1]")
    return sigma * sigma / (1.0 - (1.0 - reversion) ** 2)


def on_off(
    high_mbps: float,
    low_mbps: float,
    latency_ms: float,
    duration_s: float,
    on_s: float,
    off_s: float,
    congested_latency_ms: float | None = None,
    name: str | None = None,
) -> Trace:
    """On/off congestion: ``on_s`` seconds at ``high_mbps``, then ``off_s`` at ``low_mbps``.

    The cycle repeats from t = 0 until ``duration_s`` (the last phase is cut at duration_s)::

        a(t) = high_mbps  if (t mod (on_s + off_s)) <  on_s   ("on": the link is clear)
               low_mbps   otherwise                          ("off": congested)
        b(t) = latency_ms in the on phase, congested_latency_ms (default latency_ms) when off

    Built with :func:`steps`, so the period is ``duration_s``.
    """
    where = "on_off"
    _require(_finite_positive(duration_s), where, "duration_s must be > 0")
    _require(
        _finite_positive(on_s) and _finite_positive(off_s), where, "on_s and off_s must be > 0"
    )
    _require(
        _finite_positive(high_mbps) and _finite_positive(low_mbps), where, "bandwidth must be > 0"
    )
    busy_ms = latency_ms if congested_latency_ms is None else congested_latency_ms
    phases = [(on_s, high_mbps, latency_ms), (off_s, low_mbps, busy_ms)]
    levels: list[tuple[float, float, float]] = []
    t = 0.0
    while duration_s - t > 10.0**-TIME_DECIMALS:
        d, a, b = phases[len(levels) % 2]
        d = min(d, duration_s - t)
        levels.append((d, a, b))
        t += d
    label = name or (
        f"on/off {on_s:g} s at {high_mbps:g} Mbit/s / {off_s:g} s at {low_mbps:g} Mbit/s, "
        f"{latency_ms:g}/{busy_ms:g} ms, {duration_s:g} s"
    )
    return steps(levels, name=label)
