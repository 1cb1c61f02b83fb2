"""All n workers' stochastic gradients in one vectorised pass.

The workers of a simulated run share one model (or, for methods with per-worker models,
hold a ``[n, d]`` stack of them). Instead of n Python-level forward/backward passes, the
per-worker gradients g_t^i = ∇f_i(x_t; batch_i) come from one ``torch.func.vmap`` over the
worker axis of ``grad(functional_call(model, x, batch))``. ``make bench`` measures this
against one plain forward/backward over the same n·B samples.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap

from decobench.flat import FlatLayout

LossFn = Callable[[Tensor, Tensor], Tensor]


class WorkerGradients:
    """``gradients(x, inputs, targets) -> (g [n, d], loss [n])``.

    ``x`` is ``[d]`` (shared model) or ``[n, d]`` (one model per worker); ``inputs`` and
    ``targets`` carry a leading worker axis ``[n, B, ...]``. With ``vectorise=False`` the
    same function runs once per worker (for models ``vmap`` cannot batch). Buffers (e.g. BatchNorm
    statistics) are read from the template module and not updated.
    """

    def __init__(self, module: nn.Module, layout: FlatLayout, loss_fn: LossFn,
                 vectorise: bool = True) -> None:
        self.module, self.layout, self.loss_fn = module, layout, loss_fn
        self.vectorise = vectorise
        self.buffers = dict(module.named_buffers())
        self._grad = grad_and_value(self._loss)

    def _loss(self, flat: Tensor, inputs: Tensor, targets: Tensor) -> Tensor:
        params = self.layout.unflatten(flat)
        outputs = functional_call(self.module, (params, self.buffers), (inputs,))
        return self.loss_fn(outputs, targets)

    def __call__(self, params: Tensor, inputs: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        params_dim = 0 if params.dim() == 2 else None
        if self.vectorise:
            return vmap(self._grad, in_dims=(params_dim, 0, 0))(params, inputs, targets)
        results = [self._grad(params if params_dim is None else params[i], inputs[i], targets[i])
                   for i in range(inputs.shape[0])]
        return (torch.stack([g for g, _ in results]), torch.stack([v for _, v in results]))

    @torch.no_grad()
    def forward(self, params: Tensor, inputs: Tensor) -> Tensor:
        """Model outputs at flat parameters ``params`` ([d]) for a plain batch."""
        return functional_call(self.module, (self.layout.unflatten(params), self.buffers),
                               (inputs,))
