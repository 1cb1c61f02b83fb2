"""Rand-k SGD with error feedback (Stich et al., 2018) as a decobench method plugin."""

from dataclasses import dataclass

import torch
from pydantic import Field

from decobench.clock.wire import topk_count
from decobench.compression.codec import decode_dense, encode_dense
from decobench.compression.compressors import Compressed
from decobench.methods import DDEFSGD, MethodOptions, MethodSpec
from decobench.methods.controllers import StaticController


def shared_draw(d: int, k: int, iteration: int) -> torch.Tensor:
    """The k coordinates every worker keeps at ``iteration`` (seeded by it: never sent)."""
    return torch.randperm(d, generator=torch.Generator().manual_seed(iteration))[:k]


class RandKDecoder:
    """Any worker's message from its bytes: the k values, and the indices drawn again."""

    def decode(self, payload: torch.Tensor, header: dict[str, float], d: int):
        k = int(header["k"])
        return decode_dense(payload[:4 * k]), shared_draw(d, k, int(header["iteration"]))


@dataclass(frozen=True)
class RandKWire:
    """The batch on the emulated backend's wire: worker i sends its k fp32 values, 4k bytes."""

    values: torch.Tensor
    decoder = RandKDecoder()

    def encode(self, row: int) -> tuple[torch.Tensor, dict[str, float]]:
        return encode_dense(self.values[row]), {"k": float(self.values.shape[1])}


class RandK:
    """Keep k = ⌈δd⌉ coordinates drawn at random; the workers share the draw, so only the
    k values go on the wire: W = 32k bits."""

    name = "randk"

    def compress(self, p: torch.Tensor, delta: float, iteration: int = 0) -> Compressed:
        n, d = p.shape
        k = topk_count(delta, d)
        indices = shared_draw(d, k, iteration).to(p.device).expand(n, k)
        values = torch.gather(p, 1, indices)
        return Compressed(values=values, indices=indices, d=d, bits_per_worker=32 * k,
                          delta=k / d, wire=RandKWire(values))


class RandKOptions(MethodOptions):
    delta: float = Field(0.01, gt=0, le=1, description="fraction of coordinates sent")
    tau: int = Field(0, ge=0, description="staleness τ in iterations")


RANDK_SPEC = MethodSpec(
    "randk-sgd", "Rand-k SGD with error feedback (shared random coordinates)", RandKOptions,
    lambda context, options: DDEFSGD(context, RandK(),
                                     StaticController(options.delta, options.tau)))
