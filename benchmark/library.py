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
(docs/design.md §2), the compressed message is all-gathered in the background, and what
``.grad`` receives at iteration t is u_t = Σ_{s: s+τ_s=t} (1/n) Σ_i Δ^i_s: the stale, averaged
update the benchmark's DD-EF-SGD applies; your optimizer then steps on it (plain SGD is the
paper's DD-EF-SGD; momentum on compressed updates: docs/library.md). With ``deco-sgd`` the
ranks measure compute time, transfer time and latency of every message and re-plan (δ, τ)
every ``deco_interval`` iterations (``latency_mechanism="kernel"``: the latency is the
collective's fixed cost, timed on a one-element tensor, per latency hop).

Requirements: ``torch.distributed`` initialised (gloo or NCCL), the same model and the same
number of iterations on every rank.

Checkpointing (as PyTorch's PowerSGD state): ``state_dict()`` after an iteration, on every
rank, and ``load_state_dict(state)`` on a fresh object before the first iteration after a
restart; the run then continues as if it had not stopped (docs/library.md, "Checkpointing").
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

from decobench.compression.compressors import Update
from decobench.emulated.comm import Arrival
from decobench.emulated.transport import DistributedTransport, SentRecord
from decobench.errors import DecobenchError
from decobench.methods import DDEFSGD, Method, MethodContext, Observation, get_method_spec
from decobench.methods.base import summed
from decobench.methods.controllers import (
    Controller,
    DecoController,
    PlanRecord,
    Schedule,
    StaticController,
)
from decobench.methods.optimizer import OptimizerConfig
from decobench.netem.generators import constant
from decobench.planning.estimators import NetworkEstimate
from decobench.planning.planner import Plan


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
        self.d, self.method_name, self.rank, self.workers = d, method, rank, world
        self.device = device
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
        self.group = dist.new_group(backend=dist.get_backend())
        self.transport = DistributedTransport(rank, world, "ring", lambda _: link, "kernel",
                                              timeout_s, device, group=self.group)
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
        thread; call once after the last iteration, on every rank. It ends with a barrier on
        the library's own group, so no rank tears its process groups down (or exits) while
        another still receives the last message: under load, a rank that did so once made
        the slower one abort in gloo ("terminate called without an active exception")."""
        import torch.distributed as dist

        self.transport.finish()
        dist.barrier(group=self.group)

    def state_dict(self) -> dict[str, Any]:
        """Everything the next iteration reads, in plain types (``torch.load`` reads it with
        ``weights_only=True``): ``agreed``, the same on every rank (the iteration, the
        controller's estimates and plan, the observations it has not read yet, the messages
        in flight with their mean updates, the sent-message records) and ``rank_local``
        (the error-feedback memory, this rank's measured times and clock).

        Settles the background thread first: waits until the collective of every message
        in flight has completed (every rank has sent them already; nothing is applied).
        Call it on every rank after the same iteration, once its step has returned."""
        transport = self.transport
        assert transport.comm is not None
        with transport.evaluation_pause():       # the wait is not compute time
            arrivals = {s: transport.comm.peek(s) for s in transport.unapplied}
        times = {s: (a.tx_start_s, a.tx_end_s, a.arrive_s) for s, a in arrivals.items()}
        report = (None if transport.report_next is None
                  else transport.sent.get(transport.report_next))
        if report is not None and report.arrival is not None:   # the next header's report
            a = report.arrival
            times[a.iteration] = (a.tx_start_s, a.tx_end_s, a.arrive_s)
        memory = self.method.error_feedback
        return {
            "method": self.method_name, "d": self.d, "workers": self.workers,
            "rank": self.rank,
            "agreed": {
                "iteration": self.iteration,
                "controller": _controller_state(self.method.controller),
                "observations": [asdict(o) for o in self._observed],
                "sent": {s: {"staleness": r.staleness, "dense": r.dense, "bits": r.bits}
                         for s, r in transport.sent.items()},
                "report_next": transport.report_next,
                "in_flight": {s: {"headers": a.headers,
                                  "controls": [list(c) for c in a.controls],
                                  "values": a.update.values, "indices": a.update.indices}
                              for s, a in arrivals.items()},
            },
            "rank_local": {
                "error_feedback": None if memory is None else memory.memory[0].clone(),
                "times": times, "trace_s": transport.clock.trace_s(),
                "paused_s": transport.clock.paused_s,
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict` (this rank's): before the first iteration, on
        every rank. One collective checks that every rank's state fits and is of the same
        iteration, and sets when training resumes; the messages in flight are then due
        when they were, with the updates they carried."""
        import torch.distributed as dist

        transport = self.transport
        problem = self._unfit(state)
        k = float(state["agreed"]["iteration"]) if problem is None else 0.0
        resume = float(state["rank_local"]["trace_s"]) if problem is None else 0.0
        agreement = torch.tensor([float(problem is not None), k, -k, resume],
                                 dtype=torch.float64, device=self.device)
        dist.all_reduce(agreement, op=dist.ReduceOp.MAX, group=transport.group)
        elsewhere, latest, first, resume = agreement.tolist()
        if problem is not None:
            raise DecobenchError(problem)
        if elsewhere:
            raise DecobenchError("another rank's state does not fit (its error says why)")
        if latest != -first:
            raise DecobenchError(f"the ranks' states are of iterations {-first:.0f} to "
                                 f"{latest:.0f}: load the states every rank saved after the "
                                 "same iteration")
        agreed, local = state["agreed"], state["rank_local"]
        if self.method.error_feedback is not None:
            self.method.error_feedback.memory[0].copy_(local["error_feedback"])
        _load_controller(self.method.controller, agreed["controller"])
        self._observed = [Observation(**o) for o in agreed["observations"]]
        sent = {int(s): SentRecord(**r) for s, r in agreed["sent"].items()}
        times = local["times"]

        def arrival(s: int, update: Update, headers: list[dict[str, float]],
                    controls: list[bytes]) -> Arrival:
            return Arrival(s, sent[s].dense, headers, update, *times[s], controls=controls)

        report = agreed["report_next"]
        if report is not None and report in times and report in sent:
            # applied before the stop: only its times are read (the next header reports them)
            applied = Update(torch.zeros(0, device=self.device),
                             torch.zeros(0, dtype=torch.long, device=self.device), self.d)
            sent[report].arrival = arrival(report, applied, [], [])
        in_flight = {int(s): arrival(int(s), Update(m["values"].to(self.device),
                                                    None if m["indices"] is None
                                                    else m["indices"].to(self.device), self.d),
                                     m["headers"], [bytes(c) for c in m["controls"]])
                     for s, m in agreed["in_flight"].items()}
        transport.sent, transport.unapplied = sent, sorted(in_flight)
        transport.report_next = report
        assert transport.comm is not None
        transport.comm.restore(in_flight)        # nothing was sent yet: safe while it runs
        # the clock goes on from the latest rank's stop, from the same moment on every rank
        transport.clock.origin = time.monotonic() - resume
        transport.clock.paused_s = float(local["paused_s"])
        self.iteration = int(agreed["iteration"])
        transport._busy_from = None              # the next compute time starts now
        transport.observations(self.iteration)

    def _unfit(self, state: dict[str, Any]) -> str | None:
        """Why this rank cannot load ``state`` (None: it can)."""
        if not isinstance(state, dict) or "agreed" not in state:
            return ("this is not a state_dict() of decobench.library (it has no 'agreed' "
                    "part): pass the dict that state_dict() returned")
        if self.iteration or self.transport.sent:
            return ("load_state_dict after training started: call it before the first "
                    "iteration after the restart")
        for key, ours in (("method", self.method_name), ("d", self.d),
                          ("workers", self.workers), ("rank", self.rank)):
            if state.get(key) != ours:
                return (f"this state is of {key} {state.get(key)!r}, not {ours!r}: load the "
                        f"state rank {self.rank} saved, with the same model, method and "
                        "world size")
        kind = _controller_state(self.method.controller)["kind"]
        if state["agreed"]["controller"]["kind"] != kind:
            return (f"this state holds a {state['agreed']['controller']['kind']} (δ, τ) "
                    f"controller, this method a {kind} one")
        return None


def _controller_state(controller: Controller) -> dict[str, Any]:
    """The (δ, τ) controller's state: nothing for a fixed plan (its options hold it); DeCo's
    current plan, when it was made and from which estimate, and the smoothed â, b̂, T̂."""
    if isinstance(controller, StaticController):
        return {"kind": "static"}
    if isinstance(controller, DecoController):
        last = controller.history[-1] if controller.history else None
        estimator = controller.estimator
        return {"kind": "deco",
                "schedule": (controller._current.delta, controller._current.staleness),
                "planned_at": controller._last_plan_at, "warned": controller._warned,
                "plan": None if last is None else {"iteration": last.iteration,
                                                   "estimate": asdict(last.estimate),
                                                   "plan": asdict(last.plan)},
                "estimator": {"bandwidth_bps": estimator._bandwidth.value,
                              "latency_s": estimator._latency.value,
                              "compute_s": estimator._compute.value}}
    raise DecobenchError(f"cannot checkpoint a {type(controller).__name__} (δ, τ) controller")


def _load_controller(controller: Controller, state: dict[str, Any]) -> None:
    """Take back :func:`_controller_state` (of the same kind)."""
    if not isinstance(controller, DecoController):
        return
    delta, staleness = state["schedule"]
    controller._current = Schedule(float(delta), int(staleness))
    controller._last_plan_at, controller._warned = state["planned_at"], state["warned"]
    last = state["plan"]
    controller.history = [] if last is None else [PlanRecord(
        last["iteration"], NetworkEstimate(**last["estimate"]), Plan(**last["plan"]))]
    estimator = controller.estimator
    for ewma, name in ((estimator._bandwidth, "bandwidth_bps"),
                       (estimator._latency, "latency_s"), (estimator._compute, "compute_s")):
        ewma._value = state["estimator"][name]


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

    def state_dict(self) -> dict[str, Any]:
        """:meth:`DecoCommunication.state_dict`, after ``step(optimizer)`` returned."""
        return self.comm.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """:meth:`DecoCommunication.load_state_dict`, before the first ``step``."""
        self.comm.load_state_dict(state)

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

    def state_dict(self) -> dict[str, Any]:
        """:meth:`DecoCommunication.state_dict`, once the iteration's backward (which runs
        the hook) has returned; the error memory and messages keep the model's order."""
        return self.comm.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """:meth:`DecoCommunication.load_state_dict`, before the first backward."""
        self.comm.load_state_dict(state)

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
