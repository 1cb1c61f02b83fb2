"""Network traces for decobench: piecewise-constant bandwidth a(t) and latency b(t).

- :mod:`decobench.netem.trace`: the :class:`Trace` type, CSV parsing/writing, bundled traces.
- :mod:`decobench.netem.generators`: constant, steps, seeded random walk, on/off congestion.
- :mod:`decobench.netem.mahimahi`: conversion of Mahimahi packet-delivery traces.
- :mod:`decobench.netem.plot`: PNG plots of traces.
- :mod:`decobench.netem.cli`: the ``decobench trace`` subcommand.

File format and semantics: docs/design.md §9.1 and docs/traces.md.
"""

from decobench.netem.trace import (
    Trace,
    TraceError,
    bundled_trace_dir,
    list_bundled_traces,
    load_trace,
    parse_trace_csv,
    write_trace,
)

__all__ = [
    "Trace",
    "TraceError",
    "bundled_trace_dir",
    "list_bundled_traces",
    "load_trace",
    "parse_trace_csv",
    "write_trace",
]
