"""What a task provides: data, a model, a loss, an evaluation metric, and profiles."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor, nn

from benchmark.errors import DecobenchError


@dataclass(frozen=True)
class TaskProfile:
    """Model size, batch size, step size and the per-iteration compute time T.

    ``compute_time_s`` drives the simulated clock (deco-sgd.md §4): a fixed, documented T so
    results do not depend on the machine running the simulation; ``compute_time_source``
    says where the number comes from.
    """

    name: str
    batch_size: int
    lr: float
    compute_time_s: float
    compute_time_source: str
    eval_every: int
    max_iters: int
    momentum: float = 0.0
    weight_decay: float = 0.0
    schedule: str = "constant"
    warmup_iters: int = 0


@dataclass(frozen=True)
class TaskData:
    """In-memory train and test tensors (inputs already normalised)."""

    train_inputs: Tensor
    train_targets: Tensor
    test_inputs: Tensor
    test_targets: Tensor
    source: str


class Task(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    metric_name: ClassVar[str]
    higher_is_better: ClassVar[bool]
    profiles: ClassVar[dict[str, TaskProfile]]

    def profile(self, name: str) -> TaskProfile:
        if name not in self.profiles:
            raise DecobenchError(f"task {self.name!r} has no profile {name!r}; "
                                 f"choose from {', '.join(sorted(self.profiles))}")
        return self.profiles[name]

    def validate_target(self, target: float) -> None:
        """Raise if ``target`` is not a meaningful value of this task's metric."""
        return None

    def target_reached(self, metric: float, target: float) -> bool:
        return metric >= target if self.higher_is_better else metric <= target

    @abstractmethod
    def check_data(self, data_root: Path | None, download: bool) -> None:
        """Fail fast (before training) with a message that says how to get the data."""

    @abstractmethod
    def load_data(self, data_root: Path | None, download: bool) -> TaskData: ...

    @abstractmethod
    def build_model(self, profile: TaskProfile) -> nn.Module:
        """A freshly initialised model (callers fix the RNG seed around this call)."""

    @abstractmethod
    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor: ...

    @abstractmethod
    def evaluate(self, forward: Callable[[Tensor], Tensor], data: TaskData) -> float:
        """The metric of the model ``forward`` on the test split."""


def build_seeded_model(task: Task, profile: TaskProfile, seed: int) -> nn.Module:
    """``task.build_model`` under a forked RNG seeded with ``seed`` (no global side effect)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return task.build_model(profile)
