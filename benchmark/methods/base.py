"""The method interface every training method implements.

A method turns the n workers' gradients of one iteration into the parameters of the next
iteration, and says what it put on the wire (δ, τ, bits) so the time model can charge it.
Methods are built from the shared machinery (compressors, error feedback, the delay queue,
the shared optimizer); they never read the network trace: what they know of the network
is the :class:`Observation` of each transfer the backend reports once it has arrived.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from pydantic import BaseModel, ConfigDict
from torch import Tensor

from decobench.optimizer import OptimizerConfig


class MethodOptions(BaseModel):
    """Per-method options; subclasses add fields (each becomes a ``decobench run`` flag)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class MethodContext:
    """What a method may know about the run before it starts.

    ``param_shapes`` lists the flat vector's tensors in order (name, shape);
    ``iterations_per_epoch`` is one pass over each worker's shard; ``max_iters`` the run's
    iteration budget; ``seed`` the run seed (for shared randomness such as a sample mask);
    ``gradient_rows`` how many workers' gradients one process holds (None: all n).
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
    (deco-sgd.md §4 topology factors), so b̂ = (arrive − tx_end) / l.
    """

    iteration: int
    compute_s: float
    link_bits: float
    tx_start_s: float
    tx_end_s: float
    arrive_s: float
    latency_factor: float


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


class Method(ABC):
    """One training method. ``step`` updates ``params`` in place."""

    name: ClassVar[str]

    @abstractmethod
    def step(self, iteration: int, params: Tensor, gradients: Tensor) -> StepResult:
        """Consume the ``[n, d]`` gradients of iteration ``iteration`` (taken at ``params``)
        and update ``params`` to x_{t+1}."""

    def observe(self, observation: Observation) -> None:
        """A transfer has arrived; adaptive methods update their measurements."""
        return None

    def worker_params(self, params: Tensor) -> Tensor:
        """Where the workers take this iteration's gradients: the shared x_t (``[d]``), or an
        ``[n, d]`` stack for methods whose workers hold different models (DGA)."""
        return params

    def evaluation_params(self, params: Tensor) -> Tensor:
        """The parameters to evaluate (methods with per-worker models override this)."""
        return params


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: its name, one-line summary, typed options and factory."""

    name: str
    summary: str
    options: type[MethodOptions]
    build: Callable[[MethodContext, MethodOptions], Method]
