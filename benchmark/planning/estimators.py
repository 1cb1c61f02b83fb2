"""What the DeCo controller knows about the network: estimates from measurements, never
from the trace (docs/design.md §5.1).

- ``â``: bandwidth, bits on the link over each transfer's service time
  ``(h W) / (txe - txs)``, smoothed by an EWMA. Where the transport says that ``B`` of
  those bits passed before the link's rate applied (a shaper's token bucket), the sample is
  ``(h W − B) / (txe − txs)``, and a transfer no larger than ``B`` gives none: this
  project's addition, ``B = 0`` on the time model's ideal link (the paper's estimator);
- ``b̂``: latency, ``(arrive - txe) / l`` (arrival minus end of transmission, per latency hop);
- ``T̂``: computation time per iteration, smoothed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from decobench.errors import DecobenchError


@dataclass(frozen=True)
class NetworkEstimate:
    """``â`` (bit/s), ``b̂`` (s) and ``T̂`` (s), the figures a plan is made from: smoothed
    measurements at one moment (docs/design.md §5.1), or a trace's means known before the run
    (``MethodContext.condition``, for ``static-mean-plan``)."""

    bandwidth_bps: float
    latency_s: float
    compute_s: float


class Ewma:
    """Exponentially weighted moving average ``v ← α x + (1 - α) v``; the first sample sets
    ``v = x``."""

    def __init__(self, alpha: float) -> None:
        if not (isinstance(alpha, (int, float)) and 0 < alpha <= 1):
            raise DecobenchError(f"EWMA weight alpha must be in (0, 1], got {alpha!r}")
        self._alpha = float(alpha)
        self._value: float | None = None

    def update(self, x: float) -> float:
        """Fold one sample in and return the new average."""
        if not math.isfinite(x):
            raise DecobenchError(f"EWMA sample must be finite, got {x!r}")
        if self._value is None:
            self._value = float(x)
        else:
            self._value = self._alpha * x + (1.0 - self._alpha) * self._value
        return self._value

    @property
    def value(self) -> float | None:
        """The current average, ``None`` before the first sample."""
        return self._value


class LinkEstimator:
    """Smoothed â, b̂, T̂ from what the run observed: â from each completed transfer
    (``bits·h / (tx_end − tx_start)``), b̂ from ``(arrive − tx_end) / l``, T̂ from compute
    times (docs/design.md §5.1).

    Transfers of zero duration (nothing on the link) say nothing about â and are skipped for
    it; a latency factor of 0 (one worker under ``ring``) says nothing about b̂. A run whose
    messages never use the link (``h = 0``) therefore never becomes :meth:`ready`.
    """

    def __init__(self, alpha: float = 0.3) -> None:
        self._bandwidth = Ewma(alpha)
        self._latency = Ewma(alpha)
        self._compute = Ewma(alpha)

    def observe_transfer(
        self,
        wire_bits_on_link: float,
        tx_start_s: float,
        tx_end_s: float,
        arrive_s: float,
        latency_factor: float,
        burst_bits: float = 0.0,
    ) -> None:
        """One completed message: ``wire_bits_on_link = h·W`` bits served from ``tx_start_s``
        (service start, after queueing) to ``tx_end_s``, arriving at ``arrive_s`` after
        ``latency_factor = l`` latencies; ``burst_bits`` of them passed before the rate
        applied and are not in the duration (module docstring)."""
        duration = tx_end_s - tx_start_s
        if duration < 0 or arrive_s < tx_end_s or wire_bits_on_link < 0 or latency_factor < 0:
            raise DecobenchError(
                "transfer observation out of order: need bits >= 0, latency factor >= 0 and "
                f"tx_start <= tx_end <= arrive, got bits={wire_bits_on_link!r}, "
                f"tx_start={tx_start_s!r}, tx_end={tx_end_s!r}, arrive={arrive_s!r}, "
                f"latency_factor={latency_factor!r}"
            )
        if not (math.isfinite(burst_bits) and burst_bits >= 0):
            raise DecobenchError(f"burst bits must be finite and >= 0, got {burst_bits!r}")
        at_rate = wire_bits_on_link - burst_bits
        if duration > 0 and at_rate > 0:
            self._bandwidth.update(at_rate / duration)
        if latency_factor > 0:
            self._latency.update((arrive_s - tx_end_s) / latency_factor)

    def observe_compute(self, compute_s: float) -> None:
        """One iteration's computation time."""
        if not compute_s >= 0:
            raise DecobenchError(f"compute time must be >= 0 s, got {compute_s!r}")
        self._compute.update(compute_s)

    def ready(self) -> bool:
        """True once â, b̂ and T̂ all have at least one sample."""
        return None not in (self._bandwidth.value, self._latency.value, self._compute.value)

    def estimate(self) -> NetworkEstimate:
        """The current ``(â, b̂, T̂)``; raises :class:`DecobenchError` before :meth:`ready`."""
        a, b, t = self._bandwidth.value, self._latency.value, self._compute.value
        if a is None or b is None or t is None:
            missing = [
                name
                for name, v in (("bandwidth", a), ("latency", b), ("compute time", t))
                if v is None
            ]
            raise DecobenchError(f"no network estimate yet: no measurement of {', '.join(missing)}")
        return NetworkEstimate(bandwidth_bps=a, latency_s=b, compute_s=t)
