"""Rand-k SGD with error feedback (Stich et al., 2018) as a decobench method plugin."""

import torch
from pydantic import Field

from decobench.clock.wire import topk_count
from decobench.compression.compressors import Compressed
from decobench.methods import DDEFSGD, MethodOptions, MethodSpec
from decobench.methods.controllers import StaticController


class RandK:
    """Keep k = ⌈δd⌉ coordinates drawn at random; the workers share the draw (seeded by the
    iteration), so only the k values go on the wire: W = 32k bits."""

    name = "randk"

    def compress(self, p: torch.Tensor, delta: float, iteration: int = 0) -> Compressed:
        n, d = p.shape
        k = topk_count(delta, d)
        draw = torch.Generator().manual_seed(iteration)
        indices = torch.randperm(d, generator=draw)[:k].to(p.device).expand(n, k)
        return Compressed(values=torch.gather(p, 1, indices), indices=indices, d=d,
                          bits_per_worker=32 * k, delta=k / d)


class RandKOptions(MethodOptions):
    delta: float = Field(0.01, gt=0, le=1, description="fraction of coordinates sent")
    tau: int = Field(0, ge=0, description="staleness τ in iterations")


RANDK_SPEC = MethodSpec(
    "randk-sgd", "Rand-k SGD with error feedback (shared random coordinates)", RandKOptions,
    lambda context, options: DDEFSGD(context, RandK(),
                                     StaticController(options.delta, options.tau)),
    emulation="its 32k-bit messages have no wire codec (the emulated backend sends Top-k)")
