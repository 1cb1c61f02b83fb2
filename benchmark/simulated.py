"""The simulated transport: all n workers in one process, time on the event clock.

The exchange is local (:class:`~decobench.methods.LocalExchange`: the mean of the n rows,
held until s + τ_s), and each iteration advances the :class:`~decobench.timemodel.EventClock`
of deco-sgd.md §4 with the compute time T (the profile's, or the measured wall time / n) and
the bits the method sent. A transfer's :class:`~decobench.methods.Observation` is given to
the method at the first iteration that starts after it arrived. A stop or a divergence takes
effect at once (one process holds every worker).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

import torch

from decobench.loop import IterationTimes, no_pause
from decobench.methods import Due, LocalExchange, Observation, Sent
from decobench.netem.trace import Trace
from decobench.timemodel import EventClock, IterationTiming
from decobench.transport_model import IDEAL, TransportModel


class SimulatedTransport:
    """:class:`~decobench.loop.Transport` of the simulated backend (see the module docstring).

    ``trace_for(d)``: the network for a model of d parameters (built at :meth:`start`);
    ``compute_time_s``: T per iteration, or None to charge the measured wall time / n;
    ``transport``: the event clock's transport model (:mod:`decobench.transport_model`);
    ``device``: where the model and the n workers' gradients live (``--device``);
    ``compute_times``: T_k per iteration k, taking precedence over ``compute_time_s`` while
    it lasts (a replay of measured times: ``decobench fidelity``).
    """

    rows = slice(None)
    leader = True
    time_basis = "simulated"

    def __init__(self, trace_for: Callable[[int], Trace], topology: str, workers: int,
                 compute_time_s: float | None, transport: TransportModel = IDEAL,
                 device: torch.device | None = None,
                 compute_times: Sequence[float] | None = None) -> None:
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
            heapq.heappush(self._in_flight, (timing.arrive_s, timing.iteration,
                                             _observation(timing)))

    def observations(self, iteration: int) -> list[Observation]:
        start_s = self.clock.next_start()
        self._collect()
        arrived = []
        while self._in_flight and self._in_flight[0][0] <= start_s:
            arrived.append(heapq.heappop(self._in_flight)[2])
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
        self._collect()
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
        return {"sim_time_s": self.clock.now_s, "bubble_s": self.clock.total_bubble_s,
                "bubble_fraction": self.clock.bubble_fraction()}


def _observation(timing: IterationTiming) -> Observation:
    return Observation(iteration=timing.iteration, compute_s=timing.compute_s,
                       link_bits=timing.link_bits, tx_start_s=timing.tx_start_s,
                       tx_end_s=timing.tx_end_s, arrive_s=timing.arrive_s,
                       latency_factor=timing.latency_factor, burst_bits=timing.burst_bits)


__all__ = ["SimulatedTransport"]
