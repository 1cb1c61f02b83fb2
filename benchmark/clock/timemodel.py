"""The simulated clock: the event recurrence and closed form of docs/design.md §4.

For iterations ``k = 0, 1, ...`` with compute time ``T_k``, message bits ``W_k`` and
staleness ``τ_k`` (a message sent at ``j`` is applied at iteration ``j + τ_j``)::

    R_k      = max{ arrive_j : j + τ_j + 1 <= k }      (0 if no such j)
    start_k  = max(end_{k-1}, R_k)                     # compute waits for due updates
    end_k    = start_k + T_k
    txs_k    = max(end_k, txe_{k-1})                   # one link: messages go out in order
    txe_k    = the t with ∫_{txs_k}^{t} a(s) ds = h · W_k
    arrive_k = txe_k + l · b(txe_k)

with ``end_{-1} = txe_{-1} = 0`` and the topology factors ``h, l`` of
:mod:`decobench.clock.topology`. The run's clock is ``end`` of its last iteration.

For constant ``a, b, T, W, τ`` the average iteration time is (the paper's Theorem 3)::

    T_avg = max(T, h W / a, (T + h W / a + l b) / (τ + 1))

and, writing ``c = h W / a``, the recurrence stays within
``-max(T + c + l b, (τ + 1) c - T) <= end_K - K T_avg <= T - T_avg <= 0`` for every ``K``
(a max-plus path argument; see ``tests/test_timemodel.py``). The bound first written for
this project, ``T + c + l b`` alone, is too tight when the link is the bottleneck and
``τ c > 2 T + l b``: compute then runs ahead of a backlog of ``τ + 1`` queued messages (a
worked counterexample is in the tests).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from decobench.clock.link_sharing import SharedLink, SharedLinkTrace
from decobench.clock.timing import IterationTiming
from decobench.clock.topology import topology_factors
from decobench.clock.transport_model import IDEAL, TransportModel
from decobench.errors import DecobenchError


@runtime_checkable
class Link(Protocol):
    """A network link with piecewise-constant bandwidth ``a(t)`` and latency ``b(t)`` (§4).

    ``decobench.netem.trace.Trace`` satisfies it; so does :class:`ConstantLink`.
    """

    def transmission_end(self, start_s: float, bits: float) -> float:
        """The ``t`` with ``∫_{start_s}^{t} a(s) ds = bits`` (exact for piecewise-constant a)."""
        ...

    def latency_at(self, t: float) -> float:
        """One-way latency ``b(t)`` in seconds."""
        ...


@dataclass(frozen=True)
class ConstantLink:
    """A link with constant bandwidth ``a`` (bit/s) and latency ``b`` (s)."""

    bandwidth_bps: float
    latency_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.bandwidth_bps) and self.bandwidth_bps > 0):
            raise DecobenchError(
                f"bandwidth must be finite and > 0 bit/s, got {self.bandwidth_bps!r}"
            )
        if not (math.isfinite(self.latency_s) and self.latency_s >= 0):
            raise DecobenchError(f"latency must be finite and >= 0 s, got {self.latency_s!r}")

    def transmission_end(self, start_s: float, bits: float) -> float:
        """``start + bits / a``."""
        return start_s + bits / self.bandwidth_bps

    def latency_at(self, t: float) -> float:
        """``b``, whatever ``t``."""
        return self.latency_s

    def capacity_bits(self, start_s: float, end_s: float) -> float:
        """``a · (end − start)`` (0 for an empty interval)."""
        return self.bandwidth_bps * max(0.0, end_s - start_s)


class EventClock:
    """Incremental event recurrence of docs/design.md §4.2, one :meth:`step` per iteration::

        R_k = max{arrive_j : j + τ_j + 1 <= k} (0 if none);  start_k = max(end_{k-1}, R_k);
        end_k = start_k + T_k;  txs_k = max(end_k, txe_{k-1});
        txe_k solves ∫_{txs_k}^{t} a = h·W_k;  arrive_k = txe_k + l · b(txe_k).

    Messages in flight sit in a heap keyed by their due iteration ``j + τ_j``; ``R`` is kept
    as a running maximum (the set it ranges over only grows with ``k``), so a step costs
    O(log m) for m messages in flight, whatever ``τ`` does between iterations.

    ``transport``: a :class:`~decobench.clock.transport_model.TransportModel` other than the ideal
    link charges ``max(0, h·W − B) / g`` bits at the link's rate and delivers ``m·l·b``
    after the transmission (:mod:`decobench.clock.transport_model`); ``link_bits`` and
    ``latency_factor`` of each timing stay ``h·W`` and ``l``, so an estimator reads the
    rate and latency the transport delivers.

    Under a ``shared`` transport model the FIFO lines (``txs_k``, ``txe_k``, ``arrive_k``)
    give way to :class:`~decobench.clock.link_sharing.SharedLink`'s fluid, where later messages
    slow earlier ones down: :meth:`step` then returns the message's times as NaN (not yet
    known) and :meth:`pop_final` hands the final timings over once the fluid has run past
    their delivery (under ``fifo`` a timing is final when :meth:`step` returns it, and
    :meth:`pop_final` hands it over at once). ``R_k``, ``start_k`` and ``end_k`` are exact
    in both: the fluid runs to a time only when no later collective can start before it.
    """

    def __init__(self, link: Link, topology: str = "paper", workers: int = 1,
                 transport: TransportModel = IDEAL) -> None:
        topology_factors(topology, workers, dense=False)  # validates both arguments
        self._transport = transport
        self._link = link
        self._topology = topology
        self._workers = workers
        self._iteration = 0
        self._end = 0.0  # end_{k-1}
        self._tx_end = 0.0  # txe_{k-1}
        self._ready = 0.0  # running max of arrivals already due (R)
        self._pending: list[tuple[int, int, float]] = []  # (due iteration, sent at, arrive_s)
        self._total_compute = 0.0
        self._total_bubble = 0.0
        self._final: list[IterationTiming] = []
        self._shared: SharedLink | None = None
        if transport.link_sharing == "shared":
            if not isinstance(link, SharedLinkTrace):
                raise DecobenchError(f"a shared transport model needs a link with "
                                     f"capacity_bits(start, end); {type(link).__name__} has none")
            self._shared = SharedLink(link, transport.lanes)

    def _drain_due_before(self, k: int) -> float:
        """Fold arrivals of messages with ``j + τ_j + 1 <= k`` into ``R`` and return it."""
        while self._pending and self._pending[0][0] + 1 <= k:
            _, j, arrive = heapq.heappop(self._pending)
            if self._shared is not None:
                arrive = self._shared.arrival(j)
            self._ready = max(self._ready, arrive)
        if self._shared is not None:
            self._shared.forget_before(min((j for _, j, _ in self._pending), default=k))
        return self._ready

    def next_start(self) -> float:
        """``start_k = max(end_{k-1}, R_k)`` of the next iteration ``k``, before stepping it."""
        start = max(self._end, self._drain_due_before(self._iteration))
        if self._shared is not None:
            self._shared.advance_to(start)   # nothing is issued before end_k >= start_k
        return start

    def pop_final(self) -> list[IterationTiming]:
        """Timings whose message times became final since the last call (send order under
        ``shared``, step order under ``fifo``)."""
        if self._shared is not None:
            return self._shared.pop_final()
        final, self._final = self._final, []
        return final

    def step(self, compute_s: float, bits: float, staleness: int, dense: bool) -> IterationTiming:
        """Advance one iteration with compute time ``T_k``, a message of ``bits`` per worker
        sent with staleness ``τ_k``; ``dense`` selects all-reduce vs all-gather factors."""
        if not (math.isfinite(compute_s) and compute_s >= 0):
            raise DecobenchError(f"compute time must be finite and >= 0 s, got {compute_s!r}")
        if not (math.isfinite(bits) and bits >= 0):
            raise DecobenchError(f"message bits must be finite and >= 0, got {bits!r}")
        if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
            raise DecobenchError(f"staleness must be an integer >= 0, got {staleness!r}")
        factors = topology_factors(self._topology, self._workers, dense)
        k = self._iteration
        start = self.next_start()
        end = start + compute_s
        link_bits = factors.h * bits
        cost = self._transport.cost(dense)
        rate_bits = cost.rate_bits(link_bits)
        if self._shared is None:
            tx_start = max(end, self._tx_end)
            tx_end = (self._link.transmission_end(tx_start, rate_bits) if rate_bits > 0
                      else tx_start)
            arrive = tx_end + cost.latency_multiplier * factors.l * self._link.latency_at(tx_end)
        else:
            tx_start = tx_end = arrive = math.nan   # set when the fluid delivers it
        heapq.heappush(self._pending, (k + staleness, k, arrive))
        timing = IterationTiming(
            iteration=k,
            start_s=start,
            end_s=end,
            tx_start_s=tx_start,
            tx_end_s=tx_end,
            arrive_s=arrive,
            compute_s=compute_s,
            bubble_s=start - self._end,
            bits=bits,
            staleness=staleness,
            link_bits=link_bits,
            latency_factor=factors.l,
            burst_bits=min(cost.burst_bits, link_bits),
        )
        self._total_compute += compute_s
        self._total_bubble += start - self._end
        self._end = end
        self._iteration = k + 1
        if self._shared is None:
            self._tx_end = tx_end
            self._final.append(timing)
        else:                                # issue runs the fluid to end_k first
            self._shared.issue(timing, cost.after_burst(link_bits),
                               steps=max(1, round(factors.l)),
                               latency_factor=cost.latency_multiplier * factors.l,
                               goodput=cost.goodput)
        return timing

    def model_ready_s(self) -> float:
        """When ``x_{k+1}`` exists after the last stepped iteration ``k``:
        ``max(end_k, max{arrive_j : j + τ_j <= k})`` (0 before any step). Times evaluations."""
        return self.next_start()

    @property
    def now_s(self) -> float:
        """``end_k`` of the last iteration: the simulated clock (0 before any step)."""
        return self._end

    @property
    def iteration(self) -> int:
        """Number of iterations stepped."""
        return self._iteration

    @property
    def total_compute_s(self) -> float:
        """``Σ T_k`` over the stepped iterations."""
        return self._total_compute

    @property
    def total_bubble_s(self) -> float:
        """``Σ (start_k - end_{k-1})``: time compute spent waiting for due updates."""
        return self._total_bubble

    def bubble_fraction(self) -> float:
        """``1 - Σ T_k / end_K`` (docs/design.md §4.5); 0 while ``end_K == 0``."""
        if self._end <= 0:
            return 0.0
        return 1.0 - self._total_compute / self._end


def t_avg(
    T: float,
    wire_bits: float,
    bandwidth_bps: float,
    latency_s: float,
    staleness: int,
    h: float = 1.0,
    l: float = 1.0,  # noqa: E741 - docs/design.md's name
) -> float:
    """Closed-form average iteration time for constant conditions (docs/design.md §4.4, Thm. 3):
    ``T_avg = max(T, h W / a, (T + h W / a + l b) / (τ + 1))``."""
    if not (math.isfinite(bandwidth_bps) and bandwidth_bps > 0):
        raise DecobenchError(f"bandwidth must be finite and > 0 bit/s, got {bandwidth_bps!r}")
    if staleness < 0:
        raise DecobenchError(f"staleness must be >= 0, got {staleness!r}")
    tx = h * wire_bits / bandwidth_bps
    return max(T, tx, (T + tx + l * latency_s) / (staleness + 1))


def simulate_constant(
    T: float,
    wire_bits: float,
    bandwidth_bps: float,
    latency_s: float,
    staleness: int,
    iterations: int,
    topology: str = "paper",
    workers: int = 1,
    dense: bool = False,
) -> list[IterationTiming]:
    """Run :class:`EventClock` on a :class:`ConstantLink` with constant ``T, W, τ`` (§4)."""
    clock = EventClock(ConstantLink(bandwidth_bps, latency_s), topology, workers)
    return [clock.step(T, wire_bits, staleness, dense) for _ in range(iterations)]
