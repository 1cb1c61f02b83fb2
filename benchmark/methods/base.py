"""The method interface every training method implements.

A method has two halves, so that one training loop serves every backend over a transport
(:mod:`decobench.training.loop`):

- the **worker half**, :meth:`Method.send`: the gradients of the workers this process holds
  (all n on the simulated backend, one per rank on the emulated one) become the messages they
  send, with the staleness τ they travel with (:class:`Sent`: δ, τ and bits, which the time
  model charges);
- the **aggregation half**, :meth:`Method.receive`: the messages the transport says are due
  at this iteration, each already the mean over the n workers (:class:`Due`), become the
  parameters of the next iteration.

The transport owns what lies between: the collective, the delay until s + τ_s, the clock.
:meth:`Method.step` runs both halves in one process holding all n workers (tests, and the
library's optimizer-step use).
Methods are built from the shared machinery (compressors, error feedback, the delay queue,
the shared optimizer); they never read the network trace: what they know of the network
is the :class:`Observation` of each transfer the backend reports once it has arrived.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from pydantic import BaseModel, ConfigDict
from torch import Tensor

from decobench.compression.compressors import Compressed, Update
from decobench.methods.message_queue import DelayQueue
from decobench.methods.optimizer import OptimizerConfig
from decobench.methods.rules import UpdateRules
from decobench.planning.estimators import NetworkEstimate


class MethodOptions(BaseModel):
    """Per-method options; subclasses add fields (each becomes a ``decobench run`` flag).

    ``added_later``: options added after runs were published whose default reproduces what
    those runs did; a finished run that did not record them still counts as made with the
    default (:func:`changed_options`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    added_later: ClassVar[frozenset[str]] = frozenset()


def changed_options(recorded: Mapping[str, Any], options: MethodOptions) -> dict[str, str]:
    """The options a finished run recorded (its ``config.yaml``'s ``method_options``) that
    today's code resolves otherwise, as ``{name: "recorded -> now"}``: a default changed, an
    option appeared (unless it is in ``added_later`` and holds its default) or went away. A
    run's identity counts the options a suite gives, not the defaults, so a sweep checks this
    before it skips a finished run."""
    now = options.model_dump()
    fields = type(options).model_fields
    changed = {}
    for name, value in now.items():
        if name in recorded:
            if recorded[name] != value:
                changed[name] = f"{recorded[name]!r} -> {value!r}"
        elif not (name in options.added_later and value == fields[name].get_default()):
            changed[name] = f"not recorded -> {value!r}"
    for name in recorded.keys() - now.keys():
        changed[name] = f"{recorded[name]!r} -> no such option"
    return changed


@dataclass(frozen=True)
class MethodContext:
    """What a method may know about the run before it starts.

    ``param_shapes`` lists the flat vector's tensors in order (name, shape);
    ``iterations_per_epoch`` is one pass over each worker's shard; ``max_iters`` the run's
    iteration budget; ``seed`` the run seed (for shared randomness such as a sample mask);
    ``gradient_rows`` how many workers' gradients one process holds (None: all n);
    ``first_worker`` the index of the first of them (the rank on the emulated backend), so a
    method knows whether this process holds worker 0. ``rules``: the update rules of
    docs/design.md §2.5 (the paper's pipeline by default). ``condition`` holds the network's
    means from its trace and T, as a :class:`~decobench.planning.estimators.NetworkEstimate` (None
    where unknown, e.g. a measured T): only for baselines
    planned ahead from the whole condition, such as ``static-mean-plan``; an online method
    learns the network from its :class:`Observation` s alone.
    """

    d: int
    workers: int
    topology: str
    optimizer: OptimizerConfig
    param_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    seed: int = 0
    iterations_per_epoch: int = 1
    max_iters: int | None = None
    gradient_rows: int | None = None
    first_worker: int = 0
    condition: NetworkEstimate | None = None
    rules: UpdateRules = UpdateRules()    # a class default: older checkpoints load

    @property
    def local_workers(self) -> int:
        """Rows of gradients this process computes per iteration: n on the simulated
        backend (all workers in one process), 1 on the emulated backend (one rank each)."""
        return self.workers if self.gradient_rows is None else self.gradient_rows

    def __post_init__(self) -> None:
        if self.param_shapes and sum(math.prod(s) for _, s in self.param_shapes) != self.d:
            raise ValueError("param_shapes do not add up to d")
        if self.iterations_per_epoch < 1:
            raise ValueError("iterations_per_epoch must be >= 1")


@dataclass(frozen=True)
class Observation:
    """One completed transfer as the workers saw it (reported once it has arrived).

    ``link_bits`` is h·W, the bits that crossed the bottleneck link; ``latency_factor`` is l
    (docs/design.md §4.3, topology factors), so b̂ = (arrive − tx_end) / l. ``burst_bits``: bits
    of ``link_bits`` the link passed before its rate applied (a shaper's token bucket; 0 on
    the time model's ideal link), which ``tx_end − tx_start`` does not include.
    ``compute_s``: T̂'s sample, the compute time of the freshest iteration when the report was
    made (both backends), not necessarily that of ``iteration``.
    """

    iteration: int
    compute_s: float
    link_bits: float
    tx_start_s: float
    tx_end_s: float
    arrive_s: float
    latency_factor: float
    burst_bits: float = 0.0


@dataclass(frozen=True)
class StepResult:
    """What one iteration sent: the kept fraction δ, staleness τ, bits per worker, whether
    the message was dense (selects all-reduce vs all-gather topology factors), how many
    messages were applied this iteration, and extra fields to log."""

    delta: float
    staleness: int
    bits_per_worker: int
    dense: bool
    applied_messages: int
    log: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Sent:
    """The worker half's result at one iteration: ``payload`` holds one message per worker
    this process computes (rows), sent with staleness ``staleness``; ``log`` adds fields to
    the iteration's metrics row.

    ``control``: bytes that the process holding worker 0 sends with its message and every
    process receives with it (:attr:`Due.control`), for a decision only worker 0's data can
    make (Accordion's critical-regime detector reads worker 0's gradient); the same length
    on every process. Control bytes travel beside the payload, like the message header, and
    are not charged as message bits."""

    payload: Compressed
    staleness: int
    log: dict[str, Any] = field(default_factory=dict)
    control: bytes = b""

    def result(self, applied_messages: int, log: dict[str, Any] | None = None) -> StepResult:
        """The iteration's :class:`StepResult` once ``applied_messages`` were applied."""
        return StepResult(delta=self.payload.delta, staleness=self.staleness,
                          bits_per_worker=self.payload.bits_per_worker,
                          dense=self.payload.dense, applied_messages=applied_messages,
                          log={**self.log, **(log or {})})


@dataclass(frozen=True)
class Due:
    """A message due at this iteration: sent at iteration ``sent_at``, aggregated over the n
    workers (``update`` = (1/n) Σ_i Δ^i_s, as :meth:`Compressed.mean` gives it), with the
    :attr:`Sent.control` bytes of the process holding worker 0."""

    sent_at: int
    update: Update
    control: bytes = b""


def summed(messages: Sequence[Due], into: Tensor) -> Tensor:
    """``into`` plus the updates of ``messages`` in their order, e.g. u_t = Σ_{s+τ_s=t} u_s
    (docs/design.md §2.1) with ``into`` zeros (``into`` is modified and returned)."""
    for message in messages:
        message.update.add_to(into)
    return into


class LocalExchange:
    """The exchange of a process that holds all n workers: the mean of the sent rows, kept
    in a :class:`DelayQueue` until s + τ_s (docs/design.md §2.3). The simulated transport uses it,
    and so does :meth:`Method.step`."""

    def __init__(self) -> None:
        self.queue: DelayQueue[Due] = DelayQueue()

    def in_flight(self) -> list[Due]:
        """The messages sent but not applied yet, in send order."""
        return [m.update for m in sorted(self.queue.in_flight, key=lambda m: m.sent_at)]

    def exchange(self, iteration: int, sent: Sent) -> list[Due]:
        """Send this iteration's messages; returns those due at ``iteration`` in send order."""
        self.queue.push(iteration, sent.staleness,
                        Due(iteration, sent.payload.mean(), sent.control))
        return [m.update for m in self.queue.pop_due(iteration)]


class Method(ABC):
    """One training method, as a worker half (:meth:`send`) and an aggregation half
    (:meth:`receive`)."""

    name: ClassVar[str]

    @abstractmethod
    def send(self, iteration: int, params: Tensor, gradients: Tensor) -> Sent:
        """Worker half: the ``[m, d]`` gradients of iteration ``iteration`` of the m workers
        this process holds (taken at :meth:`worker_params`) → their messages and τ."""

    @abstractmethod
    def receive(self, iteration: int, params: Tensor, due: Sequence[Due]) -> dict[str, Any]:
        """Aggregation half: apply the messages due at ``iteration`` (in send order) and
        update ``params`` in place to x_{t+1}; returns extra fields for the metrics row."""

    def step(self, iteration: int, params: Tensor, gradients: Tensor) -> StepResult:
        """Both halves in one process holding all n workers (``gradients`` is ``[n, d]``)."""
        exchange = self.__dict__.get("_local_exchange")
        if exchange is None:
            exchange = self.__dict__["_local_exchange"] = LocalExchange()
        sent = self.send(iteration, params, gradients)
        due = exchange.exchange(iteration, sent)
        return sent.result(len(due), self.receive(iteration, params, due))

    def observe(self, observation: Observation) -> None:
        """A transfer has arrived; adaptive methods update their measurements."""
        return None

    def replay(self, schedules: Sequence[Any]) -> bool:
        """Follow a recorded ``(δ_t, τ_t)`` sequence (:class:`~decobench.methods.controllers.
        Schedule` items) instead of deciding; returns whether this method can (default: no).
        The fidelity check replays an emulated run's decisions on the simulated clock."""
        return False

    def worker_params(self, params: Tensor) -> Tensor:
        """Where the workers take this iteration's gradients: the shared x_t (``[d]``), or an
        ``[m, d]`` stack for methods whose workers hold different models (DGA)."""
        return params

    def evaluation_params(self, params: Tensor,
                          in_flight: Callable[[], Sequence[Due]] = tuple) -> Tensor:
        """The parameters to evaluate (methods with per-worker models override this).
        ``in_flight()`` gives the messages sent but not yet applied, each the mean over the n
        workers (a process holding fewer than n workers needs them to average models); it
        may wait for them, so only a method that needs them calls it."""
        return params


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: its name, one-line summary, typed options and factory.

    ``emulation`` is None when the method runs on the emulated backend (its messages are
    Top-k or dense, which :mod:`decobench.compression.codec` encodes, or carry their own wire
    form, ``Compressed.wire``), else the reason it cannot, shown in the error when one asks
    for it.

    ``network_decisions(context, options)``: the method's decisions from the network as a
    :class:`~decobench.methods.decisions.DecisionPolicy`, so a sweep trains one trajectory
    for every network condition that leads to the same decisions
    (:mod:`decobench.methods.decisions`); None (the default): unknown, every condition trains
    its own. The factory itself may return None for options whose decisions also read the
    training (deco-sgd-robust's Theorem-1 iteration model reads the applied updates): those
    runs train their own trajectory too. The context it gets has ``d``, ``workers``,
    ``topology``, ``optimizer``, ``seed`` and ``max_iters`` (the data are not loaded yet: ``param_shapes`` is empty).

    ``learner``: a name for the model side of methods that differ only in how they decide
    from the network, e.g. ``"dd-ef-sgd/top-k"`` for DeCo-SGD and the paper's static
    strategy (both DD-EF-SGD with global Top-k; one re-plans, the other freezes DeCo's first
    plan). A method that sets it promises that its options act only through its
    ``network_decisions`` and that its sent log is exactly its decisions' log; then runs of
    any method with the same learner share one trajectory wherever their decisions
    coincide (the static strategy on a link where DeCo-SGD keeps its first plan).
    None (the default): the method's name and options are part of its trajectory key.

    ``rules``: the update rules of docs/design.md §2.5 (:class:`~decobench.methods.rules.
    UpdateRules` field names) the method implements; a run that changes another is refused
    before training. Clipping (``clip_norm``) is the training loop's, so every method has it."""

    name: str
    summary: str
    options: type[MethodOptions]
    build: Callable[[MethodContext, MethodOptions], Method]
    emulation: str | None = None
    network_decisions: Callable[[MethodContext, Any], Any] | None = None
    learner: str | None = None
    rules: frozenset[str] = frozenset({"clip_norm"})
