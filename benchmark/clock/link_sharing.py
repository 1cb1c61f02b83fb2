"""Lanes sharing the link: the ``shared`` link of a transport model (docs/emulation.md
"Transport models"), an alternative to the time model's FIFO queue.

The time model of docs/design.md §4.2 puts every message in one FIFO queue: message k starts
when message k − 1's last bit has left, and the latency of k − 1 overlaps the
transmission of k. A real transport with several collectives in flight does not queue
them: measured on this project's emulated links (gloo over TCP, 2 workers, 20 Mbit/s,
100 ms; docs/emulation.md), each collective is a sequence of ring steps that each wait for
the receiver's ready notice before sending, and collectives on separate TCP connections
(:class:`~decobench.emulated.comm.Communicator`'s lanes) transmit at the same time, each at
a share of the link. Two DGA all-reduces issued 40 ms apart progress at half rate and
finish together, so DGA's iterations come in pairs (one waits 1.75 s, the next not at all)
and average 0.90-0.95 s where the FIFO queue gives 0.73 s.

:class:`SharedLink` models that (a fluid, processor-sharing link)::

    a collective of l ring steps, issued at t_k (message k, lane k mod L):
        starts      when message k − L has been delivered (L = lanes; no wait if unbounded)
        each step   waits m·b(t)/2, sends (h·W − B) / l bits, waits m·b(t)/2
        delivered   at the end of its last step
    a collective sending alone sends at g·a(t); n sending at once share a(t) max-min
    fairly, each at most g·a(t) (equal g: each at min(g, 1/n)·a(t))

with the fitted ``m, g, B`` of the collective's :class:`~decobench.clock.transport_model.CollectiveCost`
(``l = 1`` under the ``paper`` topology: one step with the whole latency). A collective
alone therefore takes ``m·l·b + (h·W − B)/(g·a)``, what the FIFO link charges it, so a
run whose messages never overlap (τ = 0) is timed the same by both; the two differ when
messages overlap, which is when the FIFO queue hides latency a real transport pays.

The goodput g is a cap per collective, not a loss of the link: one collective is one TCP
connection (its lane's), and a lone connection can fall short of the link where several
together fill it. Measured on the emulated links (gloo, 2 workers, 20 Mbit/s, 100 ms,
nfqueue, 2026-11-26): a lone all-gather of 1-20 Mbit ran at 0.665 of the rate in 4 of 5
calibrations of one ``decobench fidelity`` (and 0.99 in the fifth and in earlier ones),
while DeCo-SGD's overlapping all-gathers on 8 lanes moved 0.82 Mbit every 51.5 ms (0.8 of
the link). Charging g as lost link capacity made the simulated run 21% slower than the
emulated one.

A message's delivery depends on the collectives issued after it (they slow it down), so
its times are final only once the fluid has run past its delivery; the clock advances the
fluid only as far as the next collective's issue time (no later collective can change
anything before it). Delivered messages' times are set in send order, as the emulated ranks
set them (:mod:`decobench.emulated.comm`)::

    tx_start_k = max(started_k, tx_end_{k−1}),   tx_end_k = max(tx_start_k, arrive_k − m·l·b(t_k))

and the reported arrival at least ``tx_end_k`` (a small message delivered before a large one
sent earlier; the emulated transport clamps it the same way, and the clock's schedule uses
the true delivery), so DeCo's estimators read ``â = hW / (tx_end − tx_start)`` and ``b̂ = (arrive − tx_end) / l``
as they read them from the real transport.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from decobench.clock.timing import IterationTiming
from decobench.errors import DecobenchError

PRE, SEND, POST = "pre", "send", "post"
"""The phases of a ring step: wait for the ready notice, send, wait for delivery."""
_EPS_BITS = 1e-6
"""Bits left in a send that count as sent (float rounding of the fluid's integrals)."""


@runtime_checkable
class SharedLinkTrace(Protocol):
    """What :class:`SharedLink` needs of a link: the time model's
    :class:`~decobench.clock.timemodel.Link` and the capacity of an interval."""

    def transmission_end(self, start_s: float, bits: float) -> float: ...

    def latency_at(self, t: float) -> float: ...

    def capacity_bits(self, start_s: float, end_s: float) -> float:
        """``∫_{start_s}^{end_s} a(s) ds``."""
        ...


@dataclass
class _Collective:
    """One message's collective in the fluid (module docstring)."""

    timing: IterationTiming      # the iteration's timing; message times filled on delivery
    steps_left: int
    step_bits: float              # bits sent per step: (hW − B) / l
    goodput: float                # g: the most of a(t) the collective sends at
    half_wait: float              # multiplier of b(t) for each wait: m·l / (2·steps)
    fixed_factor: float           # m·l: the collective's latency, in b
    phase: str = ""
    until_s: float = math.inf     # end of a wait
    remaining_bits: float = 0.0   # bits of the current send still to go
    started_s: float = math.nan
    arrive_s: float = math.nan


class SharedLink:
    """The fluid of the module docstring over ``link``, with at most ``lanes`` collectives
    in flight (None: no bound). :meth:`issue` adds a collective at its issue time,
    :meth:`advance_to` and :meth:`arrival` move the fluid forward (never back),
    :meth:`pop_final` hands over the timings that became final, in send order."""

    def __init__(self, link: SharedLinkTrace, lanes: int | None = None) -> None:
        if lanes is not None and lanes < 1:
            raise DecobenchError(f"transport model: lanes must be >= 1 or unbounded, got "
                                 f"{lanes!r}")
        self._link = link
        self._lanes = lanes
        self._now = 0.0
        self._active: list[_Collective] = []        # started, not delivered
        self._queued: deque[_Collective] = deque()   # issued, waiting for their lane
        self._unfinal: deque[_Collective] = deque()  # issued, times not yet set (send order)
        self._arrivals: dict[int, float] = {}        # iteration -> delivery, until forgotten
        self._final: list[IterationTiming] = []
        self._tx_end = 0.0                           # tx_end of the last final message

    def issue(self, timing: IterationTiming, link_bits: float, steps: int,
              latency_factor: float, goodput: float = 1.0) -> None:
        """Add iteration ``timing.iteration``'s collective at its ``end_s`` (the fluid runs
        there first and must not have run past it): ``steps`` ring steps, ``link_bits =
        max(0, hW − B)`` bits in all sent at most at ``goodput·a(t)``, ``latency_factor =
        m·l``."""
        if not (math.isfinite(goodput) and goodput > 0):
            raise DecobenchError(f"shared link: goodput must be > 0, got {goodput!r}")
        if timing.end_s < self._now:
            raise DecobenchError(f"shared link: collective {timing.iteration} issued at "
                                 f"{timing.end_s!r} s, before the fluid's {self._now!r} s")
        self.advance_to(timing.end_s)
        steps = max(1, steps)
        collective = _Collective(timing=timing, steps_left=steps,
                                 step_bits=max(0.0, link_bits) / steps, goodput=goodput,
                                 half_wait=latency_factor / (2 * steps),
                                 fixed_factor=latency_factor)
        self._queued.append(collective)
        self._unfinal.append(collective)
        self._settle()

    def advance_to(self, t: float) -> None:
        """Run the fluid to time ``t`` (no collective may be issued before ``t``)."""
        while True:
            event, shares, least, send_end = self._next_event()
            if event > t:
                self._move(t, shares, None)
                return
            self._take(event, shares, least, send_end)

    def arrival(self, iteration: int) -> float:
        """Delivery time of an issued message, running the fluid until it is delivered (the
        caller guarantees no collective is issued before then)."""
        while iteration not in self._arrivals:
            event, shares, least, send_end = self._next_event()
            if not math.isfinite(event):
                raise DecobenchError(f"shared link: message {iteration} is never delivered "
                                     "(no collective in flight can finish on this link)")
            self._take(event, shares, least, send_end)
        return self._arrivals[iteration]

    def forget_before(self, iteration: int) -> None:
        """Drop the delivery times of messages before ``iteration`` (read by the caller)."""
        for key in [k for k in self._arrivals if k < iteration]:
            del self._arrivals[key]

    def pop_final(self) -> list[IterationTiming]:
        """The timings made final since the last call, in send order."""
        final, self._final = self._final, []
        return final

    # -- the fluid ------------------------------------------------------------------------

    def _next_event(self) -> tuple[float, dict[int, float], float, float]:
        """(time of the next phase change, each sending collective's share (:meth:`_shares`),
        the link's capacity until the first send ends at those shares, when that send ends)."""
        event = send_end = math.inf
        least = math.inf
        shares = self._shares()
        for c in self._active:
            if c.phase == SEND:
                least = min(least, c.remaining_bits / shares[id(c)])
            else:
                event = min(event, c.until_s)
        if shares:
            send_end = self._link.transmission_end(self._now, least)
        return min(event, send_end), shares, least, send_end

    def _shares(self) -> dict[int, float]:
        """Each sending collective's fraction of a(t): max-min fair, each at most its g
        (water-filling over the caps; the fractions sum to at most max(1, largest g), so a
        lone collective gets its g even where a fit put g above 1)."""
        sending = sorted((c for c in self._active if c.phase == SEND), key=lambda c: c.goodput)
        left = max([1.0] + [c.goodput for c in sending])
        shares: dict[int, float] = {}
        for i, c in enumerate(sending):
            share = min(c.goodput, left / (len(sending) - i))
            shares[id(c)] = share
            left -= share
        return shares

    def _take(self, event: float, shares: dict[int, float], least: float,
              send_end: float) -> None:
        """Run the fluid to ``event`` (:meth:`_next_event`) and apply its phase changes."""
        self._move(event, shares, least if send_end <= event else None)
        self._settle()

    def _move(self, t: float, shares: dict[int, float], capacity: float | None) -> None:
        """Move the fluid to ``t``; every sending collective sends its share (``shares``, of
        the collectives sending until ``t``) of the link's capacity ``∫ a`` over the
        interval (``capacity``, given when a send ends at ``t``)."""
        if shares and (capacity is not None or t > self._now):
            if capacity is None:
                capacity = self._link.capacity_bits(self._now, t)
            for c in self._active:
                if c.phase == SEND:
                    c.remaining_bits = max(0.0, c.remaining_bits - shares[id(c)] * capacity)
        self._now = max(self._now, t)

    def _settle(self) -> None:
        """Apply every phase change due at the fluid's time, start collectives whose lane
        is free, and set the times of delivered messages in send order."""
        changed = True
        while changed:
            changed = False
            while self._queued and self._lane_free(self._queued[0].timing.iteration):
                c = self._queued.popleft()
                c.started_s = self._now
                self._active.append(c)
                self._enter(c, PRE)
                changed = True
            for c in list(self._active):
                while c in self._active and self._phase_over(c):
                    self._next_phase(c)
                    changed = True
        while self._unfinal and not math.isnan(self._unfinal[0].arrive_s):
            self._finalize(self._unfinal.popleft())

    def _lane_free(self, iteration: int) -> bool:
        """Message ``iteration`` may start once ``iteration − L`` is delivered (its lane's
        previous message: issued earlier, so delivered unless still active or queued)."""
        if self._lanes is None or iteration < self._lanes:
            return True
        before = iteration - self._lanes
        return all(c.timing.iteration != before for c in (*self._active, *self._queued))

    def _phase_over(self, c: _Collective) -> bool:
        if c.phase == SEND:
            return c.remaining_bits <= _EPS_BITS
        return c.until_s <= self._now

    def _enter(self, c: _Collective, phase: str) -> None:
        c.phase = phase
        if phase == SEND:
            c.remaining_bits = c.step_bits
            c.until_s = math.inf
        else:
            c.until_s = self._now + c.half_wait * self._link.latency_at(self._now)

    def _next_phase(self, c: _Collective) -> None:
        if c.phase == PRE:
            self._enter(c, SEND)
        elif c.phase == SEND:
            self._enter(c, POST)
        else:
            c.steps_left -= 1
            if c.steps_left > 0:
                self._enter(c, PRE)
                return
            c.arrive_s = self._now
            self._arrivals[c.timing.iteration] = self._now
            self._active.remove(c)

    def _finalize(self, c: _Collective) -> None:
        fixed = c.fixed_factor * self._link.latency_at(c.timing.end_s)
        tx_start = max(c.started_s, self._tx_end)
        tx_end = max(tx_start, c.arrive_s - fixed)
        self._tx_end = tx_end
        self._final.append(dataclasses.replace(c.timing, tx_start_s=tx_start, tx_end_s=tx_end,
                                               arrive_s=max(c.arrive_s, tx_end)))


__all__ = ["SharedLink", "SharedLinkTrace"]
