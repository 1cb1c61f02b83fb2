"""CocktailSGD's compressor C = Quant_b ∘ TopK_r ∘ RandSample_p (docs/design.md §8.4).

For each worker's error-compensated vector p_t^i (row i of ``[n, d]``):

1. RandSample_p: m = max(1, round(p·d)) coordinates shared by every worker,
       S_t = { (⌊j·d/m⌋ + offset + t) mod d : j = 0..m−1 },
   the reference's strided mask rotated by one position per iteration. ``offset`` is drawn
   once in [0, d) from a generator seeded with the run seed, so the mask costs no bits.
   When 1/p divides d, S_t is exactly the reference's stride-1/p mask shifted by one per
   iteration (the reference starts at offset 0; a seeded offset keeps runs with different
   seeds from sampling the same coordinates).
2. TopK_r inside the sample: keep k = max(1, ⌈r·m⌉) of the m sampled coordinates with the
   largest |p| (``torch.topk``). Their positions go as a packed 1-bit mask over the sample
   (m bits), so the kept values travel in ascending position order.
3. Quant_b: consecutive buckets of ``bucket_size`` (128) kept values, the last one possibly
   shorter. Per bucket the scale s = max |v| goes as fp16 rounded UP to the nearest fp16
   >= the max (so no value clips), and each value as a symmetric b-bit integer
       q = round(v / s · L),  L = 2^{b−1} − 1  (``torch.round``: half to even),
   received as v̂ = q · s / L, so |v − v̂| <= s / (2L). A bucket of zeros has s = 0 and sends
   zeros. A scale above the fp16 maximum 65504 is clamped to it and q to ±L (only a
   diverging run gets there).

Split of δ into (p, r): p = max_sample_fraction if δ <= max_sample_fraction, else p = δ and
r = 1; r = δ / p (the reference's p = 0.1, r = 0.2 is δ = 0.02).

Bits on the wire per worker: W = m + k·b + 16·⌈k / bucket_size⌉ (the mask, the integers,
the fp16 scales). The closed form of docs/design.md §8.4, p·d·(r·b + r·16/128 + 1), equals
it when m = p·d and k = r·m are integers and k is a multiple of 128; the count actually sent
is reported.
The mask's m bits are counted even when r = 1 (k = m), as the closed form does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from decobench.clock.wire import topk_count
from decobench.compression.compressors import Compressed, WireSize

SCALE_BITS = 16
"""Bits of one bucket scale (fp16)."""

FP16_MAX = 65504.0
"""The largest finite fp16 value: scales above it are clamped."""


@dataclass(frozen=True)
class CocktailSplit:
    """How one δ is spent: sample fraction p, Top-k ratio r inside the sample, and the
    resulting counts m (sampled) and k (kept) per worker."""

    sample_fraction: float
    topk_ratio: float
    sampled: int
    kept: int


def split_ratio(delta: float, d: int, max_sample_fraction: float) -> CocktailSplit:
    """p = max_sample_fraction if δ <= max_sample_fraction else δ; r = δ / p;
    m = max(1, round(p·d)) (at most d); k = max(1, ⌈r·m⌉) (at most m)."""
    if not 0 < delta <= 1:
        raise ValueError(f"delta must be in (0, 1], got {delta!r}")
    p = max_sample_fraction if delta <= max_sample_fraction else delta
    r = delta / p
    m = min(d, max(1, round(p * d)))
    return CocktailSplit(p, r, m, topk_count(r, m))


def wire_bits(split: CocktailSplit, quant_bits: int, bucket_size: int) -> int:
    """W = m + k·b + 16·⌈k / bucket_size⌉ bits per worker."""
    buckets = math.ceil(split.kept / bucket_size)
    return split.sampled + split.kept * quant_bits + SCALE_BITS * buckets


def sample_positions(d: int, m: int, offset: int, iteration: int,
                     device: torch.device | str = "cpu") -> Tensor:
    """RandSample's shared mask, ascending: (⌊j·d/m⌋ + offset + iteration) mod d, j < m."""
    strided = torch.arange(m, dtype=torch.int64, device=device) * d // m
    return torch.sort((strided + offset + iteration) % d).values


def quantise(values: Tensor, quant_bits: int, bucket_size: int) -> tuple[Tensor, Tensor]:
    """Quant_b on each row of ``values`` [n, k]: returns (v̂ [n, k] in ``values``' dtype, the
    fp16 scales [n, ⌈k / bucket_size⌉]). Deterministic; see the module docstring."""
    dequantised, scales, _ = quantise_levels(values, quant_bits, bucket_size)
    return dequantised, scales


def dequantise(q: Tensor, scales: Tensor, quant_bits: int, bucket_size: int,
               dtype: torch.dtype = torch.float32) -> Tensor:
    """v̂ = q · s / L from the integers ``q`` [n, k] and fp16 ``scales`` [n, buckets], exactly
    as :func:`quantise` computes it (a receiver rebuilds the sender's values bit for bit)."""
    n, k = q.shape
    levels = 2 ** (quant_bits - 1) - 1
    buckets = scales.shape[1]
    padded = torch.zeros(n, buckets * bucket_size, dtype=torch.float64, device=q.device)
    padded[:, :k] = q.to(torch.float64)
    scale = scales.double().unsqueeze(2)
    return (padded.view(n, buckets, bucket_size) * scale / levels).view(n, -1)[:, :k].to(dtype)


def quantise_levels(values: Tensor, quant_bits: int,
                    bucket_size: int) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`quantise` plus the integers q [n, k] (int64, in [−L, L]) that go on the wire."""
    n, k = values.shape
    levels = 2 ** (quant_bits - 1) - 1
    buckets = math.ceil(k / bucket_size)
    padded = torch.zeros(n, buckets * bucket_size, dtype=torch.float64, device=values.device)
    padded[:, :k] = values
    padded = padded.view(n, buckets, bucket_size)
    largest = padded.abs().amax(dim=2).clamp(max=FP16_MAX)
    scales = largest.half()
    below = scales.double() < largest            # rounded down: step up to the next fp16
    scales = torch.where(below, torch.nextafter(scales, torch.full_like(scales, math.inf)),
                         scales)
    scale = scales.double().unsqueeze(2)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(padded / safe * levels).clamp(-levels, levels)
    dequantised = (q * scale / levels).view(n, -1)[:, :k]
    return dequantised.to(values.dtype), scales, q.view(n, -1)[:, :k].to(torch.int64)


@dataclass(frozen=True)
class CocktailDecoder:
    """Decodes any worker's CocktailSGD message from its bytes: the shared parts (the
    sample's offset, b, the bucket size) are the same on every rank."""

    offset: int
    quant_bits: int
    bucket_size: int

    def layout(self, m: int, k: int) -> list[tuple[int, int]]:
        """The payload's segments: the m-bit mask, k b-bit integers, the fp16 scales."""
        return [(m, 1), (k, self.quant_bits), (math.ceil(k / self.bucket_size), SCALE_BITS)]

    def decode(self, payload: Tensor, header: dict[str, float], d: int) -> tuple[Tensor, Tensor]:
        from decobench.compression.codec import unpack_segments

        k, m, iteration = int(header["k"]), int(header["aux"]), int(header["iteration"])
        mask, q, scales = unpack_segments(payload, self.layout(m, k))
        chosen = torch.nonzero(mask, as_tuple=True)[0]
        if chosen.numel() != k:
            raise ValueError(f"corrupt CocktailSGD payload: {chosen.numel()} kept, header "
                             f"says {k}")
        levels = 2 ** (self.quant_bits - 1) - 1
        halves = torch.where(scales >= 2**15, scales - 2**16, scales).to(torch.int16)
        values = dequantise((q - levels).view(1, -1), halves.view(torch.float16).view(1, -1),
                            self.quant_bits, self.bucket_size)[0]
        positions = sample_positions(d, m, self.offset, iteration)
        return values, positions[chosen]


@dataclass(frozen=True)
class CocktailWire:
    """The wire form of one CocktailSGD batch: per row, the mask over the sample, the b-bit
    integers (offset by L to be non-negative) and the fp16 scales: W bits, bit for bit."""

    decoder: CocktailDecoder
    sampled: int
    chosen: Tensor      # [n, k] positions inside the sample, ascending
    q: Tensor           # [n, k] integers in [−L, L]
    scales: Tensor      # [n, buckets] fp16

    def encode(self, row: int) -> tuple[Tensor, dict[str, float]]:
        from decobench.compression.codec import pack_segments

        k = self.chosen.shape[1]
        mask = torch.zeros(self.sampled, dtype=torch.int64)
        mask[self.chosen[row].cpu()] = 1
        levels = 2 ** (self.decoder.quant_bits - 1) - 1
        halves = self.scales[row].cpu().view(torch.int16).to(torch.int64) & 0xFFFF
        payload = pack_segments([(mask, 1), (self.q[row].cpu() + levels,
                                             self.decoder.quant_bits), (halves, SCALE_BITS)])
        return payload, {"k": float(k), "aux": float(self.sampled)}


class CocktailCompressor:
    """C = Quant_b ∘ TopK_r ∘ RandSample_p on ``[n, d]``; the sample mask is shared by all
    workers and rotates by one position per iteration. ``last_split`` is the split of the
    latest message (for logging)."""

    name = "cocktail"

    def __init__(self, d: int, *, seed: int, quant_bits: int = 4, bucket_size: int = 128,
                 max_sample_fraction: float = 0.1) -> None:
        if not 2 <= quant_bits <= 16 or bucket_size < 1 or not 0 < max_sample_fraction <= 1:
            raise ValueError("need 2 <= quant_bits <= 16, bucket_size >= 1 and "
                             "0 < max_sample_fraction <= 1")
        self.d, self.quant_bits, self.bucket_size = d, quant_bits, bucket_size
        self.max_sample_fraction = max_sample_fraction
        generator = torch.Generator().manual_seed(seed)
        self.offset = int(torch.randint(d, (1,), generator=generator))
        self.decoder = CocktailDecoder(self.offset, quant_bits, bucket_size)
        self.last_split: CocktailSplit | None = None

    def size(self, delta: float, d: int) -> WireSize:
        """W = m + k·b + 16·⌈k / bucket_size⌉ bits, never dense, δ = k/d."""
        split = split_ratio(delta, d, self.max_sample_fraction)
        return WireSize(wire_bits(split, self.quant_bits, self.bucket_size), False,
                        split.kept / d)

    def compress(self, p: Tensor, delta: float, iteration: int = 0) -> Compressed:
        n, d = p.shape
        if d != self.d:
            raise ValueError(f"expected vectors of {self.d} parameters, got {d}")
        split = split_ratio(delta, d, self.max_sample_fraction)
        positions = sample_positions(d, split.sampled, self.offset, iteration, p.device)
        sampled = p[:, positions]
        _, chosen = torch.topk(sampled.abs(), split.kept, dim=1, sorted=False)
        chosen = torch.sort(chosen, dim=1).values  # the mask order: ascending positions
        values, scales, q = quantise_levels(torch.gather(sampled, 1, chosen), self.quant_bits,
                                            self.bucket_size)
        self.last_split = split
        wire = self.size(delta, d)
        return Compressed(values=values, indices=positions[chosen], d=d,
                          bits_per_worker=wire.bits_per_worker, delta=wire.delta,
                          wire=CocktailWire(self.decoder, split.sampled, chosen, q, scales))
