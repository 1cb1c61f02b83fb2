"""Update rules: five settings of the compressed-SGD pipeline that decide whether it trains
stably at scale (docs/design.md §2.5). Each default is the paper's pipeline as §2.1-§2.4 state
it; every other value is this project's, named so that an ablation can switch it alone.

- ``topk_scope``: ``global`` Top-k over the flat model (§2.2), or ``layer``: every tensor keeps
  its own share δ of its coordinates, so no tensor can take the whole budget.
- ``ef_units``: error feedback in ``gradient`` units (§2.1), or in ``update`` units: each
  worker compresses p = e + γ_t·g and the aggregate is applied without a second γ, so a
  residual keeps the step of the iteration it came from when γ changes (warm-up).
- ``clip_norm``: each worker's gradient is scaled to at most this L2 norm before anything else
  (None: no clipping).
- ``step_bound``: ``none`` (one γ for every method), or ``theorem-1``: the gradient of
  iteration t is scaled by s(δ_t, τ_t) = 1 / sqrt(1 + Φ_paper(δ_t, τ_t)), so the step shrinks
  as compression and staleness grow; s(1, 0) = 1 (D-SGD is unchanged). The paper's text has
  lost Theorem 1's step condition; this form is this project's fill-in (§2.5 says why).
- ``momentum_correction``: momentum μ applied on the workers before compression with DGC's
  correction and factor masking (Lin et al., ICLR 2018) instead of after aggregation.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from decobench.compression.compressors import Compressed
from decobench.methods.optimizer import OptimizerConfig, learning_rate
from decobench.planning.phi import phi_paper

RULE_FLAGS: dict[str, str] = {"topk_scope": "--topk-scope", "ef_units": "--ef-units",
                              "clip_norm": "--clip-norm", "step_bound": "--step-bound",
                              "momentum_correction": "--momentum-correction"}
"""Each rule's command-line flag (``decobench run``), for messages."""


class UpdateRules(BaseModel):
    """The five update rules of docs/design.md §2.5; the defaults are the paper's pipeline."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    topk_scope: Literal["global", "layer"] = "global"
    ef_units: Literal["gradient", "update"] = "gradient"
    clip_norm: float | None = Field(None, gt=0)
    step_bound: Literal["none", "theorem-1"] = "none"
    momentum_correction: bool = False

    def changed(self) -> tuple[str, ...]:
        """Names of the rules that differ from the paper's pipeline."""
        default = UpdateRules()
        return tuple(name for name in type(self).model_fields
                     if getattr(self, name) != getattr(default, name))

    def describe(self) -> str:
        """``"paper pipeline"`` or the changed rules as flags, e.g. ``--ef-units update``."""
        changed = self.changed()
        if not changed:
            return "paper pipeline"
        return ", ".join(f"{RULE_FLAGS[name]} {getattr(self, name)}".replace(" True", "")
                         for name in changed)


def clip_rows(gradients: Tensor, max_norm: float) -> Tensor:
    """Each row g_i of ``[m, d]`` scaled by min(1, c / ‖g_i‖): a new tensor, rows already
    within the norm unchanged (the input is not modified)."""
    norms = torch.linalg.vector_norm(gradients, dim=1, keepdim=True)
    factor = torch.clamp(max_norm / norms.clamp_min(torch.finfo(gradients.dtype).tiny), max=1.0)
    return gradients * factor


def step_bound_scale(delta: float, tau: int) -> float:
    """s(δ, τ) = 1 / sqrt(1 + Φ_paper(δ, τ)): 1 for D-SGD (δ = 1, τ = 0), 0 where Φ
    overflows (docs/design.md §2.5; this project's fill-in of Theorem 1's step condition)."""
    phi = phi_paper(delta, tau)
    return 0.0 if math.isinf(phi) else 1.0 / math.sqrt(1.0 + phi)


class WorkerRules:
    """The worker side of the update rules for a method built on error feedback and the
    shared optimizer (DD-EF-SGD and every method on it): what each worker hands its error
    feedback instead of its raw gradient, and what it masks once its message has left.
    Clipping is not here: the training loop clips every method's gradients
    (:func:`clip_rows`). A state object: checkpointed with its method."""

    def __init__(self, rules: UpdateRules, optimizer: OptimizerConfig) -> None:
        self.rules = rules
        self.optimizer = optimizer
        self.velocity: Tensor | None = None
        """DGC's per-worker momentum u^i (``[m, d]``), with ``momentum_correction``."""

    @property
    def scaled(self) -> bool:
        """Whether messages are in update units (the aggregate is applied without γ_t)."""
        return self.rules.ef_units == "update"

    def applied_optimizer(self) -> OptimizerConfig:
        """The shared optimizer's settings after aggregation: without momentum when the
        workers apply it (``momentum_correction``), else unchanged."""
        if self.rules.momentum_correction:
            return self.optimizer.model_copy(update={"momentum": 0.0})
        return self.optimizer

    def scale(self, iteration: int, delta: float, tau: int) -> float:
        """The factor on iteration t's gradient: s(δ_t, τ_t) with ``step_bound theorem-1``,
        times γ_t with ``ef_units update``; 1 for the paper's pipeline."""
        factor = 1.0
        if self.rules.step_bound == "theorem-1":
            factor *= step_bound_scale(delta, tau)
        if self.scaled:
            factor *= learning_rate(self.optimizer, iteration)
        return factor

    def worker_input(self, gradients: Tensor, iteration: int, delta: float, tau: int) -> Tensor:
        """What enters error feedback at iteration t for the ``[m, d]`` gradients g: c·g
        (c = :meth:`scale`), or with ``momentum_correction`` DGC's u ← μ u + c·g (u itself,
        not a copy; error feedback only reads it). ``gradients`` is not modified."""
        factor = self.scale(iteration, delta, tau)
        scaled = gradients if factor == 1.0 else gradients * factor
        if not self.rules.momentum_correction:
            return scaled
        if self.velocity is None:
            self.velocity = torch.zeros_like(gradients)
        return self.velocity.mul_(self.optimizer.momentum).add_(scaled)

    def sent(self, compressed: Compressed) -> None:
        """DGC's momentum factor masking: u^i is zeroed where worker i's message carried its
        coordinates (nothing to do for a dense message, which leaves no residual)."""
        if self.velocity is not None and compressed.indices is not None:
            self.velocity.scatter_(1, compressed.indices, 0.0)


class RulesState:
    """Mixin of a method that keeps its :class:`WorkerRules` in ``self.rules`` beside its
    ``self.context``: a checkpoint pickled before the update rules existed resumes with the
    paper's pipeline."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "rules" not in state:
            state["rules"] = WorkerRules(state["context"].rules, state["context"].optimizer)
        self.__dict__.update(state)
