"""Error feedback in gradient units (docs/design.md §2.1).

For every worker i:  p_t = e_t + g_t,  Δ_t = C_δ(p_t),  e_{t+1} = p_t − Δ_t.
The memory starts at zero, so with δ = 1 (C = identity) it stays zero and the method is
plain (possibly delayed) SGD.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from decobench.compression.compressors import Compressed, Compressor


class ErrorFeedback:
    """The n workers' error-feedback memories e^i, stored as one ``[n, d]`` tensor."""

    def __init__(self, workers: int, d: int, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> None:
        self.memory = torch.zeros(workers, d, dtype=dtype, device=device)

    def step(self, gradients: Tensor, compressor: Compressor, delta: float,
             iteration: int = 0) -> Compressed:
        """Compress ``e + g`` at ratio δ, keep the residual, return the messages.

        ``gradients`` is ``[n, d]``. The memory is updated in place:
        e ← (e + g) − C_δ(e + g).
        """
        return self.apply(gradients, lambda p: compressor.compress(p, delta, iteration))

    def apply(self, gradients: Tensor, compress: Callable[[Tensor], Compressed]) -> Compressed:
        """The same as :meth:`step` for any map ``p [n, d] -> Compressed`` (e.g. a per-layer
        Top-k whose ratios are not one δ). ``compress`` must not modify its input."""
        if gradients.shape != self.memory.shape:
            raise ValueError(f"gradients {tuple(gradients.shape)} != memory {tuple(self.memory.shape)}")
        self.memory.add_(gradients)              # memory now holds p = e + g
        compressed = compress(self.memory)
        compressed.subtract_from(self.memory)    # e ← p − Δ
        return compressed

    def norm(self) -> float:
        """‖e‖ over all workers (diagnostics)."""
        return float(self.memory.norm())
