"""A model's trainable parameters as one flat fp32 vector x ∈ R^d.

Top-k is global over the flattened model (docs/design.md §2.2), so every method works on flat
vectors; :class:`FlatModel` turns a flat vector back into the named tensors that
``torch.func.functional_call`` needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class FlatLayout:
    """Names, shapes and sizes of a module's trainable parameters, in registration order."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    sizes: tuple[int, ...]

    @classmethod
    def of(cls, module: nn.Module) -> FlatLayout:
        params = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        return cls(names=tuple(n for n, _ in params),
                   shapes=tuple(tuple(p.shape) for _, p in params),
                   sizes=tuple(p.numel() for _, p in params))

    @property
    def d(self) -> int:
        return sum(self.sizes)

    def flatten(self, module: nn.Module) -> Tensor:
        named = dict(module.named_parameters())
        return torch.cat([named[n].detach().reshape(-1) for n in self.names]).clone()

    def unflatten(self, flat: Tensor) -> dict[str, Tensor]:
        """Views of ``flat`` shaped like the module's parameters (differentiable)."""
        return {name: chunk.view(shape) for name, chunk, shape
                in zip(self.names, torch.split(flat, self.sizes), self.shapes, strict=True)}
