"""Per-tensor (layer-wise) Top-k over the flat model (docs/design.md §2.2, §2.5).

Every tensor l of the model is a slice [offset, offset + d_l) of the flat vector
(``MethodContext.param_shapes`` order) and keeps its own k_l = topk_count(δ_l, d_l)
coordinates, so no tensor can take the whole budget as it can under global Top-k. Bits per
worker: Σ_l W(k_l, d_l), W of docs/design.md §3 on the layer's own d_l (its indices address
the layer), and on a real wire :class:`LayerwiseWire`. Accordion (§8.2) and the
``--topk-scope layer`` update rule (§2.5) both use it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from decobench.clock.wire import topk_count
from decobench.compression.codec import (
    LayerSlice,
    decode_layerwise,
    encode_layerwise,
    layerwise_payload_bytes,
)
from decobench.compression.compressors import Compressed, DenseCompressor, TopKCompressor, WireSize


@dataclass(frozen=True)
class Layer:
    """One tensor of the model as a slice [offset, offset + size) of the flat vector;
    ``compressed`` is True for tensors with ndim > 1 (Top-k), False for dense ones."""

    name: str
    offset: int
    size: int
    compressed: bool


def model_layers(param_shapes: Sequence[tuple[str, tuple[int, ...]]], d: int) -> tuple[Layer, ...]:
    """The flat vector's tensors in order (offsets are cumulative sizes); no shapes given
    means one compressed tensor ``"flat"`` of size d."""
    if not param_shapes:
        return (Layer("flat", 0, d, True),)
    layers, offset = [], 0
    for name, shape in param_shapes:
        size = math.prod(shape)
        layers.append(Layer(name, offset, size, len(shape) > 1))
        offset += size
    return tuple(layers)


def layerwise_size(layers: Sequence[Layer], deltas: Sequence[float], d: int) -> WireSize:
    """What :func:`layerwise_topk` sends at these δ_l, without the data: Σ_l W(k_l, d_l) bits
    and the kept share Σ_l k_l / d, or one dense message of 32 d bits when every layer goes
    whole."""
    counts = [topk_count(delta, layer.size) if layer.compressed else layer.size
              for layer, delta in zip(layers, deltas, strict=True)]
    if all(k == layer.size for k, layer in zip(counts, layers, strict=True)):
        return DenseCompressor().size(1.0, d)
    bits = sum((TopKCompressor().size(delta, layer.size) if layer.compressed
                else DenseCompressor().size(1.0, layer.size)).bits_per_worker
               for layer, delta in zip(layers, deltas, strict=True))
    return WireSize(bits, False, sum(counts) / d)


def layerwise_topk(p: Tensor, layers: Sequence[Layer], deltas: Sequence[float]) -> Compressed:
    """Per-layer Top-k of the ``[n, d]`` rows ``p``: layer l keeps k_l = topk_count(δ_l, d_l)
    of its coordinates (all of them for a dense layer, whose δ is ignored).

    Sparse result: the layers' messages concatenated, indices global (layer offset + local
    index), bits Σ_l W(k_l, d_l) (:func:`layerwise_size`), on a real wire as
    :class:`LayerwiseWire`. When every layer is sent whole the result is one dense message of
    32 d bits (an all-reduce), exactly as :class:`DenseCompressor` sends it. ``p`` is not
    modified.
    """
    n, d = p.shape
    wire = layerwise_size(layers, deltas, d)
    if wire.dense:
        return DenseCompressor().compress(p)
    values, indices, slices = [], [], []
    for layer, delta in zip(layers, deltas, strict=True):
        block = p[:, layer.offset:layer.offset + layer.size]
        part = (TopKCompressor().compress(block, delta) if layer.compressed
                else DenseCompressor().compress(block))
        if part.indices is None:
            local = torch.arange(layer.size, device=p.device).expand(n, -1)
        else:
            local = part.indices
        values.append(part.values)
        indices.append(local + layer.offset)
        slices.append(LayerSlice(layer.offset, layer.size, part.values.shape[1]))
    kept_values, kept_indices = torch.cat(values, dim=1), torch.cat(indices, dim=1)
    return Compressed(values=kept_values, indices=kept_indices, d=d,
                      bits_per_worker=wire.bits_per_worker, delta=wire.delta,
                      wire=LayerwiseWire(LayerwiseDecoder(tuple(slices)), kept_values,
                                         kept_indices))


@dataclass(frozen=True)
class LayerwiseDecoder:
    """Decodes any worker's per-layer Top-k message: every worker keeps the same k_l of each
    layer (the regimes are agreed, see :class:`Accordion`)."""

    layers: tuple[LayerSlice, ...]

    def decode(self, payload: Tensor, header: dict[str, float], d: int) -> tuple[Tensor, Tensor]:
        """The values and global indices of ``payload`` (bytes after ⌈W/8⌉ are the frame's
        word padding)."""
        message = decode_layerwise(payload[: layerwise_payload_bytes(self.layers)], self.layers, d)
        assert message.indices is not None
        return message.values, message.indices


@dataclass(frozen=True)
class LayerwiseWire:
    """The wire form of one per-layer Top-k batch (:func:`decobench.compression.codec.
    encode_layerwise`): ⌈Σ_l W(k_l, d_l) / 8⌉ bytes per row, bit for bit what is charged."""

    decoder: LayerwiseDecoder
    values: Tensor      # [n, Σ k_l], the layers' kept values in layer order
    indices: Tensor     # [n, Σ k_l], global

    def encode(self, row: int) -> tuple[Tensor, dict[str, float]]:
        payload = encode_layerwise(self.values[row], self.indices[row], self.decoder.layers)
        return payload, {"k": float(self.values.shape[1]), "aux": 0.0}


class LayerTopKCompressor:
    """C_δ of the ``--topk-scope layer`` update rule (docs/design.md §2.5): every tensor,
    biases and norms included, keeps k_l = topk_count(δ, d_l) of its own coordinates, one δ
    for all. Implements :class:`~decobench.compression.compressors.Compressor`; at δ = 1 the
    message is dense, as global Top-k's."""

    name = "topk-layer"

    def __init__(self, layers: Sequence[Layer]) -> None:
        self.layers = tuple(Layer(layer.name, layer.offset, layer.size, True) for layer in layers)

    def size(self, delta: float, d: int) -> WireSize:
        return layerwise_size(self.layers, [delta] * len(self.layers), d)

    def compress(self, p: Tensor, delta: float, iteration: int = 0) -> Compressed:
        return layerwise_topk(p, self.layers, [delta] * len(self.layers))
