"""Network conditions relative to a task: the regime ratios (docs/design.md §4.5).

Two dimensionless ratios decide how a run behaves on the time model, whatever the size of
the model or the speed of the machine:

    transmission ratio  ρ = S / (a·T)     S = 32·d bits, the dense fp32 message
    latency ratio       λ = b / T

A small model on the simulated clock sits in the same regime as the paper's large model
when both ratios match. A condition is given in one of three ways:

- absolute: a trace (``--trace``), used as it is;
- relative to a reference profile: ``--regime PROFILE:TRACE`` (or a named alias such as
  ``paper-wan``) reads TRACE as the network the task's PROFILE sees (for ``paper``: the
  paper's model on its reference GPU) and maps it onto the run's profile (d', T') by the
  similarity transform

      k = T'/T,   t' = k·t,   b'(t') = k·b(t),   a'(t') = a(t) · (d'/d) / k,

  which keeps ρ and λ at every moment and keeps the trace's changes at the same iteration
  counts (so DeCo's re-plan interval F meets the trace as it does for the reference);
- by the ratios themselves: ``--transmission-ratio ρ --latency-ratio λ`` gives the constant
  condition a = 32·d'/(ρ·T'), b = λ·T'; with ``--ratio-shape TRACE`` the condition varies
  like TRACE (bandwidth and latency relative to their means, times as the task's paper
  profile sees them) around those means (:func:`shaped_ratio_trace`). The regime map of
  the report is a grid of such conditions.
"""

from __future__ import annotations

from dataclasses import dataclass

from decobench.clock.wire import dense_wire_bits
from decobench.errors import DecobenchError
from decobench.netem.trace import Trace

REGIME_ALIASES: dict[str, str] = {
    "paper-wan": "paper:wan-200ms-lowbw-varying",
    "paper-constant-wan": "paper:constant-20mbps-100ms",
    "paper-steps": "paper:wan-100mbps-steps",
    "paper-congested": "paper:congested-onoff",
    "paper-datacenter": "paper:constant-1gbps-10ms",
}
"""Named regimes: each is a bundled trace as the task's paper profile sees it."""


def transmission_ratio(d: int, bandwidth_bps: float, compute_s: float) -> float:
    """ρ = 32·d / (a·T): time to send a dense message over the compute time."""
    return dense_wire_bits(d) / (bandwidth_bps * compute_s)


def latency_ratio(latency_s: float, compute_s: float) -> float:
    """λ = b / T."""
    return latency_s / compute_s


def rescale_trace(trace: Trace, time_factor: float, bandwidth_factor: float,
                  name: str) -> Trace:
    """The trace with times and latencies multiplied by ``time_factor`` and bandwidths by
    ``bandwidth_factor`` (the similarity transform of the module docstring)."""
    if not time_factor > 0 or not bandwidth_factor > 0:
        raise ValueError("scale factors must be positive")
    return Trace(times_s=tuple(t * time_factor for t in trace.times_s),
                 bandwidth_bps=tuple(a * bandwidth_factor for a in trace.bandwidth_bps),
                 latency_s=tuple(b * time_factor for b in trace.latency_s),
                 loop=trace.loop, name=name)


def map_trace(trace: Trace, *, reference_d: int, reference_compute_s: float, d: int,
              compute_s: float, name: str) -> Trace:
    """Map a trace seen by a reference (d, T) onto (d', T'), keeping ρ and λ everywhere."""
    k = compute_s / reference_compute_s
    return rescale_trace(trace, k, (d / reference_d) / k, name)


def ratio_trace(transmission: float, latency: float, *, d: int, compute_s: float) -> Trace:
    """The constant condition with ρ = ``transmission`` and λ = ``latency`` for (d, T)."""
    if not transmission > 0 or not latency >= 0:
        raise DecobenchError("--transmission-ratio must be > 0 and --latency-ratio >= 0")
    return Trace(times_s=(0.0,), bandwidth_bps=(dense_wire_bits(d) / (transmission * compute_s),),
                 latency_s=(latency * compute_s,),
                 name=f"ratios rho={transmission:g} lambda={latency:g}")


def shaped_ratio_trace(shape: Trace, transmission: float, latency: float, *, d: int,
                       compute_s: float, reference_compute_s: float) -> Trace:
    """A network with mean ρ = ``transmission`` and mean λ = ``latency`` for (d, T) that
    varies like ``shape``: the shape's bandwidth and latency divided by their time-weighted
    means and multiplied by a = 32·d/(ρ·T) and b = λ·T, its times multiplied by
    k = T / ``reference_compute_s`` (the shape is read as the task's paper profile sees it,
    so its changes fall at the same iteration counts as in a ``--regime paper:SHAPE`` run)."""
    if not transmission > 0 or not latency >= 0:
        raise DecobenchError("--transmission-ratio must be > 0 and --latency-ratio >= 0")
    mean_latency = shape.mean_latency_s()
    if latency > 0 and mean_latency <= 0:
        raise DecobenchError(f"--ratio-shape {shape.name}: its latency is 0 throughout, so it "
                             "cannot shape a latency ratio > 0")
    k = compute_s / reference_compute_s
    bandwidth_factor = dense_wire_bits(d) / (transmission * compute_s) / shape.mean_bandwidth_bps()
    latency_factor = latency * compute_s / mean_latency if mean_latency > 0 else 0.0
    return Trace(times_s=tuple(t * k for t in shape.times_s),
                 bandwidth_bps=tuple(a * bandwidth_factor for a in shape.bandwidth_bps),
                 latency_s=tuple(b * latency_factor for b in shape.latency_s), loop=shape.loop,
                 name=f"ratios rho={transmission:g} lambda={latency:g} shaped like {shape.name}")


@dataclass(frozen=True)
class NetworkCondition:
    """What ``decobench run`` was told about the network, resolved before training.

    ``kind`` is ``trace`` (absolute), ``regime`` (a trace relative to ``reference_profile``)
    or ``ratios`` (constant, or shaped like ``trace`` with its time axis relative to
    ``reference_compute_s``). :meth:`trace_for` gives the trace the run's own (d, T) sees.
    """

    kind: str
    trace: Trace | None = None
    reference_profile: str | None = None
    reference_d: int | None = None
    reference_compute_s: float | None = None
    transmission: float | None = None
    latency: float | None = None
    label: str = ""

    def trace_for(self, d: int, compute_s: float | None) -> Trace:
        if self.kind == "trace":
            assert self.trace is not None
            return self.trace
        if compute_s is None:
            raise DecobenchError(f"the network condition {self.label!r} is relative to the "
                                 "compute time T, so T must be fixed: drop --compute-time "
                                 "measured or give a trace instead")
        if self.kind == "ratios":
            assert self.transmission is not None and self.latency is not None
            if self.trace is not None:
                assert self.reference_compute_s is not None
                return shaped_ratio_trace(self.trace, self.transmission, self.latency, d=d,
                                          compute_s=compute_s,
                                          reference_compute_s=self.reference_compute_s)
            return ratio_trace(self.transmission, self.latency, d=d, compute_s=compute_s)
        assert self.trace is not None and self.reference_d and self.reference_compute_s
        return map_trace(self.trace, reference_d=self.reference_d,
                         reference_compute_s=self.reference_compute_s, d=d,
                         compute_s=compute_s, name=self.label)

    def describe(self, d: int, compute_s: float | None) -> dict[str, object]:
        """Fields for config.yaml: how the condition was given and its ratios for this run."""
        trace = self.trace_for(d, compute_s)
        out: dict[str, object] = {"kind": self.kind, "label": self.label}
        if self.kind == "regime":
            out.update(reference_profile=self.reference_profile,
                       reference_parameters=self.reference_d,
                       reference_compute_time_s=self.reference_compute_s,
                       reference_trace=self.trace.name if self.trace else None,
                       reference_mean_bandwidth_mbps=(self.trace.mean_bandwidth_bps() / 1e6
                                                      if self.trace else None),
                       reference_mean_latency_ms=(self.trace.mean_latency_s() * 1e3
                                                  if self.trace else None))
        out["mean_bandwidth_mbps"] = trace.mean_bandwidth_bps() / 1e6
        out["mean_latency_ms"] = trace.mean_latency_s() * 1e3
        if compute_s is not None:
            out.update(
                mean_transmission_ratio=transmission_ratio(d, trace.mean_bandwidth_bps(),
                                                           compute_s),
                mean_latency_ratio=latency_ratio(trace.mean_latency_s(), compute_s),
                initial_latency_ratio=latency_ratio(trace.latency_s[0], compute_s))
        return out


def parse_regime(value: str) -> tuple[str, str]:
    """``paper-wan`` or ``PROFILE:TRACE`` → (reference profile, trace name or path)."""
    spec = REGIME_ALIASES.get(value, value)
    profile, sep, trace = spec.partition(":")
    if not sep or not profile or not trace:
        raise DecobenchError(f"--regime {value!r}: give PROFILE:TRACE (e.g. "
                             "paper:wan-200ms-lowbw-varying) or one of "
                             f"{', '.join(sorted(REGIME_ALIASES))}")
    return profile, trace

