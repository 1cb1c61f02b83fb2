"""DeCo-SGD (or any DD-EF-SGD method) in your own distributed training.

Two shapes, both built from the benchmark's own objects (the method's worker half: the
compressor, error feedback and (δ, τ) controller with DeCo's estimators and planner; the
emulated backend's :class:`~decobench.emulated.transport.DistributedTransport`: background
collectives of exactly ⌈W/8⌉-byte Top-k frames, each message applied τ iterations after it
was sent, header agreement so every rank re-plans identically):

- :class:`DecoOptimizerStep`, for a loop without DDP (the shape of epfml/powersgd's
  ``optimizer_step``)::

      step = DecoOptimizerStep(model.parameters())            # deco-sgd, defaults
      for x, y in loader:
          loss_fn(model(x), y).backward()
          step(optimizer)                # sends, puts the update due now into .grad, steps
          optimizer.zero_grad()
      step.close()

- :func:`deco_hook` with :class:`DecoHookState`, a DistributedDataParallel communication
  hook (the shape of PyTorch's PowerSGD hook)::

      model = DDP(model, bucket_cap_mb=1024)                  # one bucket: global Top-k
      state = DecoHookState(model.parameters())
      model.register_comm_hook(state, deco_hook)

In both, each rank's gradient g goes through error feedback and Top-k at the current δ
(deco-sgd.md §2), the compressed message is all-gathered in the background, and what
``.grad`` receives at iteration t is u_t = Σ_{s: s+τ_s=t} (1/n) Σ_i Δ^i_s: the stale, averaged
update the benchmark's DD-EF-SGD applies; your optimizer then steps on it (plain SGD is the
paper's DD-EF-SGD; momentum on compressed updates: docs/library.md). With ``deco-sgd`` the
ranks measure compute time, transfer time and latency of every message and re-plan (δ, τ)
every ``deco_interval`` iterations (``latency_mechanism="kernel"``: the latency is the
collective's fixed cost, timed on a one-element tensor, per latency hop).

Requirements: ``torch.distributed`` initialised (gloo or NCCL), the same model and the same
number of iterations on every rank.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from decobench.emulated.transport import DistributedTransport
from decobench.errors import DecobenchError
from decobench.methods import DDEFSGD, Method, MethodContext, Observation, get_method_spec
from decobench.methods.base import summed
from decobench.netem.generators import constant
from decobench.optimizer import OptimizerConfig


@dataclass(frozen=True)
class StepInfo:
    """What one iteration sent: δ, τ, bits per worker, and how many messages it applied."""

    iteration: int
    delta: float
    staleness: int
    bits_per_worker: int
    applied_messages: int
    log: dict[str, Any]


class DecoCommunication:
    """The communication of one parameter vector of d values: the method's worker half
    over a :class:`DistributedTransport` on the default process group; :meth:`exchange`
    takes this rank's flat gradient and returns the flat update due now."""

    def __init__(self, d: int, device: torch.device, *, method: str = "deco-sgd",
                 options: dict[str, Any] | None = None, seed: int = 0,
                 timeout_s: float = 300.0) -> None:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise DecobenchError("torch.distributed is not initialised: call "
                                 "torch.distributed.init_process_group first (torchrun sets "
                                 "the environment)")
        spec = get_method_spec(method)
        if spec.emulation is not None:
            raise DecobenchError(f"method {method} cannot run over real collectives: "
                                 f"{spec.emulation}")
        rank, world = dist.get_rank(), dist.get_world_size()
        self.d = d
        # the optimizer of the method is never stepped here: your optimizer steps on .grad
        unused = OptimizerConfig(lr=1.0, momentum=0.0, weight_decay=0.0, schedule="constant",
                                 warmup_iters=0, total_iters=1)
        self.method: Method = spec.build(
            MethodContext(d=d, workers=world, topology="ring", optimizer=unused,
                          device=device, seed=seed, gradient_rows=1, first_worker=rank),
            spec.options(**(options or {})))
        if not isinstance(self.method, DDEFSGD):
            raise DecobenchError(f"method {method} is not a DD-EF-SGD method: the library "
                                 "hands your optimizer the sum of the updates due, which is "
                                 "what DD-EF-SGD's aggregation steps on")
        link = constant(1e6, 0.0, name="the real network (latency from the kernel)")
        # a process group of its own: the background thread's collectives never interleave
        # with yours (or DDP's) on the default group
        group = dist.new_group(backend=dist.get_backend())
        self.transport = DistributedTransport(rank, world, "ring", lambda _: link, "kernel",
                                              timeout_s, device, group=group)
        self.transport.start(d)
        self.iteration = 0
        self._no_params = torch.zeros(0, device=device)
        self._observed: Sequence[Observation] = self.transport.observations(0)

    def exchange(self, gradient: Tensor) -> tuple[Tensor, StepInfo]:
        """Send this rank's flat ``gradient`` (``[d]``) of the current iteration; returns the
        update due now (``[d]``, the mean over the ranks) and what was sent."""
        if gradient.numel() != self.d:
            raise DecobenchError(f"expected a gradient of {self.d} values, got "
                                 f"{gradient.numel()}")
        k = self.iteration
        for observation in self._observed:
            self.method.observe(observation)
        flat = gradient.detach().reshape(1, -1).to(torch.float32)
        sent = self.method.send(k, self._no_params, flat)    # DD-EF-SGD's send reads only g
        self.transport.submit(k, sent, float("nan"))
        due = self.transport.due(k)
        self.transport.losses()                  # the benchmark's rows need them; not here
        update = summed(due, torch.zeros(self.d, dtype=torch.float32, device=gradient.device))
        self.iteration = k + 1
        # the next iteration's compute starts now: the transport times it from here
        self._observed = self.transport.observations(k + 1)
        result = sent.result(len(due))
        return update, StepInfo(k, result.delta, result.staleness, result.bits_per_worker,
                                result.applied_messages, result.log)

    def close(self) -> None:
        """Wait for the messages still in flight (never applied) and stop the background
        thread; call once after the last iteration, on every rank."""
        self.transport.finish()


def _flat_grads(params: Sequence[Tensor]) -> Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                      for p in params])


def _write_grads(params: Sequence[Tensor], flat: Tensor) -> None:
    offset = 0
    for p in params:
        n = p.numel()
        chunk = flat[offset: offset + n].view_as(p).to(p.dtype)
        if p.grad is None:
            p.grad = chunk.clone()
        else:
            p.grad.copy_(chunk)
        offset += n


class DecoOptimizerStep:
    """``step(optimizer)`` after ``loss.backward()``: this rank's gradients go out compressed
    (error feedback, Top-k at the current δ), ``.grad`` receives the averaged update due now
    (τ iterations stale), then ``optimizer.step()``. Returns :class:`StepInfo`.

    ``method``: ``deco-sgd`` (default; δ, τ re-planned from measurements), ``dd-ef-sgd``
    (static ``options={"delta": ..., "tau": ...}``), ``cocktail-sgd-topk`` or ``d-sgd``;
    ``options``: that method's options (``decobench run --method M --help``).
    """

    def __init__(self, params: Iterable[Tensor], *, method: str = "deco-sgd",
                 options: dict[str, Any] | None = None, seed: int = 0,
                 timeout_s: float = 300.0) -> None:
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise DecobenchError("no parameters that require gradients")
        d = sum(p.numel() for p in self.params)
        self.comm = DecoCommunication(d, self.params[0].device, method=method,
                                      options=options, seed=seed, timeout_s=timeout_s)

    def __call__(self, optimizer: torch.optim.Optimizer) -> StepInfo:
        update, info = self.comm.exchange(_flat_grads(self.params))
        _write_grads(self.params, update)
        optimizer.step()
        return info

    def close(self) -> None:
        self.comm.close()


class DecoHookState:
    """State of :func:`deco_hook`: one :class:`DecoCommunication` for DDP's single bucket
    (build DDP with ``bucket_cap_mb`` above the model's size, so Top-k is global and one plan
    covers the model). ``last`` is the :class:`StepInfo` of the latest iteration."""

    def __init__(self, params: Iterable[Tensor], *, method: str = "deco-sgd",
                 options: dict[str, Any] | None = None, seed: int = 0,
                 timeout_s: float = 300.0) -> None:
        params = [p for p in params if p.requires_grad]
        self.d = sum(p.numel() for p in params)
        # the model's own order: DDP re-orders its bucket after the first iteration, but the
        # error-feedback memory and the messages in flight must keep one layout
        self.offsets: dict[int, tuple[int, int]] = {}
        offset = 0
        for p in params:
            self.offsets[id(p)] = (offset, p.numel())
            offset += p.numel()
        self.comm = DecoCommunication(self.d, params[0].device, method=method,
                                      options=options, seed=seed, timeout_s=timeout_s)
        self.last: StepInfo | None = None

    def close(self) -> None:
        self.comm.close()


def deco_hook(state: DecoHookState, bucket: Any) -> torch.futures.Future[Tensor]:
    """DistributedDataParallel communication hook: sends the bucket's gradient compressed
    in the background and returns the averaged update due now (τ iterations stale), which
    DDP writes into ``.grad``."""
    buffer = bucket.buffer()
    if buffer.numel() != state.d:
        raise DecobenchError(
            f"deco_hook needs DDP's gradients in one bucket ({state.d} values; this bucket "
            f"holds {buffer.numel()}): build DDP with bucket_cap_mb above the model's size "
            f"({4 * state.d / 2**20:.1f} MB in fp32)")
    # the bucket's layout (its parameters' gradients, concatenated) -> the model's order
    spans = [state.offsets[id(p)] for p in bucket.parameters()]
    gradient = torch.empty(state.d, dtype=torch.float32, device=buffer.device)
    position = 0
    for start, size in spans:
        gradient[start: start + size] = buffer[position: position + size]
        position += size
    update, state.last = state.comm.exchange(gradient)
    result = torch.cat([update[start: start + size] for start, size in spans])
    future: torch.futures.Future[Tensor] = torch.futures.Future()
    future.set_result(result.to(buffer.dtype))
    return future


def _annotate_hook() -> None:
    """DDP checks the hook's annotations as objects (this module's are strings)."""
    import torch.distributed as dist

    deco_hook.__annotations__ = {"state": DecoHookState, "bucket": dist.GradBucket,
                                 "return": torch.futures.Future[torch.Tensor]}


_annotate_hook()


__all__ = ["DecoCommunication", "DecoHookState", "DecoOptimizerStep", "StepInfo", "deco_hook"]
