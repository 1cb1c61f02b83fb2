"""Background communication of DD-EF-SGD messages between real worker processes.

Background threads per rank issue the collectives in send order (one link, messages in
order, as in the time model of docs/design.md §4.2), so communication overlaps the next
iterations' computation:

- a sparse message (δ < 1) is a byte frame, header + the method's control bytes + the
  payload of exactly ⌈W/8⌉ bytes (:mod:`decobench.compression.codec`), exchanged by
  ``all_gather``;
- a dense message (δ = 1) is the fp32 vector plus one header slot and one control slot per
  rank, exchanged by a summing ``all_reduce`` (each rank writes only its own slots, so the
  headers and control bytes come back exactly: adding zeros is exact).

**Lanes.** Each process group given in ``groups`` is a lane that carries one collective at a
time; message i goes on lane ``i mod len(groups)``, so up to ``len(groups)`` collectives are
in flight at once. One lane (the default) is one collective at a time, which is the time
model's link when the collective holds no latency (``comm-layer``). Where the network adds
the latency (``kernel``), a collective lasts at least a round trip (gloo's rendezvous: a
send waits for the receiver's ready notice, so a 2-rank all-gather takes about 2b + W/a),
and one lane would serialise those round trips where the time model overlaps the latency
of message j with the transmission of message j + 1; ``τ + 1`` lanes let them overlap, as
they do on a real link (:class:`~decobench.emulated.transport.DistributedTransport` opens
``collectives_in_flight`` lanes).

When a message's collective returns at ``end``, its times are set in send order:
``tx_start = max(issued, tx_end of the previous message)``, and ``tx_end = end`` with the
message delivered no earlier than :class:`~decobench.emulated.delivery.DeliveryDelay` says
(``end + l·b`` when the communication layer adds the latency). The training loop calls
:meth:`Communicator.wait` for a message only when it is due (τ iterations after it was
sent) and blocks only if it has not arrived. A lost peer surfaces as :class:`PeerLost`
naming the rank(s) when the collective's error message names their addresses.

Where the network itself adds the latency (``kernel``: netem, the nfqueue delayer, or real
links under torchrun), a collective's duration holds both the transmission and the
latency, and the time model's split (``tx_end`` = end of transmission, ``arrive = tx_end +
l·b``) has to be measured: before the first message of a kind (alone on the link) and then
every :data:`FIXED_COST_EVERY` messages of that kind, the rank times the same collective on
a one-element tensor (on a probe lane of its own when there are several lanes), whose
duration is the collective's fixed cost (the latency and the collective's own round trips,
with next to no data). The fixed cost in use is the least of the last
:data:`FIXED_COST_WINDOW` timings (a timing taken while messages are in flight can queue
behind their data). A message's ``tx_end`` is then ``max(tx_start, end − fixed cost)``
and its ``arrive`` the collective's real end, so DeCo's estimator reads
``â = hW / (tx_end − tx_start)`` and ``b̂ = (arrive − tx_end) / l`` from the real network
as it does from the simulated clock (without the split it read every link's latency as
bandwidth: 0.45 Mbit/s and b̂ = 0 on a 20 Mbit/s, 100 ms link).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from decobench.compression import codec
from decobench.compression.compressors import Compressed, Update
from decobench.emulated.delivery import DeliveryDelay
from decobench.errors import DecobenchError

FIXED_COST_EVERY: int = 20
"""Messages of one kind between two timings of its empty collective (kernel latency only):
each costs one collective's fixed cost (about one round trip) on the link."""


class PeerLost(RuntimeError):
    """A collective failed because another rank went away (or timed out)."""

    def __init__(self, message: str, lost_ranks: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.lost_ranks = lost_ranks


@dataclass
class Outgoing:
    """One message as this rank sends it; ``buffer`` is the frame (sparse, uint8) or the
    fp32 vector with header slots (dense)."""

    iteration: int
    dense: bool
    k: int
    buffer: Tensor
    decoder: Any = None        # a WireDecoder for messages in their own wire format
    control_bytes: int = 0     # the Sent.control bytes every rank sends (same length on all)


@dataclass
class Arrival:
    """A message after its collective: every rank's header, the mean update over the n
    workers (as :meth:`Compressed.mean` gives it on the simulated backend), and when it
    was transmitted and delivered (seconds on the rank's trace clock); ``controls[r]`` is
    rank r's control bytes (:attr:`decobench.methods.Sent.control`)."""

    iteration: int
    dense: bool
    headers: list[dict[str, float]]
    update: Update
    tx_start_s: float
    tx_end_s: float
    arrive_s: float
    controls: list[bytes] = field(default_factory=list)


def _dense_header_slots(fields: dict[str, float], rank: int, workers: int) -> Tensor:
    """The ``[2·H·n]`` fp32 header region of a dense buffer with this rank's fields in its
    slot as (hi, lo) pairs: ``hi = fp32(x)``, ``lo = fp32(x − hi)``, so ``hi + lo`` gives x
    back to ~48 significant bits after an all-reduce that only adds zeros to it."""
    h = len(codec.HEADER_FIELDS)
    values = torch.tensor([float(fields.get(name, math.nan)) for name in codec.HEADER_FIELDS],
                          dtype=torch.float64)
    hi = values.to(torch.float32)
    lo = (values - hi.to(torch.float64)).to(torch.float32)
    lo = torch.where(torch.isfinite(hi), lo, torch.zeros_like(lo))
    region = torch.zeros(workers, 2, h, dtype=torch.float32)
    region[rank, 0], region[rank, 1] = hi, lo
    return region.reshape(-1)


def _dense_headers(region: Tensor, workers: int) -> list[dict[str, float]]:
    h = len(codec.HEADER_FIELDS)
    pairs = region.to(torch.float64).reshape(workers, 2, h)
    values = pairs[:, 0] + pairs[:, 1]
    return [dict(zip(codec.HEADER_FIELDS, (float(v) for v in row), strict=True))
            for row in values]


def encode_message(compressed: Compressed, header: dict[str, float], rank: int,
                   workers: int, control: bytes = b"") -> Outgoing:
    """This rank's row of ``compressed`` (``[1, ·]``) as the buffer its collective sends,
    with this rank's ``control`` bytes beside the payload (frame: header, control, payload;
    dense: one slot of control bytes per rank after the header slots).

    The payload must be the ⌈W/8⌉ bytes the method charged the time model for; a method whose
    messages the codec does not encode (its ``bits_per_worker`` is not the Top-k or dense
    size) is an error, not a silently different message."""
    iteration = int(header["iteration"])
    header = {**header, "control_bytes": float(len(control))}
    controls = torch.frombuffer(bytearray(control), dtype=torch.uint8) if control else \
        torch.zeros(0, dtype=torch.uint8)
    if compressed.wire is not None:
        payload, fields = compressed.wire.encode(0)
        _require_wire_size(payload.numel(), compressed.bits_per_worker, "its own wire format")
        frame = codec.frame(codec.encode_header({**header, **fields}),
                            torch.cat([controls, payload]))
        return Outgoing(iteration=iteration, dense=False, k=int(fields["k"]),
                        buffer=as_words(frame).to(compressed.values.device),
                        decoder=compressed.wire.decoder, control_bytes=len(control))
    _require_wire_size(4 * compressed.d if compressed.dense
                       else codec.payload_bytes(int(compressed.values.numel()), compressed.d),
                       compressed.bits_per_worker,
                       "the wire codec (Top-k and dense messages)")
    if compressed.dense:
        values = compressed.values.reshape(-1).to(torch.float32)
        slots = torch.zeros(workers, len(control), dtype=torch.float32)
        slots[rank] = controls.to(torch.float32)       # bytes are exact in fp32 sums of zeros
        buffer = torch.cat([values, _dense_header_slots(header, rank, workers).to(values.device),
                            slots.reshape(-1).to(values.device)])
        return Outgoing(iteration=iteration, dense=True, k=compressed.d, buffer=buffer,
                        control_bytes=len(control))
    assert compressed.indices is not None
    values, indices = compressed.values.reshape(-1), compressed.indices.reshape(-1)
    payload = codec.encode_sparse(values.to(torch.float32).cpu(), indices.cpu(), compressed.d)
    frame = codec.frame(codec.encode_header({**header, "k": float(values.numel())}),
                        torch.cat([controls, payload]))
    return Outgoing(iteration=iteration, dense=False, k=int(values.numel()),
                    buffer=as_words(frame).to(compressed.values.device),
                    control_bytes=len(control))


def _require_wire_size(sent_bytes: int, bits: int, encoder: str) -> None:
    """A message must travel as the ⌈W/8⌉ bytes the method charged the time model for."""
    if sent_bytes != -(-bits // 8):
        raise DecobenchError(
            f"this method's messages are {bits} bits but {encoder} would send "
            f"{8 * sent_bytes}: give its messages a wire format (Compressed.wire) that encodes "
            f"exactly ⌈W/8⌉ = {-(-bits // 8)} bytes, or declare MethodSpec(emulation='reason')")


def as_words(frame: Tensor) -> Tensor:
    """The byte frame as fp32 words (zero-padded to a multiple of 4 bytes, ≤ 3 extra).

    Only the bytes travel (all-gather copies, never adds), but gloo moves uint8 tensors
    far slower than fp32 ones: a 905 kB all-gather over a 20 Mbit/s link took 0.53 s as
    uint8 and 0.37 s as fp32 (0.362 s is the link's time)."""
    pad = (-frame.numel()) % 4
    if pad:
        frame = torch.cat([frame, torch.zeros(pad, dtype=torch.uint8)])
    return frame.view(torch.float32)


def from_words(words: Tensor) -> Tensor:
    """The byte frame back from :func:`as_words` (padding included; unframe ignores it)."""
    return words.contiguous().view(torch.uint8)


def mean_update(messages: Sequence[codec.DecodedMessage], d: int, device: torch.device) -> Update:
    """u = (1/n) Σ_i Δ^i from the n decoded messages, in the layout
    :meth:`decobench.compression.compressors.Compressed.mean` gives: concatenated sparse entries in rank
    order with values divided by n, or a dense ``[d]`` vector if any message came dense."""
    n = len(messages)
    if all(m.indices is not None for m in messages):
        values = torch.cat([m.values for m in messages]).to(device) / n
        indices = torch.cat([m.indices for m in messages]).to(device)  # type: ignore[misc]
        return Update(values=values, indices=indices, d=d)
    total = torch.zeros(d, dtype=torch.float32, device=device)
    for m in messages:
        Update(values=m.values.to(device) / n, indices=None if m.indices is None
               else m.indices.to(device), d=d).add_to(total)
    return Update(values=total, indices=None, d=d)


def received(message: Outgoing, gathered: Tensor | list[Tensor], d: int, workers: int,
             device: torch.device) -> tuple[list[dict[str, float]], list[bytes], Update]:
    """Every rank's header and control bytes, and the mean update, from the result of this
    rank's collective: the summed dense buffer (all-reduce), or every rank's frame
    (all-gather), decoded with ``message``'s decoder when the message has its own format."""
    if message.dense:
        assert isinstance(gathered, Tensor)
        slots = d + 2 * len(codec.HEADER_FIELDS) * workers
        headers = _dense_headers(gathered[d:slots].cpu(), workers)
        controls = [bytes(row.to(torch.uint8).tolist()) for row in
                    gathered[slots:].cpu().reshape(workers, message.control_bytes)]
        return headers, controls, Update(values=gathered[:d] / workers, indices=None, d=d)
    headers, controls, decoded = [], [], []
    for frame in gathered:
        header, rest = codec.unframe(from_words(frame.cpu()))
        k, c = int(header["k"]), int(header["control_bytes"])
        headers.append(header)
        controls.append(bytes(rest[:c].tolist()))
        payload = rest[c:]
        if message.decoder is not None:
            values, indices = message.decoder.decode(payload, header, d)
            decoded.append(codec.DecodedMessage(values, indices, d))
        else:
            decoded.append(codec.decode_sparse(payload[: codec.payload_bytes(k, d)], k, d))
    return headers, controls, mean_update(decoded, d, device)


_ADDRESS = re.compile(r"\[?(\d{1,3}(?:\.\d{1,3}){3})\]?")


def lost_ranks_in(message: str, addresses: Sequence[str], own_rank: int) -> tuple[int, ...]:
    """Ranks whose address appears in a collective's error message (other than our own)."""
    seen = set(_ADDRESS.findall(message))
    return tuple(r for r, a in enumerate(addresses) if a in seen and r != own_rank)


FIXED_COST_WINDOW: int = 3
"""The fixed cost in use is the least of the last this-many timings of the empty collective:
with collectives in flight, one timing may have queued behind their data."""


@dataclass
class _Pending:
    """A collective issued on one lane and not yet completed; ``message`` is None for an
    empty collective timing the fixed cost of its kind (``dense``)."""

    work: Any
    issued_s: float
    dense: bool
    message: Outgoing | None = None
    gathered: Tensor | list[Tensor] | None = None


@dataclass
class _Completed:
    """A message's collective as it completed, before the in-order split into transmission
    and fixed cost."""

    message: Outgoing
    issued_s: float
    ended_s: float
    headers: list[dict[str, float]]
    controls: list[bytes]
    update: Update


@dataclass
class Communicator:
    """The per-rank communication threads (see the module docstring).

    ``clock()`` returns seconds on the trace clock (0 = the run's synchronised start);
    ``group``: the process group of the collectives (default: the default group; give the
    thread its own when other code issues collectives meanwhile); ``groups``: one process
    group per collective in flight at once (message i runs on ``groups[i mod len(groups)]``;
    empty: ``[group]``, one collective at a time); ``probe_group``: where the empty
    collectives that time the fixed cost run (default: the first of ``groups``).
    """

    rank: int
    workers: int
    d: int
    delay: DeliveryDelay
    clock: Callable[[], float]
    timeout_s: float
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    addresses: Sequence[str] = ()
    group: Any = None
    groups: Sequence[Any] = ()
    probe_group: Any = None
    _queue: list[Outgoing] = field(default_factory=list, init=False)
    _order: deque[int] = field(default_factory=deque, init=False)
    _completed: dict[int, _Completed] = field(default_factory=dict, init=False)
    _arrived: dict[int, Arrival] = field(default_factory=dict, init=False)
    _error: BaseException | None = field(default=None, init=False)
    _closing: bool = field(default=False, init=False)
    _issuing_done: bool = field(default=False, init=False)
    _cond: threading.Condition = field(default_factory=threading.Condition, init=False)
    _threads: list[threading.Thread] = field(default_factory=list, init=False)
    _lane_groups: list[Any] = field(default_factory=list, init=False)
    _lanes: list[deque[_Pending]] = field(default_factory=list, init=False)
    _probe_lane: int = field(default=0, init=False)
    _issued: int = field(default=0, init=False)
    _timings: dict[bool, deque[float]] = field(default_factory=dict, init=False)
    _since_probe: dict[bool, int] = field(default_factory=dict, init=False)
    _last_tx_end: float = field(default=0.0, init=False)
    _local: threading.local = field(default_factory=threading.local, init=False)

    @property
    def in_flight(self) -> int:
        """How many message collectives may be in flight at once (one per lane)."""
        return max(1, len(self.groups))

    @property
    def kernel(self) -> bool:
        """The network adds the latency, so collectives are split (module docstring)."""
        return self.delay.mechanism == "kernel" and self.workers > 1

    def start(self) -> None:
        self._lane_groups = list(self.groups) or [self.group]
        self._probe_lane = 0
        if self.probe_group is not None:
            self._lane_groups.append(self.probe_group)
            self._probe_lane = len(self._lane_groups) - 1
        self._lanes = [deque() for _ in self._lane_groups]
        self._threads = [threading.Thread(target=self._issue_loop, daemon=True,
                                          name=f"comm-rank{self.rank}")]
        self._threads += [threading.Thread(target=self._lane_loop, args=(lane,), daemon=True,
                                           name=f"comm-rank{self.rank}-lane{lane}")
                          for lane in range(len(self._lanes))]
        for thread in self._threads:
            thread.start()

    def restore(self, arrivals: dict[int, Arrival]) -> None:
        """Messages a checkpoint held (arrived before it was taken), to :meth:`wait` for
        again after a resume; call before :meth:`start`."""
        with self._cond:
            self._arrived.update(arrivals)
            if arrivals:
                self._last_tx_end = max(a.tx_end_s for a in arrivals.values())

    def submit(self, message: Outgoing) -> None:
        """Queue a message; returns at once (the collective runs in the background)."""
        with self._cond:
            self._raise_if_failed()
            self._queue.append(message)
            self._cond.notify_all()

    def wait(self, iteration: int) -> tuple[Arrival, float]:
        """Block until the message of ``iteration`` is delivered; returns it and the
        seconds this call waited (the bubble)."""
        started = time.monotonic()
        with self._cond:
            self._await_locked(iteration, started)
            arrival = self._arrived.pop(iteration)
        remaining = arrival.arrive_s - self.clock()
        if remaining > 0:
            time.sleep(remaining)
        return arrival, time.monotonic() - started

    def peek(self, iteration: int) -> Arrival:
        """The message of ``iteration`` once its collective has completed, left in place
        for :meth:`wait` (e.g. to average models at an evaluation)."""
        with self._cond:
            self._await_locked(iteration, time.monotonic())
            return self._arrived[iteration]

    def _await_locked(self, iteration: int, started: float) -> None:
        """Wait (holding the lock) until the collective of ``iteration`` has completed."""
        while iteration not in self._arrived:
            self._raise_if_failed()
            if time.monotonic() - started > self.timeout_s:
                raise PeerLost(f"rank {self.rank}: the message of iteration {iteration} "
                               f"did not arrive within {self.timeout_s:.0f} s; a peer is "
                               "hung or the link is far slower than the trace")
            self._cond.wait(0.25)

    def close(self, drain: bool = True) -> None:
        """Finish the queued collectives (``drain``) and stop the threads."""
        with self._cond:
            self._closing = True
            if not drain:
                self._queue.clear()
            self._cond.notify_all()
        deadline = time.monotonic() + (self.timeout_s if drain else 1.0)
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        with self._cond:
            self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _fail(self, exc: BaseException, iteration: int) -> None:
        with self._cond:
            if self._error is None:
                self._error = self._as_peer_lost(exc, iteration)
            self._cond.notify_all()

    # ------------------------------------------------------------------ issuing
    def _issue_loop(self) -> None:
        """Issue every queued message's collective in send order, each on its lane, and
        (kernel latency) :data:`FIXED_COST_WINDOW` empty collectives of its kind, one after
        another with nothing else in flight, before the first message of a kind (one timing
        held up by a late packet, e.g. the NFQUEUE delayer's release lag, would make the first
        plan read the link's latency as faster transmission) and then one every
        :data:`FIXED_COST_EVERY` messages of it. Every rank issues the same
        collectives on the same groups in the same order, so they match."""
        while True:
            with self._cond:
                while not self._queue and not self._closing and self._error is None:
                    self._cond.wait()
                if self._error is not None or not self._queue:
                    self._issuing_done = True
                    self._cond.notify_all()
                    return
                message = self._queue.pop(0)
                self._order.append(message.iteration)
            try:
                if self.kernel:
                    count = self._since_probe.get(message.dense, FIXED_COST_EVERY)
                    if message.dense not in self._timings:
                        for _ in range(FIXED_COST_WINDOW):   # the first plan reads these
                            self._issue_empty(message.dense, alone=True)
                        count = 0
                    elif count >= FIXED_COST_EVERY:
                        self._issue_empty(message.dense, alone=False)
                        count = 0
                    self._since_probe[message.dense] = count + 1
                self._issue_message(message)
            except BaseException as exc:  # noqa: BLE001 - handed to the training thread
                self._fail(exc, message.iteration)
                with self._cond:
                    self._issuing_done = True
                    self._cond.notify_all()
                return

    def _wait_for_lane(self, lane: int) -> None:
        """Block until ``lane`` has nothing in flight: at most one collective per lane, so
        one lane is one collective at a time, as before lanes existed."""
        with self._cond:
            while self._lanes[lane] and self._error is None:
                self._cond.wait()
            self._raise_if_failed()

    def _issue_empty(self, dense: bool, alone: bool) -> None:
        """Issue the empty collective of this kind on the probe lane; ``alone``: with no
        other collective in flight, and wait for it (the first timing of a kind, which the
        first plan reads, must not queue behind data)."""
        for lane in (range(len(self._lanes)) if alone else (self._probe_lane,)):
            self._wait_for_lane(lane)
        one = torch.zeros(1, device=self.device)
        group = self._lane_groups[self._probe_lane]
        issued = self.clock()
        if dense:
            work = dist.all_reduce(one, op=dist.ReduceOp.SUM, group=group, async_op=True)
        else:
            work = dist.all_gather([torch.empty_like(one) for _ in range(self.workers)], one,
                                   group=group, async_op=True)
        self._enqueue(self._probe_lane, _Pending(work=work, issued_s=issued, dense=dense))
        if alone:
            self._wait_for_lane(self._probe_lane)

    def _issue_message(self, message: Outgoing) -> None:
        lane = self._issued % self.in_flight
        self._issued += 1
        self._wait_for_lane(lane)
        group = self._lane_groups[lane]
        issued = self.clock()
        if message.dense:
            work = dist.all_reduce(message.buffer, op=dist.ReduceOp.SUM, group=group,
                                   async_op=True)
            gathered: Tensor | list[Tensor] = message.buffer
        else:
            gathered = [torch.empty_like(message.buffer) for _ in range(self.workers)]
            work = dist.all_gather(gathered, message.buffer, group=group, async_op=True)
        self._enqueue(lane, _Pending(work=work, issued_s=issued, dense=message.dense,
                                     message=message, gathered=gathered))

    def _enqueue(self, lane: int, pending: _Pending) -> None:
        with self._cond:
            self._lanes[lane].append(pending)
            self._cond.notify_all()

    # --------------------------------------------------------------- completing
    def _lane_loop(self, lane: int) -> None:
        """Complete one lane's collectives in the order they were issued."""
        queue = self._lanes[lane]
        while True:
            with self._cond:
                while not queue and not self._issuing_done and self._error is None:
                    self._cond.wait()
                if self._error is not None or not queue:
                    return
                pending = queue[0]
            iteration = pending.message.iteration if pending.message is not None else -1
            try:
                self._complete(pending.work)
                ended = self.clock()
                completed = None
                if pending.message is not None:
                    assert pending.gathered is not None
                    headers, controls, update = received(pending.message, pending.gathered,
                                                         self.d, self.workers, self.device)
                    completed = _Completed(pending.message, pending.issued_s, ended, headers,
                                           controls, update)
            except BaseException as exc:  # noqa: BLE001 - handed to the training thread
                self._fail(exc, iteration)
                return
            with self._cond:
                queue.popleft()
                if completed is None:
                    timings = self._timings.setdefault(pending.dense,
                                                       deque(maxlen=FIXED_COST_WINDOW))
                    timings.append(ended - pending.issued_s)
                else:
                    self._completed[iteration] = completed
                self._deliver_locked()
                self._cond.notify_all()

    def _complete(self, work: Any) -> None:
        """Wait for one collective; on CUDA, on a side stream of this thread, so the time is
        this collective's, not the device's other work."""
        timeout = timedelta(seconds=self.timeout_s)
        if self.device.type != "cuda":
            work.wait(timeout=timeout)
            return
        stream = getattr(self._local, "stream", None)
        if stream is None:
            stream = self._local.stream = torch.cuda.Stream(self.device)
        with torch.cuda.stream(stream):
            work.wait(timeout=timeout)
        stream.synchronize()

    def _deliver_locked(self) -> None:
        """Turn completed collectives into arrivals, in send order (module docstring):
        ``tx_start = max(issued, previous tx_end)`` (one link, messages in order); under
        kernel latency ``tx_end = max(tx_start, end − fixed cost)`` and ``arrive = end``;
        otherwise ``tx_end = end`` and ``arrive`` from :class:`DeliveryDelay`."""
        while self._order and self._order[0] in self._completed:
            iteration = self._order[0]
            done = self._completed[iteration]
            dense = done.message.dense
            if self.kernel and not self._timings.get(dense):
                return                      # its kind's first timing is still in flight
            self._order.popleft()
            del self._completed[iteration]
            tx_start = max(done.issued_s, self._last_tx_end)
            if self.kernel:
                tx_end = max(tx_start, done.ended_s - min(self._timings[dense]))
                arrive = done.ended_s
            else:
                tx_end = max(tx_start, done.ended_s)
                arrive = self.delay.arrival_s(done.ended_s, dense)
            self._last_tx_end = tx_end
            self._arrived[iteration] = Arrival(
                iteration=iteration, dense=dense, headers=done.headers, update=done.update,
                tx_start_s=tx_start, tx_end_s=tx_end, arrive_s=arrive, controls=done.controls)

    def _as_peer_lost(self, exc: BaseException, iteration: int) -> BaseException:
        if isinstance(exc, DecobenchError):        # the bytes arrived but do not decode
            return DecobenchError(f"rank {self.rank}: the messages of iteration {iteration} "
                                  f"arrived but do not decode: {exc}")
        text = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        lost = lost_ranks_in(str(exc), self.addresses, self.rank)
        who = (f"lost rank {', '.join(map(str, lost))}" if lost
               else "lost a peer rank (address not named by the transport)")
        during = (f"the collective of iteration {iteration}" if iteration >= 0
                  else "an empty collective timing the link's fixed cost")
        return PeerLost(f"rank {self.rank}: {who} during {during}: {text}", lost)

    def fixed_cost_s(self, dense: bool) -> float | None:
        """The fixed cost in use for this kind (the least of the last
        :data:`FIXED_COST_WINDOW` timings of its empty collective; kernel latency only;
        None before the first)."""
        with self._cond:
            timings = self._timings.get(dense)
            return min(timings) if timings else None
