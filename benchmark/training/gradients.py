"""All n workers' stochastic gradients g_t^i = ∇f_i(x_t; batch_i) in one pass.

Three engines compute the same ``[n, d]`` gradients:

- ``grouped`` (:mod:`decobench.training.grouped_gradients`): one plain forward/backward over the n·B
  samples, each layer's per-worker weight gradients taken from its input and output
  gradient. It costs about one ordinary training step over n·B samples.
- ``vmap``: ``torch.func.vmap`` over the worker axis of ``grad(functional_call(model, x,
  batch))``; it handles any model ``vmap`` can batch, and models held per worker
  (``x [n, d]``, e.g. DGA), but turns convolutions into slow grouped convolutions on CPU.
- ``loop``: the same function once per worker (for models ``vmap`` cannot batch,
  ``Task.vectorise = False``).

:meth:`WorkerGradients.select` picks ``grouped`` when the model has a rule for every
parameter and its gradients match ``vmap``'s on a probe batch, else the fallback, and says
which and why (the run's ``config.yaml``, ``gradients``). ``make bench`` measures each
engine against one plain forward/backward over the same n·B samples.

Every engine runs its forward and backward passes under ``torch.autocast`` when given an
``autocast`` dtype (``--autocast bf16``, docs/gradients.md "Mixed precision"); the
gradients it returns are float32 whatever the passes used.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap

from decobench.training.flat import FlatLayout
from decobench.training.grouped_gradients import GroupedGradients

LossFn = Callable[[Tensor, Tensor], Tensor]
ENGINES = ("grouped", "vmap", "loop")
AUTOCAST: dict[str, torch.dtype | None] = {"off": None, "bf16": torch.bfloat16}
"""``--autocast`` value -> the dtype of ``torch.autocast`` (None: float32 throughout)."""
CHECK_RTOL = 1e-3
"""Tolerance of the one-time check of ``grouped`` against ``vmap`` (relative to the
largest gradient entry of each worker): float32 summation order differs, nothing else."""
PROBE_SAMPLES = 4
"""Samples per worker the check runs on (the first of the probe batch): a layer's rule
does not depend on the batch size, and the check then costs a few samples' forward and
backward passes, not a whole step's twice (the models have no dropout or other randomness,
so the probe draws nothing from the RNG)."""


def on_gpu(tensor: Tensor) -> bool:
    """Whether ``tensor`` lives on a CUDA GPU (where ``auto`` checks the engine's memory)."""
    return tensor.device.type == "cuda"


class WorkerGradients:
    """``gradients(x, inputs, targets) -> (g [n, d], loss [n])``.

    ``x`` is ``[d]`` (shared model) or ``[n, d]`` (one model per worker); ``inputs`` and
    ``targets`` carry a leading worker axis ``[n, B, ...]``. ``engine``: ``auto`` (the
    fastest that applies, decided by :meth:`select`; ``vmap`` or ``loop`` until then) or
    one of :data:`ENGINES`. Buffers (e.g. BatchNorm statistics) are read from the template
    module and not updated. ``autocast``: the dtype the forward and backward passes run in
    under ``torch.autocast`` (None: float32); parameters and gradients stay float32.
    """

    def __init__(self, module: nn.Module, layout: FlatLayout, loss_fn: LossFn,
                 vectorise: bool = True, engine: str = "auto",
                 autocast: torch.dtype | None = None) -> None:
        if engine not in ("auto", *ENGINES):
            raise ValueError(f"unknown gradient engine {engine!r}; choose auto or "
                             f"{', '.join(ENGINES)}")
        self.module, self.layout, self.loss_fn = module, layout, loss_fn
        self.vectorise, self.autocast = vectorise, autocast
        self.buffers = dict(module.named_buffers())
        self._grad = grad_and_value(self._loss)
        self.fallback = "vmap" if vectorise else "loop"
        self.requested = engine
        self.engine = self.fallback if engine == "auto" else engine
        self.reason = "not selected yet"
        self._grouped: GroupedGradients | None = None
        if engine == "grouped" or (engine == "auto" and vectorise):
            try:
                self._grouped = GroupedGradients(module, layout, loss_fn, self.buffers)
            except ValueError as exc:
                if engine == "grouped":
                    raise
                self.reason = str(exc)

    def _mixed(self, device: torch.device) -> AbstractContextManager[Any]:
        """``torch.autocast`` to :attr:`autocast` on ``device``'s type (off when None)."""
        return torch.autocast(device.type, dtype=self.autocast,
                              enabled=self.autocast is not None)

    def _loss(self, flat: Tensor, inputs: Tensor, targets: Tensor) -> Tensor:
        params = self.layout.unflatten(flat)
        with self._mixed(flat.device):
            outputs = functional_call(self.module, (params, self.buffers), (inputs,))
            return self.loss_fn(outputs, targets).float()

    def select(self, params: Tensor, inputs: Tensor, targets: Tensor) -> dict[str, Any]:
        """Choose the engine on a probe batch (``auto``) and describe the choice:
        ``{"engine", "reason"}`` for the run's ``config.yaml``. ``grouped`` is chosen when
        every parameter has a rule, the model is shared (``params [d]``) and its gradients
        equal ``vmap``'s on the probe (:data:`CHECK_RTOL`). On a GPU, ``auto`` then runs
        the chosen engine once on the probe, and takes ``loop`` (one worker's batch at a
        time) when the n workers' batches together do not fit in the GPU's memory (e.g.
        ViT-B/16's 4 x 128 images in fp32)."""
        if self.requested != "auto" or not on_gpu(params):
            return self._select(params, inputs, targets)
        try:
            choice = self._select(params, inputs, targets)
            if self.engine != "loop":
                self(params, inputs, targets)
            return choice
        except torch.cuda.OutOfMemoryError:
            self.engine, self.reason = "loop", (
                "the n workers' batches in one pass (grouped or vmap) ran out of GPU memory on "
                "a probe batch; one forward/backward per worker")
            return {"engine": self.engine, "reason": self.reason}
        finally:
            torch.cuda.empty_cache()

    def _select(self, params: Tensor, inputs: Tensor, targets: Tensor) -> dict[str, Any]:
        if params.dim() == 2 and self.requested in ("auto", "grouped"):
            self.engine, self.reason = self.fallback, ("one model per worker: the workers' "
                                                       "forward passes differ")
        elif self.requested != "auto":
            self.reason = "requested (--gradient-engine)"
        elif self._grouped is not None:
            problem = self._check(params, inputs, targets)
            if problem is None:
                self.engine, self.reason = "grouped", (
                    "every parameter has a per-worker gradient rule; matched vmap on a "
                    "probe batch")
            else:
                self.engine, self.reason = self.fallback, problem
        elif not self.vectorise:
            self.reason = "the task sets vectorise = False"
        return {"engine": self.engine, "reason": self.reason}

    def _check(self, params: Tensor, inputs: Tensor, targets: Tensor) -> str | None:
        assert self._grouped is not None
        inputs, targets = inputs[:, :PROBE_SAMPLES], targets[:, :PROBE_SAMPLES]
        try:
            with self._mixed(params.device):
                fast, fast_loss = self._grouped(params, inputs, targets)
        except torch.cuda.OutOfMemoryError:
            raise                 # select() takes the per-worker loop
        except Exception as exc:  # noqa: BLE001 - any failure means: use the fallback
            return f"the grouped engine failed on a probe batch ({type(exc).__name__}: {exc})"
        ref, ref_loss = vmap(self._grad, in_dims=(None, 0, 0))(params, inputs, targets)
        fast, ref = fast.detach(), ref.detach()
        scale = ref.abs().amax(dim=1, keepdim=True).clamp_min(1e-30)
        worst = float(((fast - ref).abs() / scale).max())
        if not worst <= CHECK_RTOL or not torch.allclose(fast_loss, ref_loss, rtol=1e-5,
                                                         atol=1e-6):
            return (f"the grouped engine's gradients differ from vmap's on a probe batch "
                    f"(largest difference {worst:.2e} of a worker's largest entry)")
        return None

    def __call__(self, params: Tensor, inputs: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        params_dim = 0 if params.dim() == 2 else None
        if self.engine == "grouped" and params_dim is None:
            assert self._grouped is not None
            with self._mixed(params.device):
                return self._grouped(params, inputs, targets)
        if self.engine != "loop":
            return vmap(self._grad, in_dims=(params_dim, 0, 0))(params, inputs, targets)
        results = [self._grad(params if params_dim is None else params[i], inputs[i], targets[i])
                   for i in range(inputs.shape[0])]
        return (torch.stack([g for g, _ in results]), torch.stack([v for _, v in results]))

    @torch.no_grad()
    def forward(self, params: Tensor, inputs: Tensor) -> Tensor:
        """Model outputs at flat parameters ``params`` ([d]) for a plain batch (in the
        autocast dtype when there is one: callers that sum over them cast to float32)."""
        with self._mixed(params.device):
            return functional_call(self.module, (self.layout.unflatten(params), self.buffers),
                                   (inputs,))
