"""DD-EF-SGD (deco-sgd.md §2): delayed, compressed SGD with error feedback.

At iteration t every worker i computes g_t^i at the shared x_t and
    p_t^i = e_t^i + g_t^i,   Δ_t^i = C_{δ_t}(p_t^i),   e_{t+1}^i = p_t^i − Δ_t^i,
sends (t, τ_t, Δ_t^i), and
    u_t = (1/n) Σ_i Σ_{s : s + τ_s = t} Δ_s^i,    x_{t+1} = optimizer step on u_t.
D-SGD is δ = 1, τ = 0; DeCo-SGD is this optimizer with (δ_t, τ_t) from the DeCo planner.
"""

from __future__ import annotations

import torch
from torch import Tensor

from benchmark.compressors import Compressor, DenseCompressor, Update
from benchmark.error_feedback import ErrorFeedback
from benchmark.message_queue import DelayQueue
from benchmark.methods.base import Method, MethodContext, Observation, StepResult
from benchmark.methods.controllers import Controller
from benchmark.optimizer import SharedOptimizer


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
                               else ErrorFeedback(context.workers, context.d, device=context.device))
        self.queue: DelayQueue[Update] = DelayQueue()
        self.optimizer = SharedOptimizer(context.optimizer)

    def observe(self, observation: Observation) -> None:
        self.controller.observe(observation)

    def step(self, iteration: int, params: Tensor, gradients: Tensor) -> StepResult:
        schedule = self.controller.schedule(iteration)
        if self.error_feedback is None:
            compressed = self.compressor.compress(gradients, schedule.delta, iteration)
        else:
            compressed = self.error_feedback.step(gradients, self.compressor, schedule.delta,
                                                  iteration)
        self.queue.push(iteration, schedule.staleness, compressed.mean())
        due = self.queue.pop_due(iteration)
        update = torch.zeros_like(params)
        for message in due:
            message.update.add_to(update)
        self.optimizer.step(params, update, iteration)
        return StepResult(delta=compressed.delta, staleness=schedule.staleness,
                          bits_per_worker=compressed.bits_per_worker, dense=compressed.dense,
                          applied_messages=len(due), log=self.controller.log())
