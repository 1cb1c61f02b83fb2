"""The optimizer step shared by every method, applied after aggregation (docs/design.md §2.4).

    v ← μ v + u_t + wd · x ;   x ← x − γ_t v

With μ = 0 and wd = 0 (the paper's default) this is x_{t+1} = x_t − γ u_t. Compression and
error feedback always act on raw gradients, before this step.
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

    def step(self, params: Tensor, update: Tensor, iteration: int) -> None:
        """x ← x − γ_t v (in place)."""
        params.add_(self.change(params, update, iteration))

    def change(self, params: Tensor, update: Tensor, iteration: int) -> Tensor:
        """The signed parameter change −γ_t v this step would make, advancing the momentum
        buffer but leaving ``params`` untouched (DGA sends this local update)."""
        lr = learning_rate(self.config, iteration)
        direction = update
        if self.config.weight_decay:
            direction = direction + self.config.weight_decay * params
        if self.config.momentum:
            if self._velocity is None:
                self._velocity = torch.zeros_like(params)
            self._velocity.mul_(self.config.momentum).add_(direction)
            direction = self._velocity
        return direction * -lr
