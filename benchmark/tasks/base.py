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

from decobench.errors import DecobenchError
from decobench.methods.rules import UpdateRules

STANDIN_MARKER = "STANDIN.txt"
"""A ``--data-root`` holding this file is an offline stand-in, not the task's data set
(``benchmark/tasks/standins.py`` writes it): its first line says what the data are, and the
task's loader appends that line to ``data_source`` so every run on it is labelled."""


def standin_label(data_root: Path) -> str | None:
    """The first line of ``data_root``'s :data:`STANDIN_MARKER`, or None when there is no
    such file (the data are what the task says they are)."""
    path = Path(data_root) / STANDIN_MARKER
    if not path.is_file():
        return None
    lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return lines[0].strip() if lines else f"STAND-IN ({STANDIN_MARKER} is empty)"


@dataclass(frozen=True)
class TaskProfile:
    """Model size, batch size, step size and the per-iteration compute time T.

    ``compute_time_s`` drives the simulated clock (docs/design.md §4.6): a fixed, documented T so
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
    rules: UpdateRules = UpdateRules()
    """The update rules of docs/design.md §2.5 this profile trains with (flags override them);
    the paper's pipeline unless the profile says otherwise."""


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
    full_train_examples: ClassVar[int | None] = None
    """Training examples of the task's full data set (its published training split), which
    :meth:`data_kind` compares a loaded data set with; ``None``: not known."""
    vectorise: ClassVar[bool] = True
    """Compute the n workers' gradients with one ``vmap`` (False: one pass per worker, for
    models whose forward pass ``torch.func.vmap`` cannot batch)."""
    init: str = "scratch"
    """How :func:`build_seeded_model` initialises the model: ``scratch`` (random weights
    from the run's seed) or ``pretrained`` (published weights, :meth:`pretrained_weights`);
    set by :meth:`select_init`, which :func:`decobench.runs.runner.prepare` calls with
    ``--init``. Tasks whose data pipeline follows the weights (ViT's normalisation, GPT-2's
    tokenizer) read it too."""

    def data_kind(self, data: TaskData) -> str:
        """What the loaded data are, for the report's comparability columns:
        ``stand-in`` (an offline stand-in, :data:`STANDIN_MARKER`), ``slice`` (fewer training
        examples than :attr:`full_train_examples`) or ``full``."""
        if "STAND-IN" in data.source:
            return "stand-in"
        full = self.full_train_examples
        return "slice" if full is not None and data.num_train < full else "full"

    def profile(self, name: str) -> TaskProfile:
        if name not in self.profiles:
            raise DecobenchError(f"task {self.name!r} has no profile {name!r}; "
                                 f"choose from {', '.join(sorted(self.profiles))}")
        return self.profiles[name]

    def validate_target(self, target: float) -> None:
        """Raise if ``target`` is not a meaningful value of this task's metric: a
        DecobenchError saying what is wrong with the value (the caller names the flag,
        ``--target`` or ``--milestone``)."""
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

    def pretrained_weights(self, profile: TaskProfile) -> str | None:
        """What ``--init pretrained`` loads for ``profile`` (published weights, downloaded
        on first use), or None when the profile has none. Default: none."""
        return None

    def select_init(self, init: str, profile: TaskProfile) -> None:
        """Check ``init`` for ``profile`` before training (one-line DecobenchError) and make
        it this task's :attr:`init`."""
        if init not in ("scratch", "pretrained"):
            raise DecobenchError(f"--init {init!r}: choose scratch or pretrained")
        if init == "pretrained":
            supported = sorted(name for name, p in self.profiles.items()
                               if self.pretrained_weights(p) is not None)
            if not supported:
                raise DecobenchError(
                    f"--init pretrained: task {self.name} has no published pretrained weights "
                    "(it trains from scratch only); drop --init or give --init scratch")
            if profile.name not in supported:
                raise DecobenchError(
                    f"--init pretrained: profile {profile.name!r} of task {self.name} has no "
                    f"published weights (its model is this project's own size); profiles "
                    f"with pretrained weights: {', '.join(supported)}; or use --init scratch")
            self.check_pretrained(profile)
        self.init = init

    def check_pretrained(self, profile: TaskProfile) -> None:
        """Further checks before a pretrained run (e.g. a tokenizer the weights need)."""
        return None

    def build_pretrained_model(self, profile: TaskProfile) -> nn.Module:
        """The model of ``profile`` with :meth:`pretrained_weights` loaded (callers fix the
        RNG seed around this call: a classifier head that is not loaded is initialised)."""
        raise DecobenchError(f"--init pretrained: task {self.name} has no pretrained weights")

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
            raise DecobenchError(f"{target} is not an accuracy; give a value in [0, 1]")

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return F.cross_entropy(outputs, targets)


def parameter_count(task: Task, profile: TaskProfile) -> int:
    """d, the trainable parameters of the profile's model, counted on the meta device
    (no memory is allocated, so this is cheap even for GPT-2 or ViT-B/16)."""
    with torch.device("meta"):
        model = task.build_model(profile)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def build_seeded_model(task: Task, profile: TaskProfile, seed: int) -> nn.Module:
    """``task.build_model`` (``task.init == "scratch"``, the default) or
    ``task.build_pretrained_model`` (``"pretrained"``) under a forked RNG seeded with
    ``seed`` (no global side effect)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if task.init == "pretrained":
            return task.build_pretrained_model(profile)
        return task.build_model(profile)


def pretrained_load_error(what: str, exc: BaseException) -> DecobenchError:
    """One line saying that loading ``what`` (pretrained weights, or the tokenizer they
    need) failed, why (the first line of the library's message) and how to provide it."""
    lines = str(exc).strip().splitlines()
    reason = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return DecobenchError(
        f"--init pretrained: could not load {what} ({reason}); it downloads from the Hugging "
        "Face Hub on first use: run once with internet access, or point HF_HOME (or "
        "HF_HUB_CACHE) at a Hugging Face cache that holds it (HF_HUB_OFFLINE=1 reads only the "
        "cache), or use --init scratch")
