"""Fit a transport model (:mod:`decobench.clock.transport_model`) on the emulated links.

Before training (``--calibrate-transport``; ``decobench fidelity`` always asks), while the
links hold the trace's first setting (a, b), every rank times the collectives the run uses,
on one process group, in the same order:

- an empty collective of each kind, :data:`EMPTY_REPEATS` times: its least duration is the
  kind's fixed cost ``c`` (the latency and the collective's own round trips);
- collectives whose ``h·W`` takes :data:`SIZES_S` seconds of the link at ``a``,
  :data:`REPEATS` times each (the least duration counts).

Each timed collective starts after a barrier on the group, so the ranks start it together
(:func:`_time_once`), and each timing is the least over the ranks (:func:`_latest_rank`:
the rank that left the barrier last waited for no one).

The fit per kind (:func:`fit_cost`), with ``x = h·W`` and ``y = duration − c`` (plus the
latency the communication layer adds, ``l·b``, under ``comm-layer``): least squares of
``y = α·x + β`` gives the goodput ``g = 1 / (α·a)`` and the burst ``B = −β/α`` (bits that
pass before the rate applies), at most the shaper's token bucket
(:func:`decobench.netem.tc.burst_bytes`); the rest of the intercept, a positive one or
what the bucket cannot explain of a negative one, is a per-collective cost instead, added
to the fixed cost. The latency multiplier is ``m = (c + added) / (l·b)``. Rank 0 writes the
model with every timing to ``RUN_DIR/transport_model.json``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from decobench.atomicio import write_text_atomic
from decobench.clock.topology import topology_factors
from decobench.clock.transport_model import CollectiveCost, TransportModel
from decobench.errors import DecobenchError
from decobench.netem.tc import burst_bytes

SIZES_S: tuple[float, ...] = (0.01, 0.05, 0.25, 1.0)
"""Link time at the first setting's rate of each timed collective (seconds of ``h·W / a``):
from a first DeCo message (δ = 0.01 of a small CNN is about 0.01 s at 20 Mbit/s) to a
dense one."""

REPEATS: int = 2
"""Timings per size (the least counts: queueing only ever adds)."""

EMPTY_REPEATS: int = 3
"""Timings of the empty collective of each kind."""

KINDS: tuple[str, ...] = ("all_gather", "all_reduce")


@dataclass(frozen=True)
class Timing:
    """One timed collective: its kind, ``h·W`` in bits and its duration in seconds."""

    kind: str
    link_bits: float
    seconds: float


def fit_cost(timings: list[Timing], rate_bps: float, latency_s: float, latency_factor: float,
             added_latency_s: float, max_burst_bits: float = math.inf) -> CollectiveCost:
    """The :class:`CollectiveCost` of one kind from its timings (module docstring); the
    empty collective's timings are those with ``link_bits == 0``.

    ``max_burst_bits``: the most a burst can be, the shaper's token bucket. A negative
    intercept beyond it is a per-collective cost shorter than the empty collective's, not
    bits at line rate: measured (nfqueue, 20 Mbit/s, 100 ms), all-gathers of 0.2-1 Mbit came
    2.4-3 ms sooner than the empty one plus their link time, a 55 kbit "burst" where the
    bucket holds 24 kbit, while a 64 kbit message took 3.8 ms, not the 0.5 ms that burst
    implies; a simulated CocktailSGD charged that way read 138 Mbit/s on a 20 Mbit/s link
    and planned δ 0.17 against the emulated 0.042."""
    empty = [t.seconds for t in timings if t.link_bits == 0]
    sized: dict[float, float] = {}
    for t in timings:
        if t.link_bits > 0:
            sized[t.link_bits] = min(sized.get(t.link_bits, float("inf")), t.seconds)
    if not empty or len(sized) < 2:
        raise DecobenchError("calibration needs the empty collective and at least two sizes")
    fixed = min(empty)
    xs = list(sized)
    ys = [sized[x] - fixed for x in xs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    alpha = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    if alpha <= 0:
        raise DecobenchError(f"calibration: larger collectives did not take longer "
                             f"({dict(zip(xs, ys, strict=True))}); the link is not shaped?")
    beta = my - alpha * mx
    burst = min(max(0.0, -beta / alpha), max_burst_bits)
    # the intercept the burst leaves: a per-collective cost beyond (or short of) the empty one's
    fixed = max(0.0, fixed + beta + alpha * burst)
    goodput = min(2.0, 1.0 / (alpha * rate_bps))
    hops = latency_factor * latency_s
    multiplier = (fixed + added_latency_s) / hops if hops > 0 else 1.0
    return CollectiveCost(latency_multiplier=multiplier, goodput=goodput, burst_bits=burst)


def _time_once(kind: str, elements: int, workers: int, group: Any, device: torch.device,
               timeout_s: float) -> float:
    tensor = torch.zeros(max(1, elements), device=device)
    # Both ranks start together, as a run's ranks start a collective after their own
    # compute. Back to back, without this barrier, a lone 1-20 Mbit all-gather took 1.5x
    # its link time (to the millisecond, repeatably; 2 workers, 20 Mbit/s, 100 ms, nfqueue)
    # and 1.0x after a barrier, in the same namespaces; the fit read that as goodput 0.665
    # in most calibrations and 0.99 in some (docs/emulation.md "Calibration").
    dist.barrier(group=group)
    started = time.monotonic()
    if kind == "all_reduce":
        work = dist.all_reduce(tensor, group=group, async_op=True)
    else:
        out = [torch.empty_like(tensor) for _ in range(workers)]
        work = dist.all_gather(out, tensor, group=group, async_op=True)
    work.wait(timeout=timedelta(seconds=timeout_s))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.monotonic() - started


def _latest_rank(timings: list[Timing], group: Any,
                 device: torch.device | None = None) -> list[Timing]:
    """Each timing as the rank that started it last saw it: the least over the ranks.

    A collective cannot start before its last rank joins, so the ranks that left the
    barrier earlier time their wait for it too; the last one's duration is the
    collective's. Without a process group (tests) the timings are kept."""
    if not (dist.is_available() and dist.is_initialized()):
        return timings
    seconds = torch.tensor([t.seconds for t in timings], dtype=torch.float64,
                           device=device or torch.device("cpu"))
    dist.all_reduce(seconds, op=dist.ReduceOp.MIN, group=group)
    return [Timing(t.kind, t.link_bits, float(s)) for t, s in zip(timings, seconds.tolist(),
                                                                  strict=True)]


def calibrate(workers: int, topology: str, rate_bps: float, latency_s: float,
              comm_layer: bool, group: Any, device: torch.device,
              timeout_s: float, lanes: int = 1) -> tuple[TransportModel, list[Timing]]:
    """Time the collectives on ``group`` (every rank calls this at the same point) and fit
    one :class:`CollectiveCost` per kind at the link's first setting ``(a, b)``.

    The link's sharing follows the transport's structure, which single timings cannot
    show: where the network holds the latency (``kernel``) each of the ``lanes``
    collectives in flight pays its own round trips and sends beside the others
    (``shared``, :mod:`decobench.clock.link_sharing`); where the communication layer adds the
    latency after a collective that holds none, one lane at a time is the time model's FIFO
    queue (``fifo``)."""
    costs: dict[str, CollectiveCost] = {}
    timings: list[Timing] = []
    for kind in KINDS:
        factors = topology_factors(topology, workers, dense=kind == "all_reduce")
        own: list[Timing] = []
        for _ in range(EMPTY_REPEATS):
            own.append(Timing(kind, 0.0, _time_once(kind, 1, workers, group, device,
                                                   timeout_s)))
        for seconds in SIZES_S:
            elements = round(seconds * rate_bps / factors.h / 32)
            link_bits = factors.h * 32 * elements
            for _ in range(REPEATS):
                own.append(Timing(kind, link_bits, _time_once(kind, elements, workers, group,
                                                              device, timeout_s)))
        own = _latest_rank(own, group, device)
        added = factors.l * latency_s if comm_layer else 0.0
        costs[kind] = fit_cost(own, rate_bps, latency_s, factors.l, added,
                               max_burst_bits=8.0 * burst_bytes(rate_bps))
        timings += own
    source = (f"fitted on the emulated links ({workers} workers, {topology} topology, "
              f"{rate_bps / 1e6:g} Mbit/s, {latency_s * 1e3:g} ms, "
              f"{'comm-layer' if comm_layer else 'kernel'} latency) by "
              "decobench.emulated.calibrate")
    sharing = {"link_sharing": "fifo"} if comm_layer else {"link_sharing": "shared",
                                                          "lanes": max(1, lanes)}
    return TransportModel("fitted", costs["all_gather"], costs["all_reduce"], source,
                          **sharing), timings


def write_model(path: Path, model: TransportModel, timings: list[Timing],
                setting: dict[str, Any]) -> None:
    """``transport_model.json``: the model, the setting it was fitted at and every timing."""
    payload = {**model.to_dict(), "fitted_at": setting,
               "timings": [{"kind": t.kind, "link_bits": t.link_bits, "seconds": t.seconds}
                           for t in timings]}
    write_text_atomic(path, json.dumps(payload, indent=2) + "\n")


__all__ = ["EMPTY_REPEATS", "KINDS", "REPEATS", "SIZES_S", "Timing", "calibrate",
           "fit_cost", "write_model"]
