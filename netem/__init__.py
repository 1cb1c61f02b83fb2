"""Network traces for decobench: piecewise-constant bandwidth a(t) and latency b(t).

- :mod:`netem.trace`: the :class:`Trace` type, CSV parsing/writing, bundled traces.
- :mod:`netem.generators`: constant, steps, seeded random walk, on/off congestion.
- :mod:`netem.mahimahi`: conversion of Mahimahi packet-delivery traces.
- :mod:`netem.plot`: PNG plots of traces.
- :mod:`netem.cli`: the ``decobench trace`` subcommand.

File format and semantics: ``shared/spec/interfaces.md`` ("Trace files (netem/)").
"""

from netem.trace import (
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
