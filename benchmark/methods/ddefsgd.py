"""DD-EF-SGD (docs/design.md §2): delayed, compressed SGD with error feedback.

At iteration t every worker i computes g_t^i at the shared x_t and
    p_t^i = e_t^i + g_t^i,   Δ_t^i = C_{δ_t}(p_t^i),   e_{t+1}^i = p_t^i − Δ_t^i,
sends (t, τ_t, Δ_t^i), and
    u_t = (1/n) Σ_i Σ_{s : s + τ_s = t} Δ_s^i,    x_{t+1} = optimizer step on u_t.
D-SGD is δ = 1, τ = 0; DeCo-SGD is this optimizer with (δ_t, τ_t) from the DeCo planner.
The update rules of §2.5 (``MethodContext.rules``) change what enters error feedback and how
u_t is applied; their defaults are the pipeline above.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from decobench.compression.compressors import Compressor, DenseCompressor, TopKCompressor
from decobench.compression.error_feedback import ErrorFeedback
from decobench.compression.layerwise import LayerTopKCompressor, model_layers
from decobench.methods.base import Due, Method, MethodContext, Observation, Sent, summed
from decobench.methods.controllers import Controller, ReplayController
from decobench.methods.optimizer import SharedOptimizer
from decobench.methods.rules import RulesState, WorkerRules

ALL_RULES = frozenset({"topk_scope", "ef_units", "clip_norm", "step_bound",
                       "momentum_correction"})
"""The update rules (docs/design.md §2.5) every method on :class:`DDEFSGD` implements."""


def topk_compressor(context: MethodContext) -> Compressor:
    """Top-k as the run's ``topk_scope`` rule asks: global over the flat model (§2.2), or
    per tensor (:class:`LayerTopKCompressor`, §2.5)."""
    if context.rules.topk_scope == "layer":
        return LayerTopKCompressor(model_layers(context.param_shapes, context.d))
    return TopKCompressor()


class DDEFSGD(RulesState, Method):
    """The shared delayed / compressed / error-feedback update pipeline.

    ``compressor`` decides what goes on the wire, ``controller`` picks (δ_t, τ_t).
    With a dense compressor the error-feedback memory would stay exactly zero, so none is
    kept (this is what makes D-SGD cost no more than plain data-parallel SGD).
    ``rules`` (:class:`WorkerRules`) applies the context's update rules on the worker side.
    """

    name = "dd-ef-sgd"

    def __init__(self, context: MethodContext, compressor: Compressor,
                 controller: Controller) -> None:
        self.context = context
        self.compressor = compressor
        self.controller = controller
        self.error_feedback = (None if isinstance(compressor, DenseCompressor)
                               else ErrorFeedback(context.local_workers, context.d,
                                             device=context.device))
        self.rules = WorkerRules(context.rules, context.optimizer)
        self.optimizer = SharedOptimizer(self.rules.applied_optimizer())

    def observe(self, observation: Observation) -> None:
        self.controller.observe(observation)

    def replay(self, schedules: Sequence[Any]) -> bool:
        self.controller = ReplayController(schedules)
        return True

    def send(self, iteration: int, params: Tensor, gradients: Tensor) -> Sent:
        """The worker half for the ``[m, d]`` gradients this process holds (m = n in
        simulation, 1 per rank in emulation): pick (δ_t, τ_t), then p = e + g, Δ = C_δ(p),
        e ← p − Δ (§2); g as the update rules make it (§2.5; the raw gradient by default)."""
        schedule = self.controller.schedule(iteration)
        inputs = self.rules.worker_input(gradients, iteration, schedule.delta,
                                         schedule.staleness)
        if self.error_feedback is None:
            compressed = self.compressor.compress(inputs, schedule.delta, iteration)
        else:
            compressed = self.error_feedback.step(inputs, self.compressor, schedule.delta,
                                                  iteration)
        self.rules.sent(compressed)
        return Sent(compressed, schedule.staleness, self.controller.log())

    def receive(self, iteration: int, params: Tensor, due: Sequence[Due]) -> dict[str, Any]:
        """The aggregation half: u_t = Σ of the updates due at ``iteration`` (each already
        the mean over the n workers), then x_{t+1} = optimizer step on u_t."""
        update = summed(due, torch.zeros_like(params))
        observe_update = getattr(self.controller, "observe_update", None)
        if observe_update is not None and len(due) == 1:   # one source iteration's u_t
            observe_update(update)
        self.optimizer.step(params, update, iteration, scaled=self.rules.scaled)
        return {}
