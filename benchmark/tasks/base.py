"""What a task provides: data, a model, a loss, an evaluation metric, and profiles."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F
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
    model: str = ""
    """The model variant the task builds for this profile (a task-specific name, e.g. a timm
    model name); empty when the task has one model."""


class TaskData(ABC):
    """A task's data as the simulated backend reads it: ``num_train`` training examples,
    drawn by index in ``[n, B]`` batches (row i is worker i's batch); the test split is read
    by the task's own :meth:`Task.evaluate`. ``source`` says where the data came from."""

    source: str

    @property
    @abstractmethod
    def num_train(self) -> int: ...

    @abstractmethod
    def train_batch(self, indices: Tensor) -> tuple[Tensor, Tensor]:
        """Inputs ``[n, B, ...]`` and targets ``[n, B, ...]`` of the examples ``indices``
        (``[n, B]``)."""


@dataclass(frozen=True)
class TensorData(TaskData):
    """In-memory train and test tensors (inputs already normalised / tokenised)."""

    train_inputs: Tensor
    train_targets: Tensor
    test_inputs: Tensor
    test_targets: Tensor
    source: str

    @property
    def num_train(self) -> int:
        return len(self.train_targets)

    def train_batch(self, indices: Tensor) -> tuple[Tensor, Tensor]:
        return self.train_inputs[indices], self.train_targets[indices]


class Task(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    metric_name: ClassVar[str]
    higher_is_better: ClassVar[bool]
    profiles: ClassVar[dict[str, TaskProfile]]
    dataset_variants: ClassVar[tuple[str, ...]] = ()
    """Selectable data set variants (``--dataset``); the first is the default. Empty when
    the task has one data set."""
    vectorise: ClassVar[bool] = True
    """Compute the n workers' gradients with one ``vmap`` (False: one pass per worker, for
    models whose forward pass ``torch.func.vmap`` cannot batch)."""

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

    def dataset_variant(self, variant: str | None) -> str | None:
        """The data set variant to use: ``variant``, checked, or the default one."""
        if variant is None:
            return self.dataset_variants[0] if self.dataset_variants else None
        if variant not in self.dataset_variants:
            choices = ", ".join(self.dataset_variants) or "none (this task has one data set)"
            raise DecobenchError(f"--dataset {variant!r} is not a data set of task "
                                 f"{self.name}; choose from: {choices}")
        return variant

    @abstractmethod
    def check_data(self, data_root: Path | None, download: bool,
                   variant: str | None = None) -> None:
        """Fail fast (before training) with a message that says how to get the data."""

    @abstractmethod
    def load_data(self, data_root: Path | None, download: bool, profile: TaskProfile,
                  variant: str | None = None) -> TaskData:
        """The data for ``profile`` (which may fix e.g. image size or sequence length)."""

    @abstractmethod
    def build_model(self, profile: TaskProfile) -> nn.Module:
        """A freshly initialised model (callers fix the RNG seed around this call)."""

    @abstractmethod
    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor: ...

    @abstractmethod
    def evaluate(self, forward: Callable[[Tensor], Tensor], data: TaskData) -> float:
        """The metric of the model ``forward`` on the test split."""


class ClassificationTask(Task):
    """A task scored by top-1 accuracy on a cross-entropy loss: the target is an accuracy
    in [0, 1]."""

    metric_name = "accuracy"
    higher_is_better = True

    def validate_target(self, target: float) -> None:
        if not 0.0 <= target <= 1.0:
            raise DecobenchError(f"--target {target} is not an accuracy; give a value in [0, 1]")

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return F.cross_entropy(outputs, targets)


def parameter_count(task: Task, profile: TaskProfile) -> int:
    """d, the trainable parameters of the profile's model, counted on the meta device
    (no memory is allocated, so this is cheap even for GPT-2 or ViT-B/16)."""
    with torch.device("meta"):
        model = task.build_model(profile)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def build_seeded_model(task: Task, profile: TaskProfile, seed: int) -> nn.Module:
    """``task.build_model`` under a forked RNG seeded with ``seed`` (no global side effect)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return task.build_model(profile)
