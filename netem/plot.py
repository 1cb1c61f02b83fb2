"""Plot a trace: bandwidth (Mbit/s, step plot) and latency (ms) on twin axes against time (s).

Uses matplotlib's object API with the Agg canvas (no pyplot, no global backend state).
"""

from __future__ import annotations

import io
import math
import os

from decobench.atomicio import write_bytes_atomic
from decobench.netem.trace import BITS_PER_MBIT, MS_PER_S, Trace

CONSTANT_PLOT_S: float = 60.0
"""Time span drawn for a one-row (constant) trace when no duration is given."""


def default_plot_duration(trace: Trace) -> float:
    """One period (:attr:`Trace.period_s`), or :data:`CONSTANT_PLOT_S` for a constant trace."""
    period = trace.period_s
    return period if math.isfinite(period) else CONSTANT_PLOT_S


def plot_trace(
    trace: Trace,
    path: str | os.PathLike[str],
    duration_s: float | None = None,
    title: str | None = None,
) -> None:
    """Write a PNG of ``trace`` over ``[0, duration_s]`` to ``path`` (atomically).

    Loop traces drawn beyond one period show the repetition, with dotted lines at each period
    boundary; hold-last traces show the last row held.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    span = default_plot_duration(trace) if duration_s is None else float(duration_s)
    rows = trace.rows_until(span)
    times = [t for t, _, _ in rows] + [span]
    mbps = [a / BITS_PER_MBIT for _, a, _ in rows]
    ms = [b * MS_PER_S for _, _, b in rows]
    mbps.append(mbps[-1])
    ms.append(ms[-1])

    fig = Figure(figsize=(9, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.step(times, mbps, where="post", color="tab:blue", label="bandwidth")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("bandwidth (Mbit/s)", color="tab:blue")
    ax.set_xlim(0.0, span)
    ax.set_ylim(bottom=0.0)
    ax2 = ax.twinx()
    ax2.step(times, ms, where="post", color="tab:red", label="latency")
    ax2.set_ylabel("one-way latency (ms)", color="tab:red")
    ax2.set_ylim(bottom=0.0, top=max(ms) * 1.15 if max(ms) > 0 else 1.0)
    if trace.loop and math.isfinite(trace.period_s):
        k = 1
        while k * trace.period_s < span:
            ax.axvline(k * trace.period_s, color="grey", linestyle=":", linewidth=1)
            k += 1
    mode = "loop" if trace.loop else "hold-last"
    ax.set_title(title or f"{trace.name or 'trace'} ({mode})")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    write_bytes_atomic(path, buf.getvalue())
