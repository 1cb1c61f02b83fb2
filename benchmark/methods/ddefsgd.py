"""DD-EF-SGD (docs/design.md §2): delayed, compressed SGD with error feedback.

At iteration t every worker i computes g_t^i at the shared x_t and
    p_t^i = e_t^i + g_t^i,   Δ_t^i = C_{δ_t}(p_t^i),   e_{t+1}^i = p_t^i − Δ_t^i,
sends (t, τ_t, Δ_t^i), and
    u_t = (1/n) Σ_i Σ_{s : s + τ_s = t} Δ_s^i,    x_{t+1} = optimizer step on u_t.
D-SGD is δ = 1, τ = 0; DeCo-SGD is this optimizer with (δ_t, τ_t) from the DeCo planner.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from decobench.compression.compressors import Compressor, DenseCompressor
from decobench.compression.error_feedback import ErrorFeedback
from decobench.methods.base import Due, Method, MethodContext, Observation, Sent, summed
from decobench.methods.controllers import Controller, ReplayController
from decobench.methods.optimizer import SharedOptimizer


class DDEFSGD(Method):
    """The shared delayed / compressed / error-feedback update pipeline.

    ``compressor`` decides what goes on the wire, ``controller`` picks (δ_t, τ_t).
    With a dense compressor the error-feedback memory would stay exactly zero, so none is
    kept (this is what makes D-SGD cost no more than plain data-parallel SGD).
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
        self.optimizer = SharedOptimizer(context.optimizer)

    def observe(self, observation: Observation) -> None:
        self.controller.observe(observation)

    def replay(self, schedules: Sequence[Any]) -> bool:
        self.controller = ReplayController(schedules)
        return True

    def send(self, iteration: int, params: Tensor, gradients: Tensor) -> Sent:
        """The worker half for the ``[m, d]`` gradients this process holds (m = n in
        simulation, 1 per rank in emulation): pick (δ_t, τ_t), then p = e + g, Δ = C_δ(p),
        e ← p − Δ (§2)."""
        schedule = self.controller.schedule(iteration)
        if self.error_feedback is None:
            compressed = self.compressor.compress(gradients, schedule.delta, iteration)
        else:
            compressed = self.error_feedback.step(gradients, self.compressor, schedule.delta,
                                                  iteration)
        return Sent(compressed, schedule.staleness, self.controller.log())

    def receive(self, iteration: int, params: Tensor, due: Sequence[Due]) -> dict[str, Any]:
        """The aggregation half: u_t = Σ of the updates due at ``iteration`` (each already
        the mean over the n workers), then x_{t+1} = optimizer step on u_t."""
        update = summed(due, torch.zeros_like(params))
        observe_update = getattr(self.controller, "observe_update", None)
        if observe_update is not None and len(due) == 1:   # one source iteration's u_t
            observe_update(update)
        self.optimizer.step(params, update, iteration)
        return {}
