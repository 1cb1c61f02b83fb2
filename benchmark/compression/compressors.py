"""Gradient compressors that report the bits they put on the wire (docs/design.md §2–§3).

A compressor acts on the error-compensated gradients of all n workers at once, as one
``[n, d]`` tensor (row i is worker i's flattened model), and returns a :class:`Compressed`
message batch: what each worker sends, and how many bits that costs per worker,
counted with the same function the time model uses (:mod:`decobench.clock.wire`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from decobench.clock.wire import dense_wire_bits, topk_count, topk_wire_bits


@dataclass(frozen=True)
class WireSize:
    """What a compressor sends at a requested δ, known without the data: bits per worker,
    whether the message is dense, and the kept fraction δ it really sends (k/d)."""

    bits_per_worker: int
    dense: bool
    delta: float


@dataclass(frozen=True)
class Update:
    """An aggregated update u = (1/n) Σ_i Δ^i as it arrives at every worker.

    Dense when ``indices`` is None (``values`` has shape ``[d]``); otherwise the n workers'
    sparse messages concatenated (``indices``/``values`` of shape ``[n·k]``, values already
    divided by n). Duplicate indices are summed when applied.
    """

    values: Tensor
    indices: Tensor | None
    d: int

    def add_to(self, accumulator: Tensor) -> None:
        """``accumulator += self`` for a dense ``[d]`` accumulator (in place)."""
        if self.indices is None:
            accumulator.add_(self.values)
        else:
            accumulator.index_add_(0, self.indices, self.values)


@dataclass(frozen=True)
class Compressed:
    """One iteration's messages from n workers.

    ``values`` is ``[n, k]`` with ``indices`` ``[n, k]`` for sparse messages, or ``[n, d]``
    with ``indices = None`` for dense ones. ``bits_per_worker`` is W, the wire size of one
    worker's message (docs/design.md §3). ``delta`` is the kept fraction k/d actually used.
    ``wire``: how a message whose format is not Top-k's or dense goes on a real wire
    (:class:`WireMessage`; None for Top-k and dense messages, which the emulated backend's
    codec encodes itself).
    """

    values: Tensor
    indices: Tensor | None
    d: int
    bits_per_worker: int
    delta: float
    wire: WireMessage | None = None

    @property
    def dense(self) -> bool:
        return self.indices is None

    @property
    def workers(self) -> int:
        return self.values.shape[0]

    def subtract_from(self, memory: Tensor) -> None:
        """``memory -= Δ`` for an ``[n, d]`` tensor, in place (error-feedback residual)."""
        if self.indices is None:
            memory.sub_(self.values)
        else:
            memory.scatter_add_(1, self.indices, -self.values)

    def mean(self) -> Update:
        """The all-gather / all-reduce result u = (1/n) Σ_i Δ^i."""
        n = self.workers
        if self.indices is None:
            return Update(values=self.values.mean(dim=0), indices=None, d=self.d)
        return Update(values=(self.values / n).reshape(-1), indices=self.indices.reshape(-1), d=self.d)


class WireDecoder(Protocol):
    """Rebuilds any worker's message of one format from its payload bytes and header (the
    same decoder on every rank: it holds only what all workers share, e.g. a seed)."""

    def decode(self, payload: Tensor, header: dict[str, float], d: int) -> tuple[Tensor, Tensor]:
        """``(values [k] fp32, indices [k] int64)`` of the message in ``payload``: the
        sender's ⌈W/8⌉ bytes (uint8, on the CPU), possibly followed by up to 3 bytes of frame
        padding. ``header`` holds every header field
        (:data:`decobench.compression.codec.HEADER_FIELDS`): the sender's ``iteration`` and
        what its :meth:`WireMessage.encode` returned (``k``, ``aux``; NaN if not given)."""
        ...


class WireMessage(Protocol):
    """The rows of one :class:`Compressed` batch in their own wire format. The emulated
    backend sends row 0 of each rank's one-row batch and decodes every rank's bytes with
    ``decoder``; a message without a wire form must be Top-k's or dense."""

    decoder: WireDecoder

    def encode(self, row: int) -> tuple[Tensor, dict[str, float]]:
        """Row ``row``'s payload: a 1-D uint8 tensor on the CPU of exactly ⌈W/8⌉ bytes
        (W = ``bits_per_worker``; any other length stops the run with one line), and the
        header fields its decoder needs: ``k`` (the number of values, required) and
        optionally ``aux`` (one more number of the format's own)."""
        ...


class Compressor(Protocol):
    """C_δ: maps ``[n, d]`` inputs to what each worker sends at compression ratio δ.

    ``iteration`` seeds randomness the workers share without sending it (CocktailSGD's
    sample mask); deterministic compressors ignore it.
    """

    name: str

    def compress(self, p: Tensor, delta: float, iteration: int = 0) -> Compressed: ...

    def size(self, delta: float, d: int) -> WireSize:
        """What :meth:`compress` sends at ``delta`` for d parameters, without the data
        (trajectory reuse, :mod:`decobench.methods.decisions`)."""
        ...


class DenseCompressor:
    """No compression (δ = 1): every worker sends its whole fp32 vector, W = 32 d."""

    name = "dense"

    def size(self, delta: float, d: int) -> WireSize:
        return WireSize(dense_wire_bits(d), True, 1.0)

    def compress(self, p: Tensor, delta: float = 1.0, iteration: int = 0) -> Compressed:
        d = p.shape[1]
        wire = self.size(delta, d)
        return Compressed(values=p.clone(), indices=None, d=d,
                          bits_per_worker=wire.bits_per_worker, delta=wire.delta)


class TopKCompressor:
    """Global Top-k over the flattened model (docs/design.md §2.2): keep the k = max(1, ⌈δ d⌉)
    entries of largest magnitude in each worker's row.

    W(δ) = min(k (32 + ⌈log2 d⌉), 32 k + d, 32 d) bits (§3). With k = d the message is sent
    dense. Ties in magnitude are broken by ``torch.topk`` (deterministic on a given device).
    """

    name = "topk"

    def size(self, delta: float, d: int) -> WireSize:
        k = topk_count(delta, d)
        if k >= d:
            return DenseCompressor().size(1.0, d)
        return WireSize(topk_wire_bits(k, d), False, k / d)

    def compress(self, p: Tensor, delta: float, iteration: int = 0) -> Compressed:
        n, d = p.shape
        wire = self.size(delta, d)
        if wire.dense:
            return DenseCompressor().compress(p)
        k = topk_count(delta, d)
        _, indices = torch.topk(p.abs(), k, dim=1, sorted=False)
        values = torch.gather(p, 1, indices)
        return Compressed(values=values, indices=indices, d=d,
                          bits_per_worker=wire.bits_per_worker, delta=wire.delta)


COMPRESSORS: dict[str, type] = {"dense": DenseCompressor, "topk": TopKCompressor}
