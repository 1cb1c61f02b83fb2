"""Byte encoding of one worker's one-iteration message for the emulated network.

The emulated network carries exactly the bits the simulated time model charges: the payload
of a Top-k message with ``k`` of ``d`` coordinates kept is ``payload_bytes(k, d) =
ceil(W(k) / 8)`` bytes, where (docs/design.md §3, :func:`decobench.clock.wire.topk_wire_bits`)

    W(k) = min(k (32 + L), 32 k + d, 32 d),        L = index_bits(d) = max(1, ceil(log2 d)).

The encoder writes whichever of the three formats attains the minimum:

``packed`` (``k (32 + L)`` bits, ``4 k + ceil(k L / 8)`` bytes)
    bytes ``[0, 4k)``: the k fp32 values, little-endian, in the order given;
    bytes ``[4k, ...)``: the k indices, each an unsigned L-bit field, in the same order, as an
    LSB-first bitstream: bit ``b`` of index ``i`` is stream bit ``s = i L + b``, stored in
    byte ``s // 8`` at bit ``s % 8`` (bit 0 = least significant). The last byte is padded
    with zero bits.

``mask`` (``32 k + d`` bits, ``ceil(d / 8) + 4 k`` bytes)
    bytes ``[0, ceil(d/8))``: a d-bit bitmap of the kept positions, LSB-first (position
    ``j`` is bit ``j % 8`` of byte ``j // 8``), padded with zero bits;
    then the k fp32 values, little-endian, in increasing index order.

``dense`` (``32 d`` bits, ``4 d`` bytes)
    the d fp32 values, little-endian, with +0.0 at positions not kept.

Format choice (deterministic): the first of ``packed``, ``mask``, ``dense`` whose bit count
equals ``W(k)``, i.e. ties go to ``packed`` over ``mask`` over ``dense``
(:func:`sparse_format`). The decoder applies the same rule to ``(k, d)``, so the format is
never sent. ``k = 0`` is the empty message (0 bytes); ``k = d`` is always ``dense``.

fp32 values round-trip bit-exactly (-0.0 and NaN payloads included): they are moved as
their int32 bit patterns, never through arithmetic.

What decoding gives back (:class:`DecodedMessage`): for ``packed``, the k values and indices
in the order they were encoded; for ``mask``, the k values with their indices sorted
ascending; for ``dense``, ``indices=None`` and the d-long dense vector. In every case
``decoded.add_to(acc)`` adds the same dense contribution as
``Update(values, indices, d).add_to(acc)`` of the original message (a kept value that is
exactly 0.0 is indistinguishable from "not kept" in ``dense``, which adds the same thing;
the one caveat is IEEE signed zero: a dense add turns an accumulator entry of -0.0 at a
non-kept position into +0.0, where a sparse add leaves it alone).

Indices must be unique (Top-k never repeats one); they may arrive in any order
(``torch.topk(sorted=False)``). ``mask``/``dense`` encoding rejects repeats; ``packed``
carries them through unchanged.

A per-layer Top-k message (Accordion: layer l keeps ``k_l`` of its ``d_l`` coordinates) is
``W = Σ_l W(k_l, d_l)`` bits, ``ceil(W / 8)`` bytes (:func:`encode_layerwise`): every
layer's values first (each layer in the format above for its own ``(k_l, d_l)``), then one
bitstream of the packed layers' indices and the mask layers' masks.

A frame is a fixed-size header (:data:`HEADER_FIELDS`, one little-endian float64 each,
:data:`HEADER_BYTES` bytes), then the sender's ``control_bytes`` control bytes (a method's
decision that travels with its message, :attr:`decobench.methods.Sent.control`; not
charged as message bits, like the header), then the payload. Everything is vectorised torch on the
CPU: no Python loop runs over elements.
"""

from __future__ import annotations

import math
import struct
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from decobench.clock.wire import VALUE_BITS, index_bits, topk_wire_bits
from decobench.compression.compressors import Update
from decobench.errors import DecobenchError

__all__ = [
    "FORMAT_DENSE",
    "FORMAT_MASK",
    "FORMAT_PACKED",
    "HEADER_BYTES",
    "HEADER_FIELDS",
    "DecodedMessage",
    "LayerSlice",
    "decode_layerwise",
    "encode_layerwise",
    "layerwise_bits",
    "layerwise_payload_bytes",
    "decode_dense",
    "decode_header",
    "decode_sparse",
    "encode_dense",
    "encode_header",
    "encode_sparse",
    "format_bits",
    "pack_segments",
    "unpack_segments",
    "frame",
    "pack_bits",
    "payload_bytes",
    "sparse_format",
    "unframe",
    "unpack_bits",
]

FORMAT_PACKED = "packed"
FORMAT_MASK = "mask"
FORMAT_DENSE = "dense"
_FORMAT_ORDER = (FORMAT_PACKED, FORMAT_MASK, FORMAT_DENSE)
"""Tie-breaking order of :func:`sparse_format`: the first format attaining the minimum wins."""

_VALUE_BYTES = VALUE_BITS // 8
_LITTLE = sys.byteorder == "little"


# --------------------------------------------------------------------------- sizes and format


def format_bits(k: int, d: int) -> dict[str, int]:
    """Bits of each candidate format for ``k`` of ``d`` kept (§3):
    ``packed = k (32 + L)``, ``mask = 32 k + d``, ``dense = 32 d``."""
    topk_wire_bits(k, d)  # validates k and d with the project's messages
    return {
        FORMAT_PACKED: k * (VALUE_BITS + index_bits(d)),
        FORMAT_MASK: VALUE_BITS * k + d,
        FORMAT_DENSE: VALUE_BITS * d,
    }


def sparse_format(k: int, d: int) -> str:
    """The format :func:`encode_sparse` writes: the first of ``packed``, ``mask``, ``dense``
    whose bit count equals ``W(k) = min(k (32 + L), 32 k + d, 32 d)``."""
    bits = format_bits(k, d)
    w = topk_wire_bits(k, d)
    for name in _FORMAT_ORDER:
        if bits[name] == w:
            return name
    raise AssertionError("unreachable: W(k) is the minimum of the three formats")  # pragma: no cover


def payload_bytes(k: int, d: int) -> int:
    """Payload size in bytes: ``ceil(W(k) / 8)`` with ``W`` from :func:`decobench.clock.wire.topk_wire_bits`
    (a dense message, ``k = d``, is ``4 d``)."""
    return (topk_wire_bits(k, d) + 7) // 8


# --------------------------------------------------------------------------- fp32 <-> bytes


def _f32_to_bytes(values: Tensor) -> Tensor:
    """fp32 ``[n]`` -> little-endian uint8 ``[4 n]`` (bit patterns, no arithmetic)."""
    raw = values.contiguous().view(torch.uint8)
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        raw = raw.view(-1, _VALUE_BYTES).flip(1).reshape(-1)
    return raw


def _bytes_to_f32(raw: Tensor) -> Tensor:
    """Little-endian uint8 ``[4 n]`` -> fp32 ``[n]`` (a fresh, aligned tensor)."""
    raw = raw.clone()  # own, aligned storage: a dtype view needs offset 0 modulo 4
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        raw = raw.view(-1, _VALUE_BYTES).flip(1).reshape(-1).contiguous()
    return raw.view(torch.float32)


# --------------------------------------------------------------------------- bit packing


def _overlaps(width: int):
    """For the 8 fields of one group (8 fields of ``width`` bits fill exactly ``width`` bytes),
    the (field j, byte m, shift) triples where field j's bits meet byte m; ``shift`` is
    ``j·width - 8 m``, the left shift taking field j's bit 0 to its place in byte m."""
    triples = []
    for j in range(8):
        start = j * width
        for m in range(start // 8, (start + width - 1) // 8 + 1):
            triples.append((j, m, start - 8 * m))
    return triples


def _shift(x: Tensor, s: int) -> Tensor:
    return x << s if s >= 0 else x >> -s


def pack_bits(fields: Tensor, width: int) -> Tensor:
    """Pack non-negative integers ``fields`` ``[n]`` (each < 2**width, width in [1, 56]) as
    an LSB-first bitstream of ``ceil(n·width / 8)`` bytes (layout in the module docstring).

    Vectorised: 8 consecutive fields fill exactly ``width`` bytes, so the stream is an
    ``[n/8, width]`` byte matrix whose every column is an OR of shifted field columns (at most
    ``8 + width`` column operations, each over n/8 elements)."""
    if not 1 <= width <= 56:
        raise DecobenchError(f"bit width must be in [1, 56], got {width}")
    n = fields.numel()
    nbytes = (n * width + 7) // 8
    if n == 0:
        return torch.zeros(0, dtype=torch.uint8)
    groups = (n + 7) // 8
    x = torch.zeros(groups * 8, dtype=torch.int64)
    x[:n] = fields.reshape(-1)
    cols = x.view(groups, 8).t().contiguous()  # [8, groups]: field j of every group
    out = torch.zeros(width, groups, dtype=torch.int64)
    for j, m, s in _overlaps(width):
        out[m] |= _shift(cols[j], s) & 0xFF
    return out.t().reshape(-1)[:nbytes].to(torch.uint8)


def unpack_bits(stream: Tensor, n: int, width: int) -> Tensor:
    """Inverse of :func:`pack_bits`: the first ``n`` ``width``-bit fields of an LSB-first
    bitstream (uint8, at least ``ceil(n·width / 8)`` bytes), as int64 ``[n]``."""
    if not 1 <= width <= 56:
        raise DecobenchError(f"bit width must be in [1, 56], got {width}")
    nbytes = (n * width + 7) // 8
    if stream.numel() < nbytes:
        raise DecobenchError(f"bitstream of {stream.numel()} bytes is shorter than the "
                             f"{nbytes} bytes of {n} fields of {width} bits")
    if n == 0:
        return torch.zeros(0, dtype=torch.int64)
    groups = (n + 7) // 8
    b = torch.zeros(groups * width, dtype=torch.int64)
    b[:nbytes] = stream[:nbytes]
    rows = b.view(groups, width).t().contiguous()  # [width, groups]: byte m of every group
    cols = torch.zeros(8, groups, dtype=torch.int64)
    for j, m, s in _overlaps(width):
        cols[j] |= _shift(rows[m], -s)
    cols &= (1 << width) - 1
    return cols.t().reshape(-1)[:n].clone()


def pack_segments(segments: Sequence[tuple[Tensor, int]]) -> Tensor:
    """Fields of several widths, ``[(fields, width), ...]`` (each field < 2**width, width
    in [1, 63]), as one LSB-first bitstream of ``ceil(Σ count·width / 8)`` bytes: segments
    follow each other bit by bit, no padding; bit ``b`` of a field at stream bit ``s`` is
    stream bit ``s + b``. One byte per stream bit is held while packing (column operations,
    no loop over elements)."""
    parts = []
    for fields, width in segments:
        if not 1 <= width <= 63:
            raise DecobenchError(f"bit width must be in [1, 63], got {width}")
        flat = fields.reshape(-1).to(torch.int64).cpu()
        bits = torch.empty(flat.numel(), width, dtype=torch.uint8)
        for b in range(width):
            bits[:, b] = (flat >> b) & 1
        parts.append(bits.reshape(-1))
    return _pack_mask(torch.cat(parts) if parts else torch.zeros(0, dtype=torch.uint8))


def unpack_segments(stream: Tensor, layout: Sequence[tuple[int, int]]) -> list[Tensor]:
    """Inverse of :func:`pack_segments` for ``[(count, width), ...]``: int64 fields each."""
    total = sum(count * width for count, width in layout)
    if stream.numel() * 8 < total:
        raise DecobenchError(f"payload of {stream.numel()} bytes is shorter than the "
                             f"{(total + 7) // 8} bytes its header announces")
    bits = _unpack_mask(_as_uint8(stream), stream.numel() * 8)
    out, position = [], 0
    for count, width in layout:
        segment = bits[position: position + count * width].view(count, width)
        fields = torch.zeros(count, dtype=torch.int64)
        for b in range(width):
            fields |= segment[:, b].to(torch.int64) << b
        out.append(fields)
        position += count * width
    return out


def _pack_mask(mask: Tensor) -> Tensor:
    """bool ``[d]`` -> LSB-first bitmap of ``ceil(d/8)`` bytes (uint8 throughout, O(d) bytes)."""
    d = mask.numel()
    nbytes = (d + 7) // 8
    m = torch.zeros(nbytes * 8, dtype=torch.uint8)
    m[:d] = mask
    m = m.view(nbytes, 8)
    out = m[:, 0].clone()
    for j in range(1, 8):
        out |= m[:, j] << j
    return out


def _unpack_mask(bitmap: Tensor, d: int) -> Tensor:
    """LSB-first bitmap -> bool ``[d]``."""
    nbytes = (d + 7) // 8
    bits = torch.empty(nbytes, 8, dtype=torch.uint8)
    for j in range(8):
        bits[:, j] = (bitmap[:nbytes] >> j) & 1
    return bits.view(-1)[:d].bool()


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True)
class DecodedMessage:
    """A decoded message: ``k`` values at ``indices`` (int64), or, with ``indices`` None, the
    dense ``[d]`` vector (the ``dense`` format). Same convention as
    :class:`decobench.compression.compressors.Update`."""

    values: Tensor
    indices: Tensor | None
    d: int

    @property
    def dense(self) -> bool:
        return self.indices is None

    def to_update(self) -> Update:
        return Update(values=self.values, indices=self.indices, d=self.d)

    def add_to(self, accumulator: Tensor) -> None:
        """``accumulator += message`` for a dense ``[d]`` accumulator (in place)."""
        self.to_update().add_to(accumulator)

    def to_dense(self) -> Tensor:
        """The message as a dense fp32 ``[d]`` vector (+0.0 where nothing is kept)."""
        if self.indices is None:
            return self.values.clone()
        out = torch.zeros(self.d, dtype=self.values.dtype)
        out.index_put_((self.indices,), self.values)
        return out


def _check_sparse_inputs(values: Tensor, indices: Tensor, d: int) -> tuple[Tensor, Tensor, int]:
    if values.dim() != 1 or indices.dim() != 1 or values.numel() != indices.numel():
        raise DecobenchError(
            f"values and indices must be 1-D of the same length, got shapes "
            f"{tuple(values.shape)} and {tuple(indices.shape)}")
    if values.dtype != torch.float32:
        raise DecobenchError(f"values must be float32, got {values.dtype}")
    if indices.dtype not in (torch.int64, torch.int32):
        raise DecobenchError(f"indices must be int64 (or int32), got {indices.dtype}")
    k = values.numel()
    topk_wire_bits(k, d)  # k in [0, d], d >= 1
    values = values.detach().cpu()
    indices = indices.detach().cpu().to(torch.int64)
    if k and (int(indices.min()) < 0 or int(indices.max()) >= d):
        raise DecobenchError(f"indices must lie in [0, d={d})")
    return values, indices, k


def _kept_mask(indices: Tensor, d: int) -> Tensor:
    mask = torch.zeros(d, dtype=torch.bool)
    mask[indices] = True
    if int(mask.sum()) != indices.numel():
        raise DecobenchError("indices must be unique (a Top-k message never repeats one)")
    return mask


def encode_sparse(values: Tensor, indices: Tensor, d: int) -> Tensor:
    """Encode a Top-k message (``k`` fp32 values at unique int64 ``indices`` of a
    ``d``-vector, any order) as uint8 ``[payload_bytes(k, d)]`` = ``ceil(W(k)/8)`` bytes,
    ``W(k) = min(k (32 + ⌈log2 d⌉), 32 k + d, 32 d)`` (docs/design.md §3), in the format
    :func:`sparse_format` picks (layouts in the module docstring)."""
    values, indices, k = _check_sparse_inputs(values, indices, d)
    fmt = sparse_format(k, d)
    if fmt == FORMAT_PACKED:
        out = torch.cat([_f32_to_bytes(values), pack_bits(indices, index_bits(d))])
    elif fmt == FORMAT_MASK:
        mask = _kept_mask(indices, d)
        scattered = torch.zeros(d, dtype=torch.int32)
        scattered[indices] = values.view(torch.int32)
        ordered = scattered[mask].view(torch.float32)  # values in increasing index order
        out = torch.cat([_pack_mask(mask), _f32_to_bytes(ordered)])
    else:
        _kept_mask(indices, d)
        dense = torch.zeros(d, dtype=torch.int32)  # +0.0 where not kept
        dense[indices] = values.view(torch.int32)
        out = _f32_to_bytes(dense.view(torch.float32))
    assert out.numel() == payload_bytes(k, d)
    return out


def decode_sparse(payload: Tensor, k: int, d: int) -> DecodedMessage:
    """Decode :func:`encode_sparse`'s payload for ``k`` of ``d`` kept.

    ``packed``: k values and indices in encoding order; ``mask``: k values with indices
    ascending; ``dense``: ``indices=None`` and the ``[d]`` vector. ``add_to`` of the result
    adds the same dense vector as the original message."""
    want = payload_bytes(k, d)
    payload = _as_uint8(payload)
    if payload.numel() != want:
        raise DecobenchError(f"payload has {payload.numel()} bytes, expected {want} "
                             f"for k={k} of d={d}")
    fmt = sparse_format(k, d)
    if fmt == FORMAT_PACKED:
        nv = _VALUE_BYTES * k
        values = _bytes_to_f32(payload[:nv])
        indices = unpack_bits(payload[nv:], k, index_bits(d))
        if k and int(indices.max()) >= d:
            raise DecobenchError(f"corrupt packed payload: an index is >= d={d}")
        return DecodedMessage(values=values, indices=indices, d=d)
    if fmt == FORMAT_MASK:
        nb = (d + 7) // 8
        indices = torch.nonzero(_unpack_mask(payload[:nb], d)).view(-1)
        if indices.numel() != k:
            raise DecobenchError(f"corrupt mask payload: {indices.numel()} bits set, expected {k}")
        return DecodedMessage(values=_bytes_to_f32(payload[nb:]), indices=indices, d=d)
    return DecodedMessage(values=_bytes_to_f32(payload), indices=None, d=d)


@dataclass(frozen=True)
class LayerSlice:
    """One layer of a per-layer Top-k message: coordinates ``[offset, offset + size)`` of the
    flat vector, of which ``k`` are kept (``k = size``: the layer is sent whole)."""

    offset: int
    size: int
    k: int


def layerwise_bits(layers: Sequence[LayerSlice]) -> int:
    """W = Σ_l W(k_l, d_l) (§3 on each layer's own d_l; a whole layer is 32 d_l)."""
    return sum(topk_wire_bits(layer.k, layer.size) for layer in layers)


def layerwise_payload_bytes(layers: Sequence[LayerSlice]) -> int:
    """⌈W / 8⌉ bytes of :func:`encode_layerwise`'s payload."""
    return (layerwise_bits(layers) + 7) // 8


def _layerwise_layout(layers: Sequence[LayerSlice]) -> tuple[int, list[tuple[int, int]]]:
    """(fp32 values carried, bit-field segments) of a per-layer message (module docstring)."""
    count, segments = 0, []
    for layer in layers:
        fmt = sparse_format(layer.k, layer.size)
        count += layer.size if fmt == FORMAT_DENSE else layer.k
        if fmt == FORMAT_PACKED:
            segments.append((layer.k, index_bits(layer.size)))
        elif fmt == FORMAT_MASK:
            segments.append((layer.size, 1))
    return count, segments


def encode_layerwise(values: Tensor, indices: Tensor, layers: Sequence[LayerSlice]) -> Tensor:
    """Encode a per-layer Top-k message as uint8 ``[⌈Σ_l W(k_l, d_l) / 8⌉]``.

    ``values`` / ``indices`` (global, unique) hold the layers' kept entries concatenated in
    layer order, ``k_l`` each. Each layer uses the format :func:`sparse_format` picks for
    ``(k_l, d_l)``; the payload is every layer's fp32 values (packed: in the given order;
    mask: by increasing index; dense: all ``d_l``, +0.0 where not kept), then one
    LSB-first bitstream (:func:`pack_segments`) of every packed layer's ``k_l`` local
    indices of ``⌈log2 d_l⌉`` bits and every mask layer's ``d_l``-bit mask, in layer order.
    The values are byte-aligned and the bit fields follow without padding, so the payload is
    exactly ⌈W / 8⌉ bytes."""
    values = values.detach().reshape(-1).cpu()
    indices = indices.detach().reshape(-1).cpu().to(torch.int64)
    if values.dtype != torch.float32 or values.numel() != indices.numel():
        raise DecobenchError("a per-layer message needs float32 values and indices of the "
                             "same length")
    if values.numel() != sum(layer.k for layer in layers):
        raise DecobenchError(f"the message holds {values.numel()} values but its layers keep "
                             f"{sum(layer.k for layer in layers)}")
    value_parts, segments, position = [], [], 0
    for layer in layers:
        v = values[position: position + layer.k].view(torch.int32)
        local = indices[position: position + layer.k] - layer.offset
        position += layer.k
        if layer.k and (int(local.min()) < 0 or int(local.max()) >= layer.size):
            raise DecobenchError(f"an index lies outside its layer [{layer.offset}, "
                                 f"{layer.offset + layer.size})")
        fmt = sparse_format(layer.k, layer.size)
        if fmt == FORMAT_PACKED:
            value_parts.append(v)
            segments.append((local, index_bits(layer.size)))
            continue
        mask = _kept_mask(local, layer.size)
        scattered = torch.zeros(layer.size, dtype=torch.int32)  # +0.0 where not kept
        scattered[local] = v
        if fmt == FORMAT_MASK:
            value_parts.append(scattered[mask])
            segments.append((mask, 1))
        else:
            value_parts.append(scattered)
    joined = torch.cat(value_parts) if value_parts else torch.zeros(0, dtype=torch.int32)
    out = torch.cat([_f32_to_bytes(joined.view(torch.float32)), pack_segments(segments)])
    assert out.numel() == layerwise_payload_bytes(layers)
    return out


def decode_layerwise(payload: Tensor, layers: Sequence[LayerSlice], d: int) -> DecodedMessage:
    """Inverse of :func:`encode_layerwise`: the values and their global indices (a dense
    layer gives all its ``d_l`` positions); ``add_to`` adds what the original adds."""
    payload = _as_uint8(payload)
    want = layerwise_payload_bytes(layers)
    if payload.numel() != want:
        raise DecobenchError(f"per-layer payload has {payload.numel()} bytes, expected {want}")
    count, segments = _layerwise_layout(layers)
    values = _bytes_to_f32(payload[: _VALUE_BYTES * count])
    fields = iter(unpack_segments(payload[_VALUE_BYTES * count:], segments))
    indices = []
    for layer in layers:
        fmt = sparse_format(layer.k, layer.size)
        if fmt == FORMAT_PACKED:
            local = next(fields)
            if layer.k and int(local.max()) >= layer.size:
                raise DecobenchError("corrupt per-layer payload: an index lies outside its layer")
        elif fmt == FORMAT_MASK:
            local = torch.nonzero(next(fields)).view(-1)
            if local.numel() != layer.k:
                raise DecobenchError(f"corrupt per-layer payload: {local.numel()} mask bits "
                                     f"set, expected {layer.k}")
        else:
            local = torch.arange(layer.size, dtype=torch.int64)
        indices.append(local + layer.offset)
    return DecodedMessage(values=values, indices=torch.cat(indices) if indices
                          else torch.zeros(0, dtype=torch.int64), d=d)


def encode_dense(values: Tensor) -> Tensor:
    """A dense fp32 ``[d]`` message as ``4 d`` little-endian bytes (``W = 32 d``, §3)."""
    if values.dim() != 1 or values.dtype != torch.float32:
        raise DecobenchError(f"dense values must be 1-D float32, got {values.dtype} "
                             f"of shape {tuple(values.shape)}")
    return _f32_to_bytes(values.detach().cpu()).clone()


def decode_dense(payload: Tensor, d: int | None = None) -> Tensor:
    """Inverse of :func:`encode_dense`: fp32 ``[len/4]`` (checked against ``d`` if given)."""
    payload = _as_uint8(payload)
    if payload.numel() % _VALUE_BYTES or (d is not None and payload.numel() != _VALUE_BYTES * d):
        raise DecobenchError(f"dense payload of {payload.numel()} bytes does not hold "
                             f"{'whole fp32 values' if d is None else f'd={d} fp32 values'}")
    return _bytes_to_f32(payload)


# --------------------------------------------------------------------------- header and frame

HEADER_FIELDS: tuple[str, ...] = (
    "iteration",
    "k",
    "flags",
    "obs_iteration",
    "obs_compute_s",
    "obs_tx_start_s",
    "obs_tx_end_s",
    "obs_arrive_s",
    "loss",
    "aux",
    "control_bytes",
    "saved_iteration",
)
"""Header fields in wire order; each is one little-endian float64 (integers exact to 2**53).
Append new fields at the end (both ends must share the tuple)."""

HEADER_BYTES = 8 * len(HEADER_FIELDS)
_HEADER_STRUCT = struct.Struct("<" + "d" * len(HEADER_FIELDS))


def _as_uint8(buf) -> Tensor:
    if isinstance(buf, Tensor):
        if buf.dtype != torch.uint8 or buf.dim() != 1:
            raise DecobenchError(f"expected a 1-D uint8 tensor, got {buf.dtype} "
                                 f"of shape {tuple(buf.shape)}")
        return buf.cpu()
    return torch.frombuffer(bytearray(buf), dtype=torch.uint8) if len(buf) else \
        torch.zeros(0, dtype=torch.uint8)


def encode_header(fields: Mapping[str, float]) -> Tensor:
    """The header as uint8 ``[HEADER_BYTES]``: :data:`HEADER_FIELDS` in order, one
    little-endian float64 each; a missing field is NaN, an unknown one is an error."""
    unknown = set(fields) - set(HEADER_FIELDS)
    if unknown:
        raise DecobenchError(f"unknown header fields {sorted(unknown)}; known: {HEADER_FIELDS}")
    packed = _HEADER_STRUCT.pack(*(float(fields.get(name, math.nan)) for name in HEADER_FIELDS))
    return torch.frombuffer(bytearray(packed), dtype=torch.uint8)


def decode_header(buf) -> dict[str, float]:
    """Inverse of :func:`encode_header` (a uint8 tensor or bytes of ``HEADER_BYTES``)."""
    raw = _as_uint8(buf)
    if raw.numel() != HEADER_BYTES:
        raise DecobenchError(f"header has {raw.numel()} bytes, expected {HEADER_BYTES}")
    return dict(zip(HEADER_FIELDS, _HEADER_STRUCT.unpack(raw.numpy().tobytes()), strict=True))


def frame(header_bytes: Tensor, payload: Tensor) -> Tensor:
    """``header || payload`` as one uint8 tensor (the header is :func:`encode_header`'s
    ``HEADER_BYTES`` bytes; the payload length follows from ``k`` in it and the known ``d``)."""
    header_bytes = _as_uint8(header_bytes)
    if header_bytes.numel() != HEADER_BYTES:
        raise DecobenchError(f"header has {header_bytes.numel()} bytes, expected {HEADER_BYTES}")
    return torch.cat([header_bytes, _as_uint8(payload)])


def unframe(buf) -> tuple[dict[str, float], Tensor]:
    """Inverse of :func:`frame`: ``(header dict, payload uint8 tensor)``."""
    raw = _as_uint8(buf)
    if raw.numel() < HEADER_BYTES:
        raise DecobenchError(f"frame of {raw.numel()} bytes is shorter than the "
                             f"{HEADER_BYTES}-byte header")
    return decode_header(raw[:HEADER_BYTES]), raw[HEADER_BYTES:]
