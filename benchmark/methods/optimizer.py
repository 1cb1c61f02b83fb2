"""The optimizer step shared by every method, applied after aggregation (docs/design.md §2.4).

    v ← μ v + u_t + wd · x ;   x ← x − γ_t v

With μ = 0 and wd = 0 (the paper's default) this is x_{t+1} = x_t − γ u_t. Compression and
error feedback act before this step, on raw gradients, or with the ``--ef-units update`` rule
(§2.5) on γ_t·g: then u_t is already a step and ``scaled=True`` applies v ← μ v + u_t + γ_t·wd·x;
x ← x − v.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor


class OptimizerConfig(BaseModel):
    """Step size γ, momentum μ, weight decay and the learning-rate schedule."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    lr: float = Field(0.05, gt=0, description="step size γ")
    momentum: float = Field(0.0, ge=0, lt=1, description="heavy-ball momentum μ")
    weight_decay: float = Field(0.0, ge=0, description="L2 weight decay added to u_t")
    schedule: Literal["constant", "warmup", "warmup-cosine"] = "constant"
    warmup_iters: int = Field(0, ge=0)
    total_iters: int | None = Field(None, gt=0, description="cosine horizon (iterations)")


def learning_rate(config: OptimizerConfig, iteration: int) -> float:
    """γ_t: constant; linear warm-up over ``warmup_iters`` then constant (``warmup``); or
    linear warm-up then cosine decay to 0 at ``total_iters`` (``warmup-cosine``)."""
    if config.schedule == "constant":
        return config.lr
    if iteration < config.warmup_iters:
        return config.lr * (iteration + 1) / config.warmup_iters
    if config.schedule == "warmup":
        return config.lr
    horizon = config.total_iters or 1
    progress = min(1.0, (iteration - config.warmup_iters) / max(1, horizon - config.warmup_iters))
    return 0.5 * config.lr * (1.0 + math.cos(math.pi * progress))


class SharedOptimizer:
    """Applies the aggregated update u_t to parameters x (any shape, updated in place)."""

    def __init__(self, config: OptimizerConfig) -> None:
        self.config = config
        self._velocity: Tensor | None = None

    def step(self, params: Tensor, update: Tensor, iteration: int, scaled: bool = False) -> None:
        """x ← x − γ_t v (in place); ``scaled``: u_t is already in update units (γ applied)."""
        params.add_(self.change(params, update, iteration, scaled))

    def change(self, params: Tensor, update: Tensor, iteration: int,
               scaled: bool = False) -> Tensor:
        """The signed parameter change −γ_t v this step would make, advancing the momentum
        buffer but leaving ``params`` untouched (DGA sends this local update). ``scaled``:
        u_t already carries its step (``--ef-units update``), so v is applied without γ_t
        and weight decay enters as γ_t·wd·x."""
        lr = learning_rate(self.config, iteration)
        direction = update
        if self.config.weight_decay:
            decay = self.config.weight_decay * (lr if scaled else 1.0)
            direction = direction + decay * params
        if self.config.momentum:
            if self._velocity is None:
                self._velocity = torch.zeros_like(params)
            self._velocity.mul_(self.config.momentum).add_(direction)
            direction = self._velocity
        return direction * (-1.0 if scaled else -lr)
