"""The distributed transport: one worker per rank, real collectives, measured time.

This rank's messages go to a background :class:`~decobench.emulated.comm.Communicator`
(all-gather of ⌈W/8⌉-byte frames, or a dense all-reduce) as soon as they are sent; a message
sent at s with staleness τ_s is waited for at iteration s + τ_s (blocking only if it has not
arrived) and handed to the method as the mean over the n workers.

Clocks: the trace clock is wall time since the ranks left a common barrier (the trace player
and the communication layer's latency use it); the training clock is the trace clock minus
the time the leader spent evaluating, and is what the rows report as ``sim_time_s``
(``time_basis: measured``).

Agreement between ranks: every message's header carries its sender's measurements of the
transfer it last applied and stop / divergence / checkpoint flags. All ranks apply message s
at iteration s + τ_s and read the same n headers there, so adaptive methods see the same
observations at the same iteration on every rank (given to the method when the next
iteration starts) and choose the same (δ, τ), all ranks stop after the same iteration, and
all ranks checkpoint after the same iteration: the leader raises :data:`FLAG_CHECKPOINT`
when its checkpointer is due, every rank saves when that message is applied, and each header
reports the newest checkpoint its sender saved (``saved_iteration``), so a rank deletes an
older checkpoint only once every rank holds a newer one
(:class:`~decobench.runs.checkpoint.RankCheckpointer`).

Resuming (:meth:`DistributedTransport.start` with a state) restores the sent-message
records, the messages in flight (waited for when the checkpoint was taken, handed back to
the communicator) and both clocks: the trace clock continues from where it stopped, so the
trace player and the latency resume at the same point of the trace.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from decobench.atomicio import write_text_atomic
from decobench.clock.topology import topology_factors
from decobench.emulated.comm import Arrival, Communicator, encode_message
from decobench.emulated.delivery import DeliveryDelay
from decobench.methods import Due, Observation, Sent
from decobench.netem.trace import Trace
from decobench.runs.checkpoint import RankCheckpointer
from decobench.training.loop import IterationTimes

FLAG_STOP = 1
"""Header flag: the sender asks every rank to stop (target met or time budget spent)."""
FLAG_DIVERGED = 2
"""Header flag: the sender's loss was not finite at the message's iteration."""
FLAG_CHECKPOINT = 4
"""Header flag: the leader asks every rank to checkpoint after the iteration that applies
this message."""
KEEP_RECORDS = 64
"""Iterations of sent-message records kept after they were applied (headers refer back)."""
KERNEL_IN_FLIGHT = 8
"""Collectives in flight at once by default where the network adds the latency
(:class:`~decobench.emulated.comm.Communicator`'s lanes): a collective then lasts at least a
round trip, and a message sent with staleness τ overlaps the next τ only if τ + 1 are in
flight; 8 covers the τ ≤ 7 that DeCo plans on the paper's conditions."""


def default_in_flight(latency_mechanism: str, workers: int) -> int:
    """Lanes by default: :data:`KERNEL_IN_FLIGHT` under kernel latency, else 1 (a collective
    holds no latency, and one at a time is the time model's link)."""
    return KERNEL_IN_FLIGHT if latency_mechanism == "kernel" and workers > 1 else 1


@dataclass
class SentRecord:
    """What this rank remembers of a message it sent."""

    staleness: int
    dense: bool
    bits: int
    arrival: Arrival | None = None


class RankClock:
    """Trace clock (since the common start) and training clock (minus evaluation pauses)."""

    def __init__(self) -> None:
        self.origin = time.monotonic()
        self.paused_s = 0.0

    def trace_s(self) -> float:
        return time.monotonic() - self.origin

    def train_s(self) -> float:
        return self.trace_s() - self.paused_s


def consensus_observation(headers: list[dict[str, float]], sent: dict[int, SentRecord],
                          workers: int, topology: str,
                          burst_bits_at: Callable[[float], float] | None = None
                          ) -> Observation | None:
    """The transfer every header reports on, as all ranks agree to see it: the slowest
    rank's compute (of the iteration that sent the header, see
    :meth:`DistributedTransport.submit`), the latest start, end and arrival (seconds on the
    ranks' own clocks, which start together at the barrier). ``burst_bits_at(tx_start)``:
    the bits the link passes at line rate then (its shaper's token bucket), at most the
    transfer's; none without it."""
    iterations = {h["obs_iteration"] for h in headers}
    if len(iterations) != 1:
        return None
    j = next(iter(iterations))
    if not math.isfinite(j) or int(j) not in sent:
        return None
    record = sent[int(j)]
    factors = topology_factors(topology, workers, dense=record.dense)
    tx_start = max(h["obs_tx_start_s"] for h in headers)
    tx_end = max(max(h["obs_tx_end_s"] for h in headers), tx_start)
    arrive = max(max(h["obs_arrive_s"] for h in headers), tx_end)
    link_bits = factors.h * record.bits
    burst = min(link_bits, burst_bits_at(tx_start)) if burst_bits_at is not None else 0.0
    return Observation(iteration=int(j), compute_s=max(h["obs_compute_s"] for h in headers),
                       link_bits=link_bits, tx_start_s=tx_start, tx_end_s=tx_end,
                       arrive_s=arrive, latency_factor=factors.l, burst_bits=burst)


def _as_due(arrival: Arrival) -> Due:
    """The method's view of an arrived message: the mean update and rank 0's control bytes
    (rank 0 holds worker 0)."""
    return Due(arrival.iteration, arrival.update,
               arrival.controls[0] if arrival.controls else b"")


class DistributedTransport:
    """:class:`~decobench.training.loop.Transport` of one emulated rank (see the module docstring).

    ``trace_for(d)``: the network for a model of d parameters (built at :meth:`start`);
    ``latency_mechanism``: ``kernel`` (the network adds the latency) or ``comm-layer``
    (:class:`DeliveryDelay` adds ``l·b(t)``); ``start_file``: the leader writes the monotonic time of the common start there (a trace
    player waits for it); ``addresses``: each rank's IP, to name a lost rank.
    """

    time_basis = "measured"

    def __init__(self, rank: int, workers: int, topology: str,
                 trace_for: Callable[[int], Trace], latency_mechanism: str, timeout_s: float,
                 device: torch.device, addresses: tuple[str, ...] = (),
                 start_file: Path | None = None, group: Any = None,
                 checkpoints: RankCheckpointer | None = None,
                 collectives_in_flight: int | None = None,
                 calibrate_to: Path | None = None,
                 shaper_burst: Callable[[float], float] | None = None) -> None:
        self.rank, self.workers, self.topology = rank, workers, topology
        self.trace_for, self.latency_mechanism = trace_for, latency_mechanism
        self.rows = slice(rank, rank + 1)
        self.leader = rank == 0
        self.device = device
        self.timeout_s, self.addresses, self.group = timeout_s, addresses, group
        self.start_file = start_file
        self.collectives_in_flight = (collectives_in_flight if collectives_in_flight
                                      else default_in_flight(latency_mechanism, workers))
        self.calibrate_to = calibrate_to
        # the payload bits a link shaped for goodput a passes at line rate (decobench's own
        # shaper: decobench.netem.tc.burst_payload_bits); None on links it does not shape
        self.shaper_burst = shaper_burst
        self._burst_at: Callable[[float], float] | None = None   # set in start()
        self.clock = RankClock()
        self.comm: Communicator | None = None
        self.sent: dict[int, SentRecord] = {}
        self.unapplied: list[int] = []
        self.report_next: int | None = None      # the transfer our next header reports on
        self.stop_after: int | None = None
        self.stop_requested = False
        self.diverged_here = False
        self.agreed_divergence: int | None = None
        self.bubble_s = 0.0
        self.last_end = 0.0
        self._observed: list[Observation] = []
        # the latest report consumed this iteration: (carrying message, its T̂ sample)
        self._reported_work: tuple[int, float] | None = None
        self._losses: dict[int, float] = {}
        self._start = self._end = 0.0
        self._busy_from: float | None = None   # where the T̂ sample's work began (submit)
        self._waited = 0.0
        self._transfer: Arrival | None = None
        self.checkpoints = checkpoints
        self.checkpoint_after: int | None = None   # agreed: every rank saves after it
        self._checkpoint_asked = False             # the leader's request is on its way
        self._raise_checkpoint = False             # ... and goes with the next message
        self.committed: int | None = None          # every rank holds this checkpoint

    def start(self, d: int, state: dict[str, Any] | None = None) -> None:
        self.trace = self.trace_for(d)
        self._burst_at = self._burst_bits_at(self.shaper_burst, self.trace)
        delay = DeliveryDelay(self.trace, "kernel" if self.latency_mechanism == "kernel"
                              else "comm-layer", self.topology, self.workers)
        groups, probe_group = self._lanes(delay)
        self.comm = Communicator(rank=self.rank, workers=self.workers, d=d, delay=delay,
                                 clock=self.clock.trace_s, timeout_s=self.timeout_s,
                                 device=self.device, addresses=self.addresses,
                                 group=self.group, groups=groups, probe_group=probe_group)
        resumed_at = 0.0
        if state is not None:
            resumed_at = self._restore(state)
        elif self.calibrate_to is not None and self.workers > 1:
            self._calibrate(groups[0] if groups else self.group)
        dist.barrier(group=self.group)
        self.clock.origin = time.monotonic() - resumed_at
        if self.leader and self.start_file is not None:
            write_text_atomic(self.start_file, f"{self.clock.origin!r}\n")
        self.comm.start()

    @staticmethod
    def _burst_bits_at(burst: Callable[[float], float] | None,
                       trace: Trace) -> Callable[[float], float] | None:
        """The shaper's token bucket at trace time t, in payload bits (None: no shaper of
        ours)."""
        if burst is None:
            return None
        return lambda t: burst(trace.bandwidth_at(max(0.0, t)))

    def _calibrate(self, group: Any) -> None:
        """Fit the transport model at the trace's first setting (every rank; the trace
        player holds it until the start file exists) and let the leader write it."""
        from decobench.emulated.calibrate import calibrate, write_model

        rate, latency = self.trace.bandwidth_at(0.0), self.trace.latency_at(0.0)
        model, timings = calibrate(self.workers, self.topology, rate, latency,
                                   self.latency_mechanism != "kernel", group, self.device,
                                   self.timeout_s, lanes=max(1, self.collectives_in_flight))
        if self.leader and self.calibrate_to is not None:
            write_model(self.calibrate_to, model, timings,
                        {"bandwidth_mbps": rate / 1e6, "latency_ms": latency * 1e3,
                         "workers": self.workers, "topology": self.topology,
                         "latency_mechanism": self.latency_mechanism})

    def _lanes(self, delay: DeliveryDelay) -> tuple[list[Any], Any]:
        """The communicator's process groups: none beyond ``group`` for one lane; else one
        per lane, and a probe group under kernel latency (every rank opens them in the same
        order, as ``new_group`` requires)."""
        if self.collectives_in_flight <= 1 or self.workers <= 1:
            return [], None
        backend = dist.get_backend(self.group)
        ranks = None if self.group is None else dist.get_process_group_ranks(self.group)
        groups = [dist.new_group(ranks=ranks, backend=backend)
                  for _ in range(self.collectives_in_flight)]
        probe = (dist.new_group(ranks=ranks, backend=backend)
                 if delay.mechanism == "kernel" else None)
        return groups, probe

    def observations(self, iteration: int) -> list[Observation]:
        self._start = self.clock.train_s()
        if self._busy_from is None:
            self._busy_from = self._start
        observed, self._observed = self._observed, []
        return observed

    def flag_divergence(self, iteration: int) -> None:
        self.diverged_here = True

    def submit(self, iteration: int, sent: Sent, loss: float) -> None:
        assert self.comm is not None, "start() first"
        flags = ((FLAG_STOP if self.stop_requested else 0)
                 | (FLAG_DIVERGED if self.diverged_here else 0)
                 | (FLAG_CHECKPOINT if self._raise_checkpoint else 0))
        self.diverged_here = self._raise_checkpoint = False
        header = {"iteration": float(iteration), "flags": float(flags), "loss": loss}
        # T̂'s sample is the time this rank worked (did not wait) from the end of the last
        # iteration's waiting to here: that iteration's decoding, applying and logging, and
        # this iteration's compute and compression, all of which the time model's T is
        # (measured_compute_s in decobench.emulated.fidelity is its mean). Compute alone read
        # T̂ 29 ms where the iterations worked 44 ms (cnn-fmnist cpu), and DeCo's first plan
        # was δ 0.028 / τ 8 against 0.043 / 6 from the measured T. The freshest iteration,
        # not that of the message the header reports on: the first iteration's holds one-off
        # costs (106-134 ms against 35-50 ms after, measured), which read T̂ three times too
        # large in the first plan (δ 0.15 / τ 3 against 0.045 / 6)
        compute_s = self.clock.train_s() - (self._start if self._busy_from is None
                                            else self._busy_from)
        if self.checkpoints is not None and self.checkpoints.latest is not None:
            header["saved_iteration"] = float(self.checkpoints.latest)
        reported = self.sent.get(self.report_next) if self.report_next is not None else None
        if reported is not None and reported.arrival is not None:
            arrival = reported.arrival
            header.update(obs_iteration=float(self.report_next),
                          obs_compute_s=compute_s, obs_tx_start_s=arrival.tx_start_s,
                          obs_tx_end_s=arrival.tx_end_s, obs_arrive_s=arrival.arrive_s)
        self.comm.submit(encode_message(sent.payload, header, self.rank, self.workers,
                                        sent.control))
        self._end = self.clock.train_s()
        self.sent[iteration] = SentRecord(staleness=sent.staleness, dense=sent.payload.dense,
                                          bits=sent.payload.bits_per_worker)
        self.unapplied.append(iteration)

    def due(self, iteration: int) -> list[Due]:
        assert self.comm is not None, "start() first"
        due = [s for s in self.unapplied if s + self.sent[s].staleness <= iteration]
        self._waited, self._transfer, self.report_next = 0.0, None, None
        self._reported_work = None
        started = self.clock.train_s()
        arrived: list[Due] = []
        for s in due:
            arrival, wait_s = self.comm.wait(s)
            self._waited += wait_s
            self.sent[s].arrival = arrival
            self._transfer = arrival
            self.unapplied.remove(s)
            self.report_next = s
            observation = consensus_observation(arrival.headers, self.sent, self.workers,
                                                self.topology, self._burst_at)
            if observation is not None:
                self._observed.append(observation)
                self._reported_work = (s, observation.compute_s)   # due is in send order
            raised = [int(h["flags"]) for h in arrival.headers]
            if any(f & FLAG_STOP for f in raised):
                self.stop_after = iteration
            if any(f & FLAG_DIVERGED for f in raised):
                self.stop_after = iteration
                self.agreed_divergence = (s + 1 if self.agreed_divergence is None
                                          else min(self.agreed_divergence, s + 1))
            if any(f & FLAG_CHECKPOINT for f in raised):
                self.checkpoint_after = iteration
            self._learn_commit(arrival.headers)
            arrived.append(_as_due(arrival))
            self._learn_loss(s, arrival)
        self.bubble_s += self._waited
        self._busy_from = started + self._waited     # the next T̂ sample counts the rest
        for s in [s for s in self.sent
                  if s < iteration - KEEP_RECORDS and s not in self.unapplied]:
            del self.sent[s]                          # keep the record bounded
        return arrived

    def _learn_commit(self, headers: list[dict[str, float]]) -> None:
        """The newest checkpoint every rank has reported saving; older ones can go."""
        saved = [h.get("saved_iteration", math.nan) for h in headers]
        if self.checkpoints is None or not all(math.isfinite(v) for v in saved):
            return
        committed = int(min(saved))
        if self.committed is None or committed > self.committed:
            self.committed = committed
            self.checkpoints.prune(committed)

    def checkpoint_now(self, iteration: int, due: bool) -> bool:
        if due and self.leader and not self._checkpoint_asked:
            self._checkpoint_asked = self._raise_checkpoint = True
        if self.checkpoint_after != iteration:
            return False
        self.checkpoint_after, self._checkpoint_asked = None, False
        return True

    def state_dict(self) -> dict[str, Any]:
        """What a resumed rank needs (see the module docstring). Waits for the messages in
        flight (the wait is left out of the training clock, like an evaluation)."""
        assert self.comm is not None, "start() first"
        with self.evaluation_pause():
            arrivals = {s: self.comm.peek(s) for s in self.unapplied}
        for s, arrival in arrivals.items():
            self._learn_loss(s, arrival)           # the leader's rows need their loss now
        return {"sent": self.sent, "unapplied": list(self.unapplied), "arrivals": arrivals,
                "report_next": self.report_next, "stop_requested": self.stop_requested,
                "bubble_s": self.bubble_s, "last_end": self.last_end,
                "observed": list(self._observed), "committed": self.committed,
                "latest": None if self.checkpoints is None else self.checkpoints.latest,
                "trace_s": self.clock.trace_s(), "paused_s": self.clock.paused_s}

    def _restore(self, state: dict[str, Any]) -> float:
        """Take back a :meth:`state_dict`; returns the trace time to continue from."""
        assert self.comm is not None
        self.sent, self.unapplied = state["sent"], list(state["unapplied"])
        self.report_next, self.stop_requested = state["report_next"], state["stop_requested"]
        self.bubble_s, self.last_end = state["bubble_s"], state["last_end"]
        self._observed, self.committed = list(state["observed"]), state["committed"]
        if self.checkpoints is not None:
            self.checkpoints.latest = state["latest"]
        self.clock.paused_s = state["paused_s"]
        self.comm.restore(state["arrivals"])
        return float(state["trace_s"])

    def _learn_loss(self, iteration: int, arrival: Arrival) -> None:
        """The mean of the n workers' losses of ``iteration`` (the leader's rows need it)."""
        if self.leader:
            losses = [h["loss"] for h in arrival.headers]
            self._losses[iteration] = float(
                torch.tensor(losses, dtype=torch.float32).mean())

    def losses(self) -> dict[int, float]:
        losses, self._losses = self._losses, {}
        return losses

    def finish(self) -> None:
        """Wait for the messages never applied (every rank sent the same iterations) to learn
        their losses, then let the background thread finish."""
        assert self.comm is not None
        for s in sorted(self.unapplied):
            arrival, _ = self.comm.wait(s)
            self._learn_loss(s, arrival)
        self.unapplied.clear()
        self.comm.close(drain=True)

    def complete(self, iteration: int, sent: Sent, work_s: float) -> IterationTimes:
        transfer, paused = self._transfer, self.clock.paused_s
        extra = {"wait_s": self._waited}
        if transfer is not None:
            extra.update(tx_s=transfer.tx_end_s - transfer.tx_start_s,
                         tx_start_s=transfer.tx_start_s - paused,
                         arrive_s=transfer.arrive_s - paused)
        if self._reported_work is not None:   # the slowest rank's work in iteration s
            s, work_s = self._reported_work       # (row s + 1), as the ranks agree on it
            extra.update(reported_work_s=work_s, reported_work_iteration=s + 1)
        self.last_end = self._end
        now = self.clock.trace_s()
        return IterationTimes(
            sim_time_s=self._end, bubble_s=self.bubble_s, compute_s=self._end - self._start,
            bandwidth_mbps=self.trace.bandwidth_at(now) / 1e6,
            latency_ms=self.trace.latency_at(now) * 1e3, extra=extra)

    def in_flight(self) -> list[Due]:
        assert self.comm is not None, "start() first"
        return [_as_due(self.comm.peek(s)) for s in sorted(self.unapplied)]

    def now_s(self) -> float:
        return self.clock.train_s()

    def model_ready_s(self) -> float:
        return self.clock.train_s()

    @contextlib.contextmanager
    def evaluation_pause(self) -> Iterator[None]:
        paused = time.monotonic()
        try:
            yield
        finally:
            self.clock.paused_s += time.monotonic() - paused

    def request_stop(self) -> None:
        self.stop_requested = True

    def stopping(self, iteration: int) -> bool:
        return self.stop_after == iteration

    def diverged_at(self) -> int | None:
        return self.agreed_divergence

    def totals(self) -> dict[str, float]:
        total = self.last_end
        return {"sim_time_s": total, "bubble_s": self.bubble_s,
                "bubble_fraction": self.bubble_s / total if total > 0 else 0.0}

    def close(self, drain: bool) -> None:
        """Stop the background thread (after its queued collectives when ``drain``)."""
        if self.comm is not None:
            self.comm.close(drain=drain)
