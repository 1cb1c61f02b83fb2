"""The simulated transport: all n workers in one process, time on the event clock.

The exchange is local (:class:`~decobench.methods.LocalExchange`: the mean of the n rows,
held until s + τ_s), and each iteration advances the :class:`~decobench.clock.timemodel.EventClock`
of docs/design.md §4 with the compute time T (the profile's, or the measured wall time / n) and
the bits the method sent. When a transfer's :class:`~decobench.methods.Observation` reaches
the method is the ``report`` rule (:data:`REPORTS`):

- ``arrival`` (the default): at the first iteration that starts after the transfer arrived,
  with T̂'s sample the compute time of the freshest iteration, as an emulated rank reports
  it (the iteration that carries the report, not the one that sent the message: see
  :meth:`decobench.emulated.transport.DistributedTransport.submit`; the same value while T
  is constant).
- ``next-message``: as the emulated ranks learn it, where the report rides in the header of
  the next message: the transfer of message s, consumed at iteration c = s + τ_s (the last
  message consumed there; the others are not reported), is reported in message c + 1 with
  T̂'s sample T_{c+1}, and the method observes it at the iteration after message c + 1 is
  consumed. ``decobench fidelity`` uses it for the simulated run that plans for itself, so
  that its first plan reads what the emulated run's read: the arrival rule plans one or
  more iterations earlier, from the first iteration's compute time (its one-off costs).

A stop or a divergence takes effect at once (one process holds every worker).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Sequence

import torch

from decobench.clock.timemodel import EventClock
from decobench.clock.timing import IterationTiming
from decobench.clock.transport_model import IDEAL, TransportModel
from decobench.methods import Due, LocalExchange, Observation, Sent
from decobench.netem.trace import Trace
from decobench.training.loop import IterationTimes, no_pause

REPORTS: tuple[str, ...] = ("arrival", "next-message")
"""When an observation reaches the method (see the module docstring)."""


class SimulatedTransport:
    """:class:`~decobench.training.loop.Transport` of the simulated backend (see the module docstring).

    ``trace_for(d)``: the network for a model of d parameters (built at :meth:`start`);
    ``compute_time_s``: T per iteration, or None to charge the measured wall time / n;
    ``transport``: the event clock's transport model (:mod:`decobench.clock.transport_model`);
    ``device``: where the model and the n workers' gradients live (``--device``);
    ``compute_times``: T_k per iteration k, taking precedence over ``compute_time_s`` while
    it lasts (a replay of measured times: ``decobench fidelity``); ``report``: one of
    :data:`REPORTS`.
    """

    rows = slice(None)
    leader = True
    time_basis = "simulated"

    def __init__(self, trace_for: Callable[[int], Trace], topology: str, workers: int,
                 compute_time_s: float | None, transport: TransportModel = IDEAL,
                 device: torch.device | None = None,
                 compute_times: Sequence[float] | None = None,
                 report: str = "arrival") -> None:
        if report not in REPORTS:
            raise ValueError(f"report must be one of {', '.join(REPORTS)}, got {report!r}")
        self.report = report
        self.device = torch.device("cpu") if device is None else device
        self.trace_for = trace_for
        self.transport = transport
        self.topology = topology
        self.workers = workers
        self.compute_time_s = compute_time_s
        self.compute_times = None if compute_times is None else tuple(compute_times)
        self.exchange = LocalExchange()
        self._in_flight: list[tuple[float, int, Observation]] = []  # (arrive_s, iteration, ·)
        self._diverged_at: int | None = None
        self._losses: dict[int, float] = {}
        self._stop = False
        self._last_compute_s: float | None = None   # T of the latest completed iteration
        # next-message: final observations by message, the message whose transfer the next
        # one reports on, the reports by carrying message, those ready for the method
        self._final: dict[int, Observation] = {}
        self._report_next: int | None = None
        self._reports: dict[int, Observation] = {}
        self._ready: list[Observation] = []

    def start(self, d: int, state: dict[str, object] | None = None) -> None:
        self.trace = self.trace_for(d)
        self.clock = EventClock(self.trace, topology=self.topology, workers=self.workers,
                                transport=self.transport)
        if state is not None:
            self.load_state_dict(state)

    def checkpoint_now(self, iteration: int, due: bool) -> bool:
        return due                        # one process: it saves when its checkpointer asks

    def _collect(self) -> None:
        """Queue the transfers whose times the clock has made final (at once under the
        time model's FIFO link; once delivered under a ``shared`` transport model)."""
        for timing in self.clock.pop_final():
            if self.report == "next-message":
                self._final[timing.iteration] = _observation(timing)
            else:
                heapq.heappush(self._in_flight, (timing.arrive_s, timing.iteration,
                                                 _observation(timing)))

    def _pass_reports(self, iteration: int, compute_s: float) -> None:
        """``next-message``, after iteration ``iteration``'s step: its message carries the
        report on the transfer consumed last before it, with its T; the messages consumed
        now release the reports they carry, and the last of them is the next to report."""
        if self._report_next is not None and self._report_next in self._final:
            self._reports[iteration] = dataclasses.replace(
                self._final.pop(self._report_next), compute_s=compute_s)
        self._report_next = None
        for message in self._due:
            if message.sent_at in self._reports:
                self._ready.append(self._reports.pop(message.sent_at))
            if self._report_next is not None:      # consumed, never to be reported
                self._final.pop(self._report_next, None)
            self._report_next = message.sent_at

    def observations(self, iteration: int) -> list[Observation]:
        if self.report == "next-message":
            ready, self._ready = self._ready, []
            return ready
        start_s = self.clock.next_start()
        self._collect()
        arrived = []
        while self._in_flight and self._in_flight[0][0] <= start_s:
            observation = heapq.heappop(self._in_flight)[2]
            if self._last_compute_s is not None:
                observation = dataclasses.replace(observation, compute_s=self._last_compute_s)
            arrived.append(observation)
        return arrived

    def flag_divergence(self, iteration: int) -> None:
        self._diverged_at = iteration + 1

    def submit(self, iteration: int, sent: Sent, loss: float) -> None:
        self._due = self.exchange.exchange(iteration, sent)
        self._losses = {iteration: loss}           # the mean over all n rows already

    def losses(self) -> dict[int, float]:
        losses, self._losses = self._losses, {}
        return losses

    def finish(self) -> None:
        return None

    def due(self, iteration: int) -> list[Due]:
        return self._due

    def complete(self, iteration: int, sent: Sent, work_s: float) -> IterationTimes:
        if self.compute_times is not None and iteration < len(self.compute_times):
            compute_s = self.compute_times[iteration]
        else:
            compute_s = (self.compute_time_s if self.compute_time_s is not None
                         else work_s / self.workers)
        payload = sent.payload
        timing = self.clock.step(compute_s, payload.bits_per_worker, sent.staleness,
                                 payload.dense)
        self._last_compute_s = timing.compute_s
        self._collect()
        if self.report == "next-message":
            self._pass_reports(iteration, timing.compute_s)
        # the network at the message: when it left the queue and when it was sent (FIFO);
        # when it was issued, under a shared link (its times are not known yet)
        sent_at = timing.tx_start_s if math.isfinite(timing.tx_start_s) else timing.end_s
        done_at = timing.tx_end_s if math.isfinite(timing.tx_end_s) else timing.end_s
        return IterationTimes(
            sim_time_s=timing.end_s, bubble_s=self.clock.total_bubble_s,
            compute_s=timing.compute_s,
            bandwidth_mbps=self.trace.bandwidth_at(sent_at) / 1e6,
            latency_ms=self.trace.latency_at(done_at) * 1e3)

    def in_flight(self) -> list[Due]:
        return self.exchange.in_flight()

    def now_s(self) -> float:
        return self.clock.now_s

    def model_ready_s(self) -> float:
        return self.clock.model_ready_s()

    def evaluation_pause(self):
        return no_pause()

    def request_stop(self) -> None:
        self._stop = True

    def stopping(self, iteration: int) -> bool:
        return self._stop

    def diverged_at(self) -> int | None:
        return self._diverged_at

    def state_dict(self) -> dict[str, object]:
        """Everything this transport holds except how it builds its trace (a checkpoint)."""
        return {k: v for k, v in vars(self).items() if k != "trace_for"}

    def load_state_dict(self, state: dict[str, object]) -> None:
        vars(self).update(state)

    def totals(self) -> dict[str, float]:
        """The run's simulated time is when its last model exists (the last evaluation's
        time): the clock's end, or later when that model waited for messages due then."""
        return {"sim_time_s": self.clock.model_ready_s(), "bubble_s": self.clock.total_bubble_s,
                "bubble_fraction": self.clock.bubble_fraction()}


def _observation(timing: IterationTiming) -> Observation:
    return Observation(iteration=timing.iteration, compute_s=timing.compute_s,
                       link_bits=timing.link_bits, tx_start_s=timing.tx_start_s,
                       tx_end_s=timing.tx_end_s, arrive_s=timing.arrive_s,
                       latency_factor=timing.latency_factor, burst_bits=timing.burst_bits)


__all__ = ["SimulatedTransport"]
