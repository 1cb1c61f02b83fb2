"""Network traces: piecewise-constant bandwidth a(t) and one-way latency b(t).

Implements the trace file contract of docs/design.md §9.1
and the quantities the time model of docs/design.md §4 needs from a trace:
``a(t)`` (:meth:`Trace.bandwidth_at`), ``b(t)`` (:meth:`Trace.latency_at`) and the end of a
transmission, the ``t`` with ``integral_{txs}^{t} a(s) ds = bits``
(:meth:`Trace.transmission_end`).

File format (CSV, one row per change, times strictly increasing from 0)::

    time_s,bandwidth_mbps,latency_ms
    0,500,200
    30,120,200

Blank lines and lines whose first non-blank character is ``#`` are ignored. In memory,
bandwidth is in bit/s (1 Mbit = 1e6 bit) and latency in seconds.

Period rule. A row holds until the next row starts. The last row has no successor, so it is
given the duration of the row before it: ``period = times[-1] + (times[-1] - times[-2])``.
A single-row trace is constant and its period is infinite. After the last row a trace either
holds the last row for ever (``loop=False``, the default) or repeats from time 0 with that
period (``loop=True``). The generators in :mod:`decobench.netem.generators` write their rows so that the
period equals the requested duration.
"""

from __future__ import annotations

import math
import os
import pathlib
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from decobench.atomicio import write_bytes_atomic
from decobench.errors import DecobenchError

HEADER: tuple[str, str, str] = ("time_s", "bandwidth_mbps", "latency_ms")
"""The exact CSV columns, in order."""

BITS_PER_MBIT: float = 1e6
"""1 Mbit = 1e6 bit (decimal, as network rates are quoted)."""

MS_PER_S: float = 1e3


class TraceError(DecobenchError):
    """A trace file or trace definition is invalid.

    The message starts with ``"<file>:<line>: "`` when one line is at fault, otherwise with
    ``"<file>: "``.
    """


def _fmt(x: float) -> str:
    """Compact decimal text for a CSV cell: ``500`` for 500.0, ``45.5`` for 45.5.

    Twelve significant digits hide the noise of unit conversions (Mbit/s to bit/s and back)
    while keeping every value the generators and parsers produce exactly.
    """
    return f"{x:.12g}"


@dataclass(frozen=True)
class Trace:
    """A piecewise-constant network trace (see the module docstring for the period rule).

    Attributes:
        times_s: start time of each row in seconds; strictly increasing, ``times_s[0] == 0``.
        bandwidth_bps: bandwidth a of each row in bit/s, > 0.
        latency_s: one-way latency b of each row in seconds, >= 0.
        loop: repeat the trace with period :attr:`period_s` instead of holding the last row.
        name: file stem or a description of the generator that made it.
    """

    times_s: tuple[float, ...]
    bandwidth_bps: tuple[float, ...]
    latency_s: tuple[float, ...]
    loop: bool = False
    name: str = ""

    def __post_init__(self) -> None:
        label = self.name or "<trace>"
        for field in ("times_s", "bandwidth_bps", "latency_s"):
            try:
                values = tuple(float(v) for v in getattr(self, field))
            except (TypeError, ValueError) as exc:
                raise TraceError(
                    f"{label}: {field} must be a sequence of numbers ({exc})"
                ) from None
            object.__setattr__(self, field, values)
        object.__setattr__(self, "loop", bool(self.loop))
        n = len(self.times_s)
        if n == 0:
            raise TraceError(f"{label}: empty trace (no rows)")
        if len(self.bandwidth_bps) != n or len(self.latency_s) != n:
            raise TraceError(
                f"{label}: times_s, bandwidth_bps and latency_s must have the same length "
                f"(got {n}, {len(self.bandwidth_bps)}, {len(self.latency_s)})"
            )
        for i, (t, a, b) in enumerate(
            zip(self.times_s, self.bandwidth_bps, self.latency_s, strict=True)
        ):
            problem = _row_problem(t, a, b, self.times_s[i - 1] if i else None)
            if problem:
                raise TraceError(f"{label}: row {i + 1}: {problem}")

    # ----------------------------------------------------------------------------- structure
    @property
    def period_s(self) -> float:
        """Loop period in seconds: ``times[-1] + (times[-1] - times[-2])``; ``inf`` for one row."""
        t = self.times_s
        if len(t) == 1:
            return math.inf
        return t[-1] + (t[-1] - t[-2])

    @cached_property
    def _segment_ends(self) -> tuple[float, ...]:
        """End of each row within one period (the last row ends at :attr:`period_s`)."""
        return self.times_s[1:] + (self.period_s,)

    @cached_property
    def _cumulative_bits(self) -> tuple[float, ...]:
        """``C[i] = integral_0^{times[i]} a(s) ds``; ``C[n]`` is the capacity of one period."""
        out = [0.0]
        for a, t0, t1 in zip(self.bandwidth_bps, self.times_s, self._segment_ends, strict=True):
            out.append(out[-1] + a * (t1 - t0))
        return tuple(out)

    @property
    def _repeats(self) -> bool:
        return self.loop and len(self.times_s) > 1

    def _locate(self, t: float) -> tuple[int, float, int]:
        """Split absolute time t into (period index k, local time in [0, period), row index)."""
        if not (t >= 0.0) or math.isinf(t):
            raise ValueError(f"time must be finite and >= 0, got {t!r}")
        if not self._repeats:
            return 0, t, bisect_right(self.times_s, t) - 1
        period = self.period_s
        k = math.floor(t / period)
        local = t - k * period
        if local >= period:  # floating-point rounding at a period boundary
            k, local = k + 1, local - period
        local = max(local, 0.0)
        return k, local, bisect_right(self.times_s, local) - 1

    def segment_at(self, t: float) -> int:
        """Index of the row in force at time ``t >= 0`` (hold-last or loop semantics)."""
        return self._locate(t)[2]

    def bandwidth_at(self, t: float) -> float:
        """Bandwidth a(t) in bit/s."""
        return self.bandwidth_bps[self.segment_at(t)]

    def latency_at(self, t: float) -> float:
        """One-way latency b(t) in seconds."""
        return self.latency_s[self.segment_at(t)]

    # ---------------------------------------------------------------------------- integrals
    def bits_until(self, t: float) -> float:
        """Capacity ``integral_0^t a(s) ds`` in bits (hold-last or loop semantics)."""
        k, local, i = self._locate(t)
        cum = self._cumulative_bits
        within = cum[i] + self.bandwidth_bps[i] * (local - self.times_s[i])
        return k * cum[-1] + within if self._repeats else within

    def capacity_bits(self, start_s: float, end_s: float) -> float:
        """Capacity ``integral_{start_s}^{end_s} a(s) ds`` in bits, ``end_s >= start_s``."""
        if end_s < start_s:
            raise ValueError(f"end_s ({end_s}) < start_s ({start_s})")
        return self.bits_until(end_s) - self.bits_until(start_s)

    def transmission_end(self, start_s: float, bits: float) -> float:
        """The ``t >= start_s`` with ``integral_{start_s}^{t} a(s) ds == bits``
        (docs/design.md §4.1).

        The integral is exact over the piecewise-constant bandwidth: within row i the transfer
        progresses at ``bandwidth_bps[i]``, so a transfer that spans a change is split at the
        change. The starting row is found by bisection; in loop mode whole periods are skipped
        using the per-period capacity ``C = sum_i a_i * duration_i``, so the cost does not grow
        with the number of periods spanned. ``bits == 0`` returns ``start_s``.
        """
        if not (bits >= 0.0) or math.isinf(bits):
            raise ValueError(f"bits must be finite and >= 0, got {bits!r}")
        k, local, i = self._locate(start_s)
        if bits == 0.0:
            return start_s
        if not self._repeats:
            end, _ = self._walk(start_s, 0, local, i, bits, last_open=True)
            assert end is not None
            return end
        end, remaining = self._walk(start_s, k, local, i, bits, last_open=False)
        if end is not None:
            return end
        capacity = self._cumulative_bits[-1]
        whole = math.floor(remaining / capacity)
        if whole > 0 and whole * capacity >= remaining:
            whole -= 1  # finish inside a period, never exactly on its end
        remaining -= whole * capacity
        end, _ = self._walk(None, k + 1 + whole, 0.0, 0, remaining, last_open=True)
        assert end is not None
        return end

    def _walk(
        self,
        start_s: float | None,
        k: int,
        local: float,
        i: int,
        remaining: float,
        last_open: bool,
    ) -> tuple[float | None, float]:
        """Consume ``remaining`` bits from row i at local time ``local`` of period k.

        Returns ``(end, 0)`` if the transfer finishes within this period, else
        ``(None, bits still to send)`` at the end of the period. With ``last_open`` the last
        row is unbounded (hold-last, or the final period of a loop). When ``start_s`` is given,
        an end within the first row is computed from it directly (no rounding of the base).
        """
        n = len(self.times_s)
        base = k * self.period_s if self._repeats else 0.0
        ends = self._segment_ends
        while True:
            rate = self.bandwidth_bps[i]
            open_ended = last_open and i == n - 1
            seg_end = math.inf if open_ended else ends[i]
            capacity = rate * (seg_end - local)
            if open_ended or capacity >= remaining:
                origin = start_s if start_s is not None else base + local
                end = origin + remaining / rate
                if not open_ended:
                    end = min(end, base + seg_end)  # never past the row's end (rounding)
                return max(end, origin), 0.0
            remaining -= capacity
            local = seg_end
            start_s = None
            i += 1
            if i == n:
                return None, remaining

    def mean_bandwidth_bps(self, duration_s: float | None = None) -> float:
        """Time-weighted mean bandwidth in bit/s: ``(1/D) integral_0^D a(s) ds``.

        ``duration_s=None`` uses one period (:attr:`period_s`); for a single-row trace this is
        its bandwidth.
        """
        if duration_s is None:
            if len(self.times_s) == 1:
                return self.bandwidth_bps[0]
            return self._cumulative_bits[-1] / self.period_s
        if not (duration_s > 0.0) or math.isinf(duration_s):
            raise ValueError(f"duration_s must be finite and > 0, got {duration_s!r}")
        return self.bits_until(duration_s) / duration_s

    def mean_latency_s(self) -> float:
        """Time-weighted mean one-way latency over one period (its latency for one row)."""
        if len(self.times_s) == 1:
            return self.latency_s[0]
        weighted = sum(b * (t1 - t0) for b, t0, t1 in zip(self.latency_s, self.times_s,
                                                          self._segment_ends, strict=True))
        return weighted / self.period_s

    def rows_until(self, duration_s: float) -> list[tuple[float, float, float]]:
        """The rows ``(start_s, bandwidth_bps, latency_s)`` starting in ``[0, duration_s)``.

        In loop mode rows repeat every :attr:`period_s`; otherwise the rows after the last one
        are not repeated (the last row holds).
        """
        if not (duration_s > 0.0) or math.isinf(duration_s):
            raise ValueError(f"duration_s must be finite and > 0, got {duration_s!r}")
        rows = list(zip(self.times_s, self.bandwidth_bps, self.latency_s, strict=True))
        out: list[tuple[float, float, float]] = []
        k = 0
        while True:
            base = k * self.period_s if self._repeats else 0.0
            for t, a, b in rows:
                if base + t >= duration_s:
                    return out
                out.append((base + t, a, b))
            if not self._repeats:
                return out
            k += 1

    # ------------------------------------------------------------------------------ output
    def to_csv(self, comment: str | None = None) -> str:
        """The trace as CSV text (header ``time_s,bandwidth_mbps,latency_ms``, ``\\n`` endings).

        ``comment`` lines, if given, are written first, each prefixed with ``# ``.
        """
        lines = [f"# {c}" if c else "#" for c in (comment.splitlines() if comment else [])]
        lines.append(",".join(HEADER))
        for t, a, b in zip(self.times_s, self.bandwidth_bps, self.latency_s, strict=True):
            lines.append(f"{_fmt(t)},{_fmt(a / BITS_PER_MBIT)},{_fmt(b * MS_PER_S)}")
        return "\n".join(lines) + "\n"

    def with_loop(self, loop: bool) -> Trace:
        """The same trace with ``loop`` set."""
        return replace(self, loop=loop)


MIN_BANDWIDTH_BPS = 1e3
"""Slowest link a trace file may describe: 1 kbit/s, 0.001 Mbit/s (a dial-up modem gave 56).
Rates below it are typing slips (1e-5 Mbit/s for 10 Mbit/s; 1e-300), under which D-SGD's
first iterations alone would last weeks of simulated time."""
MAX_BANDWIDTH_BPS = 1e13
"""Fastest link a trace may describe (10 Tbit/s)."""
MAX_LATENCY_S = 3600.0
"""Longest one-way latency a trace may describe (an hour)."""
MAX_TIME_S = 1e9
"""Latest row time (about 32 years)."""


def _row_problem(t: float, a: float, b: float, prev_t: float | None,
                 physical: bool = False) -> str:
    """Why a row (time s, bandwidth bit/s, latency s) is invalid, or "" if it is valid
    (messages in the CSV's units, Mbit/s and ms). ``physical``: also hold the row to the
    ranges a real link can have (:data:`MIN_BANDWIDTH_BPS` ...), as for a file a user
    wrote; traces computed from valid ones (a regime mapping) may leave them."""
    if not (math.isfinite(t) and math.isfinite(a) and math.isfinite(b)):
        return "values must be finite numbers"
    if prev_t is None and t != 0.0:
        return f"the first row must start at time 0, got {_fmt(t)}"
    if prev_t is not None and t <= prev_t:
        return f"times must be strictly increasing ({_fmt(t)} follows {_fmt(prev_t)})"
    if physical and t > MAX_TIME_S:
        return f"time must be <= {MAX_TIME_S:g} s, got {_fmt(t)}"
    if a <= 0.0:
        return f"bandwidth must be > 0, got {_fmt(a / BITS_PER_MBIT)}"
    if physical and not MIN_BANDWIDTH_BPS <= a <= MAX_BANDWIDTH_BPS:
        return (f"bandwidth must lie in [{MIN_BANDWIDTH_BPS / BITS_PER_MBIT:g}, "
                f"{MAX_BANDWIDTH_BPS / BITS_PER_MBIT:g}] Mbit/s, got {_fmt(a / BITS_PER_MBIT)}")
    if b < 0.0:
        return f"latency must be >= 0, got {_fmt(b * MS_PER_S)}"
    if physical and b > MAX_LATENCY_S:
        return f"latency must be <= {MAX_LATENCY_S * MS_PER_S:g} ms, got {_fmt(b * MS_PER_S)}"
    return ""


# ---------------------------------------------------------------------------------- parsing
def parse_trace_csv(
    text: str, source: str = "<string>", loop: bool = False, name: str = ""
) -> Trace:
    """Parse trace CSV text (format in the module docstring); errors name ``source:line``."""
    header_seen = False
    times: list[float] = []
    bandwidth: list[float] = []
    latency: list[float] = []
    for lineno, raw in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        cells = [c.strip() for c in line.split(",")]
        where = f"{source}:{lineno}: "
        if not header_seen:
            if tuple(cells) != HEADER:
                raise TraceError(
                    f"{where}missing or wrong header: expected '{','.join(HEADER)}', got '{line}'"
                )
            header_seen = True
            continue
        if len(cells) != len(HEADER):
            raise TraceError(f"{where}expected {len(HEADER)} columns, got {len(cells)}: '{line}'")
        try:
            t, mbps, ms = (float(c) for c in cells)
        except ValueError:
            raise TraceError(f"{where}non-numeric value in '{line}'") from None
        problem = _row_problem(t, mbps * BITS_PER_MBIT, ms / MS_PER_S,
                               times[-1] if times else None, physical=True)
        if problem:
            raise TraceError(f"{where}{problem}")
        times.append(t)
        bandwidth.append(mbps * BITS_PER_MBIT)
        latency.append(ms / MS_PER_S)
    if not header_seen:
        raise TraceError(f"{source}: empty file: expected the header '{','.join(HEADER)}'")
    if not times:
        raise TraceError(f"{source}: empty trace: the header is not followed by any rows")
    return Trace(tuple(times), tuple(bandwidth), tuple(latency), loop=loop, name=name)


def bundled_trace_dir() -> pathlib.Path:
    """Directory of the traces shipped with the package (``netem/traces/``)."""
    return pathlib.Path(__file__).resolve().parent / "traces"


def list_bundled_traces() -> list[str]:
    """Names (file stems) of the bundled traces, sorted."""
    return sorted(p.stem for p in bundled_trace_dir().glob("*.csv"))


def trace_description(text: str) -> str:
    """The first ``#`` comment line of trace CSV text, without the ``#`` ("" if none)."""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#"):
            return line.lstrip("#").strip()
        if line:
            return ""
    return ""


def trace_header_fields(text: str, key: str) -> list[str]:
    """The values of the ``# KEY: value`` comment lines above the CSV header, in order.

    Only the comment block before the ``time_s,...`` header is read (a pack file's
    provenance: ``source``, ``pack``, ``choice``; see :mod:`decobench.netem.pack`).
    """
    prefix = f"{key}:"
    out: list[str] = []
    for raw in text.lstrip("\ufeff").splitlines():
        line = raw.strip()
        if not line:
            continue
        if not line.startswith("#"):
            break
        body = line.lstrip("#").strip()
        if body.startswith(prefix):
            out.append(body[len(prefix) :].strip())
    return out


def trace_sources(path_or_name: str | os.PathLike[str]) -> list[str]:
    """The ``# source:`` lines of a trace file or bundled trace name ([] if it has none)."""
    path = resolve_trace_path(path_or_name)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read trace file: {exc}") from None
    return trace_header_fields(text, "source")


def describe_bundled_traces() -> list[tuple[str, str]]:
    """``(name, description)`` of each bundled trace; the description is its first comment."""
    directory = bundled_trace_dir()
    return [
        (name, trace_description((directory / f"{name}.csv").read_text(encoding="utf-8")))
        for name in list_bundled_traces()
    ]


def resolve_trace_path(path_or_name: str | os.PathLike[str]) -> pathlib.Path:
    """The file for a path to a ``.csv`` file or the name (stem) of a bundled trace.

    An existing file wins; otherwise the name, or ``NAME.csv`` without a directory, is looked up
    among the bundled traces. Raises :class:`TraceError` listing the bundled names.
    """
    path = pathlib.Path(path_or_name)
    if path.is_file():
        return path
    bundled = list_bundled_traces()
    stem = path.stem if path.suffix == ".csv" and len(path.parts) == 1 else str(path_or_name)
    if stem in bundled:
        return bundled_trace_dir() / f"{stem}.csv"
    names = ", ".join(bundled) if bundled else "(none)"
    if path.exists():
        raise TraceError(f"{path}: not a file")
    raise TraceError(f"{path}: no such trace file or bundled trace name; bundled traces: {names}")


def load_trace(path_or_name: str | os.PathLike[str], loop: bool = False) -> Trace:
    """Load a trace from a CSV path or a bundled trace name; its ``name`` is the file stem."""
    path = resolve_trace_path(path_or_name)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read trace file: {exc}") from None
    return parse_trace_csv(text, source=str(path), loop=loop, name=path.stem)


def write_trace(trace: Trace, path: str | os.PathLike[str], comment: str | None = None) -> None:
    """Write ``trace`` as CSV to ``path`` atomically (UTF-8, ``\\n`` line endings)."""
    write_bytes_atomic(path, trace.to_csv(comment).encode("utf-8"))


def summarize(trace: Trace) -> str:
    """One line: rows, duration or period, mean bandwidth, bandwidth and latency ranges."""
    n = len(trace.times_s)
    lo_a, hi_a = min(trace.bandwidth_bps) / BITS_PER_MBIT, max(trace.bandwidth_bps) / BITS_PER_MBIT
    lo_b, hi_b = min(trace.latency_s) * MS_PER_S, max(trace.latency_s) * MS_PER_S
    if n == 1:
        span = "constant"
    elif trace.loop:
        span = f"loops every {_fmt(trace.period_s)} s"
    else:
        span = f"{_fmt(trace.period_s)} s, then holds the last row"
    mean = trace.mean_bandwidth_bps() / BITS_PER_MBIT
    return (
        f"{trace.name or '<trace>'}: {n} row{'s' if n != 1 else ''}, {span}, "
        f"mean bandwidth {mean:.4g} Mbit/s (range {lo_a:.4g}-{hi_a:.4g}), "
        f"latency {lo_b:.4g}-{hi_b:.4g} ms"
    )


def as_trace(
    times_s: Sequence[float],
    bandwidth_mbps: Sequence[float],
    latency_ms: Sequence[float],
    loop: bool = False,
    name: str = "",
) -> Trace:
    """Build a :class:`Trace` from rows in the CSV units (s, Mbit/s, ms)."""
    return Trace(
        tuple(float(t) for t in times_s),
        tuple(float(a) * BITS_PER_MBIT for a in bandwidth_mbps),
        tuple(float(b) / MS_PER_S for b in latency_ms),
        loop=loop,
        name=name,
    )
