"""Trace families for judging a planner on networks it was not tuned on (issue 42 point 4;
docs/methods/deco-sgd-robust.md).

A family is a recipe around a link's mean bandwidth and one-way latency; a seed draws one
realisation of it. Five families, each with the variation one condition of the issue names:

- ``constant``: the mean, all the time (no variation; the seed changes nothing);
- ``walk``: the section-5.2 kind of network, a mean-reverting random walk of log-bandwidth
  in 5 s steps (σ 0.3 per step, reversion 0.1, within [mean/5, 3·mean]), stationary mean
  the given one (:func:`decobench.netem.generators.random_walk`);
- ``step-drop``: the mean, then a 5x fall for 10-30% of the trace starting between 25% and
  50% of it (the seed draws both), then the mean again;
- ``diurnal``: slow swings, ``a(t) = mean · exp(0.5 sin(2π t / (D/2) + φ))`` sampled every
  5 s, two periods per trace, the phase φ drawn by the seed;
- ``high-latency``: the ``walk`` with 5x the latency (λ = b/T five times the base
  condition's: a run at λ ≈ 1 goes to λ ≈ 5).

:data:`TUNING` and :data:`HELD_OUT` split them: a planner's constants are chosen on the
tuning families (their seeds :data:`TUNING_SEEDS`) and judged on the held-out family it never
saw (and on the bundled pack). Every realisation is a pure function of (family, mean,
latency, duration, seed): the same arguments give the same trace file everywhere.
"""

from __future__ import annotations

import math
import random

from decobench.netem import generators
from decobench.netem.trace import Trace, TraceError

FAMILIES = ("constant", "walk", "step-drop", "diurnal", "high-latency")
"""Every family, in the order a report lists them."""

TUNING = ("constant", "walk", "step-drop", "high-latency")
"""Families a planner may be tuned on."""

HELD_OUT = ("diurnal",)
"""Families kept aside: a planner is judged on them, never tuned on them."""

TUNING_SEEDS = range(100, 110)
"""Seeds of the tuning realisations; the judged runs use seeds 0-4 (their own realisations)."""

STEP_S = 5.0
"""Time between rows of the varying families (the section-5.2 traces' 5 s steps)."""


def family_trace(family: str, mean_mbps: float, latency_ms: float, duration_s: float,
                 seed: int) -> Trace:
    """Realisation ``seed`` of ``family`` around ``mean_mbps`` and ``latency_ms``, lasting
    ``duration_s`` (a whole number of 5 s steps; the trace's period)."""
    if family not in FAMILIES:
        raise TraceError(f"unknown trace family {family!r}; choose one of: "
                         f"{', '.join(FAMILIES)}")
    if not (math.isfinite(mean_mbps) and mean_mbps > 0 and math.isfinite(latency_ms)
            and latency_ms >= 0):
        raise TraceError(f"trace family {family}: mean bandwidth must be > 0 and latency "
                         f">= 0, got {mean_mbps!r} Mbit/s, {latency_ms!r} ms")
    name = f"family {family}, mean {mean_mbps:g} Mbit/s, {latency_ms:g} ms, seed {seed}"
    if family == "constant":
        return generators.constant(mean_mbps, latency_ms, name=name)
    if family in ("walk", "high-latency"):
        latency = latency_ms * (5.0 if family == "high-latency" else 1.0)
        return generators.random_walk(mean_mbps, latency, duration_s, STEP_S, 0.3,
                                      mean_mbps / 5.0, mean_mbps * 3.0, seed,
                                      stationary_mean=True, name=name)
    rng = random.Random(f"{family}:{seed}")
    if family == "step-drop":
        start = STEP_S * round(rng.uniform(0.25, 0.5) * duration_s / STEP_S)
        length = STEP_S * max(1, round(rng.uniform(0.1, 0.3) * duration_s / STEP_S))
        if start <= 0 or start + length >= duration_s:
            raise TraceError(f"trace family step-drop: {duration_s:g} s is too short for a "
                             "drop and a recovery (use at least 40 s)")
        return generators.steps([(start, mean_mbps, latency_ms),
                                 (length, mean_mbps / 5.0, latency_ms),
                                 (duration_s - start - length, mean_mbps, latency_ms)],
                                name=name)
    phase = rng.uniform(0.0, 2.0 * math.pi)              # diurnal
    n = round(duration_s / STEP_S)
    if n < 4 or not math.isclose(n * STEP_S, duration_s):
        raise TraceError(f"trace family diurnal: the duration must be a whole number of "
                         f"{STEP_S:g} s steps, at least 4, got {duration_s:g} s")
    period = duration_s / 2.0
    levels = [(STEP_S, round(mean_mbps * math.exp(0.5 * math.sin(
        2.0 * math.pi * i * STEP_S / period + phase)), generators.DECIMALS), latency_ms)
              for i in range(n)]
    return generators.steps(levels, name=name)


def coefficient_of_variation(trace: Trace, duration_s: float, step_s: float = 0.5) -> float:
    """The time-weighted coefficient of variation of the bandwidth over ``[0, duration_s)``
    (sampled every ``step_s``): the issue's split between links that vary (>= 0.3) and not."""
    samples = [trace.bandwidth_at(i * step_s) for i in range(round(duration_s / step_s))]
    mean = math.fsum(samples) / len(samples)
    variance = math.fsum((x - mean) ** 2 for x in samples) / len(samples)
    return math.sqrt(variance) / mean
