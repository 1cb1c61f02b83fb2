"""Convert Mahimahi packet-delivery traces to :class:`decobench.netem.trace.Trace`.

A Mahimahi trace has one integer millisecond timestamp per line; each is one delivery
opportunity for a 1500-byte (12000-bit) packet, and a timestamp repeated m times means m
packets in that millisecond. Timestamps are non-decreasing and Mahimahi repeats the trace
with period D = the last timestamp (ms).

Binning (bin width B = ``bin_s``): bin k covers the timestamps in ``(k*B, (k+1)*B]`` ms
(timestamp 0 joins bin 0), there are ``K = ceil(D / B)`` bins, and::

    a_k = max(packets_k * 12000 / width_k, floor_mbps * 1e6)    bit/s

where ``width_k = B`` except for a shorter last bin, whose width is ``D - (K-1)*B`` (its
measured rate is kept). The floor exists because the trace format forbids zero bandwidth: an
empty bin (an outage) becomes a near-stall of ``floor_mbps`` (default 0.001 Mbit/s = 1 kbit/s;
the floor also lifts any slower bin; one packet in a bin of up to 12 s is faster than that).
Consecutive bins with equal bandwidth are merged; rows are written with
:func:`decobench.netem.generators.steps`, so the converted trace's period is ``K * B`` seconds.
"""

from __future__ import annotations

import math
import os
import pathlib

from decobench.netem.generators import steps
from decobench.netem.trace import BITS_PER_MBIT, Trace, TraceError

PACKET_BITS: int = 1500 * 8
"""Bits per Mahimahi delivery opportunity (one 1500-byte packet)."""

DEFAULT_FLOOR_MBPS: float = 0.001
"""Bandwidth given to bins without any delivery opportunity (the format forbids 0)."""


def parse_mahimahi(text: str, source: str = "<string>") -> list[int]:
    """The millisecond timestamps of a Mahimahi trace; errors name ``source:line``.

    Blank lines are ignored; every other line must be one non-negative integer, and the
    timestamps must be non-decreasing with a last timestamp > 0.
    """
    stamps: list[int] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        try:
            ms = int(line)
        except ValueError:
            raise TraceError(
                f"{source}:{lineno}: expected one integer millisecond timestamp, got '{line}'"
            ) from None
        if ms < 0:
            raise TraceError(f"{source}:{lineno}: timestamp must be >= 0, got {ms}")
        if stamps and ms < stamps[-1]:
            raise TraceError(
                f"{source}:{lineno}: timestamps must be non-decreasing ({ms} follows {stamps[-1]})"
            )
        stamps.append(ms)
    if not stamps:
        raise TraceError(f"{source}: empty Mahimahi trace (no timestamps)")
    if stamps[-1] == 0:
        raise TraceError(f"{source}: Mahimahi trace spans 0 ms (its last timestamp must be > 0)")
    return stamps


def bin_bandwidths_bps(
    stamps: list[int], bin_s: float, floor_mbps: float = DEFAULT_FLOOR_MBPS
) -> list[float]:
    """Per-bin bandwidth a_k in bit/s (formula in the module docstring)."""
    bin_ms = bin_s * 1e3
    total_ms = stamps[-1]
    count = max(1, math.ceil(total_ms / bin_ms - 1e-9))
    packets = [0] * count
    for ms in stamps:
        k = max(0, math.ceil(ms / bin_ms - 1e-9) - 1)
        packets[min(k, count - 1)] += 1
    floor_bps = floor_mbps * BITS_PER_MBIT
    out = []
    for k, m in enumerate(packets):
        width_s = min(bin_ms, total_ms - k * bin_ms) / 1e3
        out.append(max(m * PACKET_BITS / width_s, floor_bps))
    return out


def from_mahimahi(
    path: str | os.PathLike[str],
    bin_s: float = 1.0,
    latency_ms: float = 0.0,
    name: str | None = None,
    floor_mbps: float = DEFAULT_FLOOR_MBPS,
) -> Trace:
    """Read a Mahimahi trace file and bin it into a trace (constant latency ``latency_ms``).

    ``name`` defaults to the file stem. See the module docstring for the binning rule.
    """
    source = str(path)
    if not (math.isfinite(bin_s) and bin_s >= 0.001):
        raise TraceError(f"{source}: bin width must be >= 0.001 s, got {bin_s}")
    if not (math.isfinite(latency_ms) and latency_ms >= 0):
        raise TraceError(f"{source}: latency must be >= 0 ms, got {latency_ms}")
    if not (math.isfinite(floor_mbps) and floor_mbps > 0):
        raise TraceError(f"{source}: bandwidth floor must be > 0 Mbit/s, got {floor_mbps}")
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{source}: cannot read Mahimahi trace: {exc}") from None
    rates = bin_bandwidths_bps(parse_mahimahi(text, source), bin_s, floor_mbps)
    levels: list[tuple[float, float, float]] = []
    for rate in rates:
        mbps = rate / BITS_PER_MBIT
        if levels and levels[-1][1] == mbps:
            levels[-1] = (levels[-1][0] + bin_s, mbps, latency_ms)
        else:
            levels.append((bin_s, mbps, latency_ms))
    return steps(levels, name=name or pathlib.Path(path).stem)
