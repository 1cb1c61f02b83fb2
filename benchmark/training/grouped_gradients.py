"""Per-worker gradients from one plain forward/backward over the n·B samples of all workers.

Worker i's gradient is the gradient of its own loss f_i (the mean over its B samples), so
with L = Σ_i f_i one backward pass gives every sample's output gradient already scaled for
its worker. A layer's weight gradient is a sum over samples of (input, output gradient)
products; summing over the samples of each worker separately gives the n per-worker
gradients at the cost of the one summed gradient a plain backward computes (the trick
behind per-sample gradient libraries such as Opacus, here per group of B samples).

One pass therefore:

1. runs the model once on ``[n·B, ...]`` with forward hooks recording each parametrised
   layer's input and putting a tensor hook on its output;
2. asks autograd for the gradients of L with respect to the first layers' outputs only
   (``torch.autograd.grad``), so the backward pass computes input gradients down the
   network and no weight gradient at all;
3. as the backward pass reaches each layer, its tensor hook computes the layer's n
   per-worker weight gradients with its :data:`RULES` entry from its input and output
   gradient, reshaped ``[n, B·…, ·]``.

Rules exist for ``nn.Linear``, ``nn.Conv1d/2d/3d`` (zero padding), ``nn.Embedding``,
``nn.LayerNorm`` and ``transformers``' ``Conv1D``; outside packages add theirs with
:func:`register_rule`. A parameter owned directly by a module without a rule (e.g. ViT's
``cls_token`` and ``pos_embed``) is handled when its first dimension is 1 and the model
broadcasts it over the batch: it is replaced for the pass by a ``[n·B, ...]`` copy whose
gradient holds one row per sample. :func:`unsupported` says why a model cannot use this
engine; :class:`decobench.training.gradients.WorkerGradients` then falls back to ``vmap`` and
checks this engine against ``vmap`` once before using it (a model that uses a layer's
weight outside the layer's forward would otherwise be wrong silently).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from decobench.training.flat import FlatLayout

LossFn = Callable[[Tensor, Tensor], Tensor]
Rule = Callable[[nn.Module, Tensor, Tensor, int], dict[str, Tensor]]
"""``rule(module, input, output_grad, n) -> {parameter name: [n, *shape] gradients}``;
``input`` and ``output_grad`` have the n·B samples on their first axis, worker by worker."""

RULES: dict[type, Rule] = {}
"""Per-worker weight-gradient rules by module class (exact class or a base class)."""


def register_rule(cls: type, rule: Rule) -> None:
    """Let :class:`GroupedGradients` handle the parameters of modules of class ``cls``."""
    RULES[cls] = rule


def _groups(t: Tensor, n: int, keep: int) -> Tensor:
    """``[n·B, ..., last keep dims]`` as ``[n, B·..., last keep dims]``."""
    return t.reshape(n, -1, *t.shape[t.dim() - keep:])


def _linear(module: nn.Module, x: Tensor, g: Tensor, n: int) -> dict[str, Tensor]:
    """y = x Wᵀ + b: ∂f_i/∂W = Σ_{s∈i} g_s x_sᵀ, ∂f_i/∂b = Σ_{s∈i} g_s."""
    xg, gg = _groups(x, n, 1), _groups(g, n, 1)
    out = {"weight": torch.bmm(gg.transpose(1, 2), xg)}
    if getattr(module, "bias", None) is not None:
        out["bias"] = gg.sum(1)
    return out


def _hf_conv1d(module: nn.Module, x: Tensor, g: Tensor, n: int) -> dict[str, Tensor]:
    """transformers' Conv1D, y = x W + b with W ``[in, out]``."""
    xg, gg = _groups(x, n, 1), _groups(g, n, 1)
    return {"weight": torch.bmm(xg.transpose(1, 2), gg), "bias": gg.sum(1)}


def _conv(module: nn.Module, x: Tensor, g: Tensor, n: int) -> dict[str, Tensor]:
    """∂f_i/∂W from aten's convolution backward on worker i's samples (weight only)."""
    conv: Any = module
    b = x.shape[0] // n
    has_bias = conv.bias is not None
    weights, biases = [], []
    for i in range(n):
        _, gw, gb = torch.ops.aten.convolution_backward(
            g[i * b:(i + 1) * b], x[i * b:(i + 1) * b], conv.weight,
            [conv.out_channels] if has_bias else None, list(conv.stride), list(conv.padding),
            list(conv.dilation), False, [0] * len(conv.stride), conv.groups,
            [False, True, has_bias])
        weights.append(gw)
        biases.append(gb)
    out = {"weight": torch.stack(weights)}
    if has_bias:
        out["bias"] = torch.stack(biases)
    return out


def _embedding(module: nn.Module, x: Tensor, g: Tensor, n: int) -> dict[str, Tensor]:
    """Row r of ∂f_i/∂E is the sum of the output gradients of worker i's tokens equal to r."""
    emb: Any = module
    dim = emb.embedding_dim
    gg = _groups(g, n, 1)
    idx = x.reshape(n, -1)
    grad = torch.zeros(n, emb.num_embeddings, dim, dtype=g.dtype, device=g.device)
    flat = grad.view(n * emb.num_embeddings, dim)
    offsets = (torch.arange(n, device=idx.device) * emb.num_embeddings).unsqueeze(1)
    flat.index_add_(0, (idx + offsets).reshape(-1), gg.reshape(-1, dim))
    if emb.padding_idx is not None:
        grad[:, emb.padding_idx] = 0
    return {"weight": grad}


def _layer_norm(module: nn.Module, x: Tensor, g: Tensor, n: int) -> dict[str, Tensor]:
    """y = x̂ ⊙ γ + β: ∂f_i/∂γ = Σ_{s∈i} g_s ⊙ x̂_s, ∂f_i/∂β = Σ_{s∈i} g_s."""
    norm: Any = module
    shape = tuple(norm.normalized_shape)
    x_hat = F.layer_norm(x, shape, None, None, norm.eps)
    keep = len(shape)
    out = {"weight": _groups(g * x_hat, n, keep).sum(1)}
    if norm.bias is not None:
        out["bias"] = _groups(g, n, keep).sum(1)
    return out


register_rule(nn.Linear, _linear)
for _cls in (nn.Conv1d, nn.Conv2d, nn.Conv3d):
    register_rule(_cls, _conv)
register_rule(nn.Embedding, _embedding)
register_rule(nn.LayerNorm, _layer_norm)


def _rule_for(module: nn.Module) -> Rule | None:
    for cls in type(module).__mro__:
        if cls in RULES:
            return RULES[cls]
    if "transformers" in sys.modules:
        from transformers.pytorch_utils import Conv1D

        if isinstance(module, Conv1D):
            return _hf_conv1d
    return None


def _rule_problem(module: nn.Module) -> str | None:
    """Why a module with a rule cannot use it (options the rule does not implement)."""
    if isinstance(module, nn.modules.conv._ConvNd):
        if module.padding_mode != "zeros" or isinstance(module.padding, str) \
                or module.transposed:
            return "padding other than explicit zeros, or a transposed convolution"
    if isinstance(module, nn.Embedding) and (module.max_norm is not None
                                             or module.scale_grad_by_freq or module.sparse):
        return "max_norm, scale_grad_by_freq or sparse gradients"
    return None


@dataclass(frozen=True)
class _Owner:
    module_name: str
    module: nn.Module
    rule: Rule | None
    params: tuple[tuple[str, str], ...]    # (local name, layout name)


def _owners(module: nn.Module, layout: FlatLayout) -> list[_Owner]:
    by_id = {id(p): name for name, p in module.named_parameters() if name in layout.names}
    owners = []
    for module_name, sub in module.named_modules(remove_duplicate=False):
        own = [(local, by_id[id(p)]) for local, p in sub.named_parameters(recurse=False)
               if id(p) in by_id]
        if own:
            owners.append(_Owner(module_name, sub, _rule_for(sub), tuple(own)))
    return owners


def unsupported(module: nn.Module, layout: FlatLayout) -> str | None:
    """Why ``module`` cannot use :class:`GroupedGradients` (None: it can)."""
    for owner in _owners(module, layout):
        what = f"{owner.module_name or 'the model'} ({type(owner.module).__name__})"
        if owner.rule is None:
            wide = [local for local, name in owner.params
                    if layout.shapes[layout.names.index(name)][:1] != (1,)]
            if wide:
                return (f"{what} owns parameters without a per-worker gradient rule "
                        f"({', '.join(wide)}); register one with "
                        "decobench.training.grouped_gradients.register_rule")
        elif (problem := _rule_problem(owner.module)) is not None:
            return f"{what}: {problem}"
    return None


@dataclass
class _Pass:
    """One call's state: the ``[n, d]`` result being filled and the layers seen so far."""

    n: int
    samples: int
    flat: Tensor
    written: set[str]
    roots: list[tuple[_Owner, Tensor, Tensor]]      # layers whose input needs no gradient
    outputs: list[tuple[_Owner, Any, int]]          # (owner, weakref to output, version)


class GroupedGradients:
    """``grouped(x, inputs, targets) -> (g [n, d], loss [n])`` for a shared model ``x [d]``
    (see the module docstring); raises ``ValueError`` on a model :func:`unsupported`
    rejects.

    The output gradients are taken by tensor hooks as the backward pass reaches each layer,
    and turned into weight gradients there, so neither the outputs nor their gradients are
    kept alive; the backward pass is asked only for the gradients of the first layers'
    outputs (their inputs need no gradient) and of the broadcast parameters, which every
    other layer's output lies upstream of.
    """

    def __init__(self, module: nn.Module, layout: FlatLayout, loss_fn: LossFn,
                 buffers: dict[str, Tensor]) -> None:
        problem = unsupported(module, layout)
        if problem is not None:
            raise ValueError(problem)
        self.module, self.layout, self.loss_fn, self.buffers = module, layout, loss_fn, buffers
        self.offsets = dict(zip(layout.names, _cumulative(layout.sizes), strict=True))
        owners = _owners(module, layout)
        self.ruled = {id(o.module): o for o in owners if o.rule is not None}
        self.broadcast = [name for o in owners if o.rule is None for _, name in o.params]
        self._pass: _Pass | None = None

    def _record(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        """Forward hook of a layer with a rule (see the class docstring). A call shared by
        the whole batch (first dimension 1, e.g. GPT-2's position embedding) is expanded to
        one row per sample, so its output gradient keeps the samples apart."""
        state = self._pass
        if state is None or not isinstance(output, Tensor) or not output.requires_grad:
            return None
        owner = self.ruled[id(module)]
        if not args or not isinstance(args[0], Tensor):
            raise RuntimeError(f"{owner.module_name} was called without a positional input "
                               "tensor")
        x, replaced = args[0].detach(), None
        if output.shape[:1] == (1,) and state.samples > 1 and x.shape[:1] == (1,):
            x = x.expand(state.samples, *x.shape[1:])
            output = replaced = output.expand(state.samples, *output.shape[1:])
        state.outputs.append((owner, weakref.ref(output), output._version))
        if args[0].requires_grad:
            output.register_hook(lambda g: self._apply(state, owner, x, g))
        else:
            state.roots.append((owner, x, output))
        return replaced

    def _apply(self, state: _Pass, owner: _Owner, x: Tensor, g: Tensor) -> None:
        """A layer's n per-worker weight gradients, added into the result."""
        assert owner.rule is not None
        with torch.no_grad():
            per_param = owner.rule(owner.module, x, g, state.n)
            for local, name in owner.params:
                if local in per_param:
                    self._add(state, name, per_param[local])

    def _add(self, state: _Pass, name: str, grad: Tensor) -> None:
        start = self.offsets[name]
        part = state.flat[:, start:start + grad[0].numel()]
        if name in state.written:
            part += grad.reshape(state.n, -1)
        else:                                     # the first write copies (no zero fill)
            part.copy_(grad.reshape(state.n, -1))
            state.written.add(name)

    def __call__(self, params: Tensor, inputs: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        n, b = inputs.shape[0], inputs.shape[1]
        leaf = params.detach().requires_grad_(True)
        tensors = self.layout.unflatten(leaf)
        if n == 1:                    # one worker: its gradient is the plain one (no rules)
            with torch.enable_grad():
                loss = self.loss_fn(functional_call(self.module, (tensors, self.buffers),
                                                    (inputs[0],)), targets[0])
            (grad,) = torch.autograd.grad(loss, leaf)
            return grad.unsqueeze(0), loss.detach().unsqueeze(0)
        expanded = {}
        for name in self.broadcast:             # one row per sample (see the module docstring)
            copy = tensors[name].detach().expand(n * b, *tensors[name].shape[1:]).clone()
            expanded[name] = tensors[name] = copy.requires_grad_(True)
        state = _Pass(n=n, samples=n * b, roots=[], outputs=[], written=set(),
                      flat=torch.empty(n, self.layout.d, dtype=params.dtype,
                                       device=params.device))
        self._pass = state
        hooks = [owner.module.register_forward_hook(self._record)   # for this pass only
                 for owner in self.ruled.values()]
        try:
            with torch.enable_grad():
                outputs = functional_call(self.module, (tensors, self.buffers),
                                          (inputs.reshape(n * b, *inputs.shape[2:]),))
                # unbind, not indexing: one backward node for all n slices (n indexing
                # nodes would each fill a zero gradient the size of all outputs)
                per_worker = outputs.reshape(n, b, *outputs.shape[1:]).unbind(0)
                losses = torch.stack([self.loss_fn(out, target) for out, target
                                      in zip(per_worker, targets.unbind(0), strict=True)])
        finally:
            self._pass = None
            for hook in hooks:
                hook.remove()
        for owner, ref, version in state.outputs:
            output = ref()
            if output is not None and output._version != version:
                raise RuntimeError(f"{owner.module_name}'s output was modified in place; "
                                   "its output gradient would be wrong")
        del outputs, per_worker
        roots = state.roots
        state.roots = []
        wrt = [output for _, _, output in roots] + list(expanded.values())
        grads = torch.autograd.grad(losses.sum(), wrt, allow_unused=True) if wrt else ()
        for (owner, x, _), g in zip(roots, grads, strict=False):
            if g is not None:
                self._apply(state, owner, x, g)
        with torch.no_grad():
            for (name, copy), g in zip(expanded.items(), grads[len(roots):], strict=True):
                if g is not None:
                    self._add(state, name, g.reshape(n, b, *copy.shape[1:]).sum(1))
            for name, size in zip(self.layout.names, self.layout.sizes, strict=True):
                if name not in state.written:          # not used by this loss: zero
                    state.flat[:, self.offsets[name]:self.offsets[name] + size] = 0
        return state.flat, losses.detach()


def _cumulative(sizes: tuple[int, ...]) -> list[int]:
    out, total = [], 0
    for size in sizes:
        out.append(total)
        total += size
    return out
