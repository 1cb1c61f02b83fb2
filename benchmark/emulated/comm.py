"""Background communication of DD-EF-SGD messages between real worker processes.

One thread per rank issues the collectives in send order (one link, FIFO, as in the time
model of deco-sgd.md §4), so communication overlaps the next iterations' computation:

- a sparse message (δ < 1) is a byte frame, header + the method's control bytes + the
  payload of exactly ⌈W/8⌉ bytes (:mod:`decobench.emulated.codec`), exchanged by
  ``all_gather``;
- a dense message (δ = 1) is the fp32 vector plus one header slot and one control slot per
  rank, exchanged by a summing ``all_reduce`` (each rank writes only its own slots, so the
  headers and control bytes come back exactly: adding zeros is exact).

When a collective returns at ``tx_end`` the message is delivered no earlier than
:class:`~decobench.emulated.delivery.DeliveryDelay` says (``tx_end + l·b`` when the
communication layer adds the latency). The training loop calls :meth:`Communicator.wait`
for a message only when it is due (τ iterations after it was sent) and blocks only if it
has not arrived. A lost peer surfaces as :class:`PeerLost` naming the rank(s) when the
collective's error message names their addresses.

Where the network itself adds the latency (``kernel``: netem, the nfqueue delayer, or real
links under torchrun), a collective's duration holds both the transmission and the
latency, and the time model's split (``tx_end`` = end of transmission, ``arrive = tx_end +
l·b``) has to be measured: every :data:`FIXED_COST_EVERY` messages of a kind (and before
the first), the thread times the same collective on a one-element tensor, whose duration
is the collective's fixed cost (the latency and the collective's own round trips, with
next to no data). A message's ``tx_end`` is then its collective's end minus that fixed
cost, and its ``arrive`` the collective's real end, so DeCo's estimator reads
``â = hW / (tx_end − tx_start)`` and ``b̂ = (arrive − tx_end) / l`` from the real network
as it does from the simulated clock (without the split it read every link's latency as
bandwidth: 0.45 Mbit/s and b̂ = 0 on a 20 Mbit/s, 100 ms link).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from decobench.compressors import Compressed, Update
from decobench.emulated import codec
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
            f"{8 * sent_bytes}: give its messages a wire format (Compressed.wire) or declare "
            "MethodSpec(emulation='reason')")


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
    :meth:`decobench.compressors.Compressed.mean` gives: concatenated sparse entries in rank
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


@dataclass
class Communicator:
    """The per-rank communication thread (see the module docstring).

    ``clock()`` returns seconds on the trace clock (0 = the run's synchronised start);
    ``group``: the process group of the collectives (default: the default group; give the
    thread its own when other code issues collectives meanwhile).
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
    _queue: list[Outgoing] = field(default_factory=list, init=False)
    _arrived: dict[int, Arrival] = field(default_factory=dict, init=False)
    _error: BaseException | None = field(default=None, init=False)
    _closing: bool = field(default=False, init=False)
    _cond: threading.Condition = field(default_factory=threading.Condition, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _fixed_cost: dict[bool, float] = field(default_factory=dict, init=False)
    _since_probe: dict[bool, int] = field(default_factory=dict, init=False)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"comm-rank{self.rank}",
                                        daemon=True)
        self._thread.start()

    def restore(self, arrivals: dict[int, Arrival]) -> None:
        """Messages a checkpoint held (arrived before it was taken), to :meth:`wait` for
        again after a resume; call before :meth:`start`."""
        with self._cond:
            self._arrived.update(arrivals)

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
        """Finish the queued collectives (``drain``) and stop the thread."""
        with self._cond:
            self._closing = True
            if not drain:
                self._queue.clear()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s if drain else 1.0)
        with self._cond:
            self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                message = self._queue.pop(0)
            try:
                arrival = self._exchange(message)
            except BaseException as exc:  # noqa: BLE001 - handed to the training thread
                with self._cond:
                    self._error = self._as_peer_lost(exc, message.iteration)
                    self._cond.notify_all()
                return
            with self._cond:
                self._arrived[message.iteration] = arrival
                self._cond.notify_all()

    def _as_peer_lost(self, exc: BaseException, iteration: int) -> BaseException:
        if isinstance(exc, DecobenchError):        # the bytes arrived but do not decode
            return DecobenchError(f"rank {self.rank}: the messages of iteration {iteration} "
                                  f"arrived but do not decode: {exc}")
        text = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        lost = lost_ranks_in(str(exc), self.addresses, self.rank)
        who = (f"lost rank {', '.join(map(str, lost))}" if lost
               else "lost a peer rank (address not named by the transport)")
        return PeerLost(f"rank {self.rank}: {who} during the collective of iteration "
                        f"{iteration}: {text}", lost)

    def _synchronise(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def fixed_cost_s(self, dense: bool) -> float | None:
        """The last measured duration of an empty collective of this kind (kernel latency
        only; None before the first)."""
        return self._fixed_cost.get(dense)

    def _time_empty_collective(self, dense: bool) -> float:
        """Seconds one collective of this kind takes on a one-element tensor (every rank
        runs it at the same message, so the collectives match)."""
        one = torch.zeros(1, device=self.device)
        started = time.monotonic()
        if dense:
            work = dist.all_reduce(one, op=dist.ReduceOp.SUM, group=self.group, async_op=True)
        else:
            work = dist.all_gather([torch.empty_like(one) for _ in range(self.workers)], one,
                                   group=self.group, async_op=True)
        work.wait(timeout=timedelta(seconds=self.timeout_s))
        self._synchronise()
        return time.monotonic() - started

    def _exchange(self, message: Outgoing) -> Arrival:
        kernel = self.delay.mechanism == "kernel" and self.workers > 1
        if kernel:
            count = self._since_probe.get(message.dense, FIXED_COST_EVERY)
            if count >= FIXED_COST_EVERY:
                self._fixed_cost[message.dense] = self._time_empty_collective(message.dense)
                count = 0
            self._since_probe[message.dense] = count + 1
        tx_start = self.clock()
        if message.dense:
            work = dist.all_reduce(message.buffer, op=dist.ReduceOp.SUM, group=self.group,
                                   async_op=True)
            gathered: Tensor | list[Tensor] = message.buffer
        else:
            gathered = [torch.empty_like(message.buffer) for _ in range(self.workers)]
            work = dist.all_gather(gathered, message.buffer, group=self.group, async_op=True)
        work.wait(timeout=timedelta(seconds=self.timeout_s))
        self._synchronise()
        tx_end = self.clock()
        headers, controls, update = received(message, gathered, self.d, self.workers,
                                             self.device)
        arrive = self.delay.arrival_s(tx_end, message.dense)
        if kernel:  # split the collective into transmission and fixed cost (module doc)
            tx_end = max(tx_start, tx_end - self._fixed_cost[message.dense])
        return Arrival(iteration=message.iteration, dense=message.dense, headers=headers,
                       update=update, tx_start_s=tx_start, tx_end_s=tx_end,
                       arrive_s=arrive, controls=controls)
