"""Checkpoints of a run: its whole training state, written atomically every few minutes of
wall time, so that ``decobench run --resume`` continues an interrupted run instead of
restarting it and ends with the same metrics as an uninterrupted run (simulated backend;
on the emulated backend the same trajectory, with measured times).

The state is everything the next iteration reads: the flat parameters, the method object
whole (error-feedback memories, messages in flight, controller and estimators), the
transport's state (the event clock and the observations in flight), the data order
(:class:`~decobench.training.sharding.ShardedBatches`), the outcome and target book so far, the
torch RNG state and the model's buffers, and the wall time counted so far
(:func:`wall_start_for`). It is pickled with :func:`torch.save` into
``checkpoint.pt`` beside the metrics (a temporary file renamed over the old one), with a
fingerprint, the run's identity (:func:`decobench.runs.identity.identity`, as a sweep names its cells); a
checkpoint of another configuration is refused.
The metrics rows written after the checkpoint are dropped on resume (the resumed run writes
them again).

An emulated run keeps one file per rank and checkpoint, ``checkpoints/rankR-ITERATION.pt``
(:class:`RankCheckpointer`): the ranks agree on the iteration to save through their
messages' headers (:mod:`decobench.emulated.transport`), a rank deletes its older files only
once every rank has reported a newer one, and on resume the ranks restore the newest
iteration all of them hold (:func:`common_iteration`).
"""

from __future__ import annotations

import io
import pickle
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from decobench.atomicio import atomic_writer
from decobench.errors import DecobenchError
from decobench.runs.rundir import CHECKPOINT, RANK_CHECKPOINTS, SUMMARY
from decobench.training.evaluation import Resolution

MOVED_MODULES = {
    "decobench.allocator": "decobench.training.allocator",
    "decobench.backends": "decobench.runs.backends",
    "decobench.budget": "decobench.clock.budget",
    "decobench.checkpoint": "decobench.runs.checkpoint",
    "decobench.compressors": "decobench.compression.compressors",
    "decobench.config": "decobench.runs.config",
    "decobench.cost": "decobench.sweeps.cost",
    "decobench.devices": "decobench.training.devices",
    "decobench.emulated.codec": "decobench.compression.codec",
    "decobench.error_feedback": "decobench.compression.error_feedback",
    "decobench.estimators": "decobench.planning.estimators",
    "decobench.evaluation": "decobench.training.evaluation",
    "decobench.executors": "decobench.sweeps.executors",
    "decobench.flat": "decobench.training.flat",
    "decobench.gradients": "decobench.training.gradients",
    "decobench.grouped_gradients": "decobench.training.grouped_gradients",
    "decobench.link_sharing": "decobench.clock.link_sharing",
    "decobench.loop": "decobench.training.loop",
    "decobench.message_queue": "decobench.methods.message_queue",
    "decobench.optimizer": "decobench.methods.optimizer",
    "decobench.phi": "decobench.planning.phi",
    "decobench.planner": "decobench.planning.planner",
    "decobench.progress": "decobench.training.progress",
    "decobench.regime": "decobench.clock.regime",
    "decobench.replay": "decobench.runs.replay",
    "decobench.rundir": "decobench.runs.rundir",
    "decobench.runner": "decobench.runs.runner",
    "decobench.sharding": "decobench.training.sharding",
    "decobench.simulated": "decobench.training.simulated",
    "decobench.suite": "decobench.sweeps.suite",
    "decobench.sweep": "decobench.sweeps.sweep",
    "decobench.timemodel": "decobench.clock.timemodel",
    "decobench.topology": "decobench.clock.topology",
    "decobench.tracking": "decobench.runs.tracking",
    "decobench.trajectory": "decobench.runs.trajectory",
    "decobench.transport_model": "decobench.clock.transport_model",
    "decobench.wire": "decobench.clock.wire",
}
"""Modules of 0.1.0 whose classes a checkpoint of that version may name, and where they live
since 0.2.0 put the core in floors (CHANGELOG.md): such a checkpoint still loads."""


class _Unpickler(pickle.Unpickler):
    """Reads a class of a moved module from its new home (:data:`MOVED_MODULES`)."""

    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(MOVED_MODULES.get(module, module), name)


class _PickleModule:
    """The ``pickle_module`` :func:`torch.load` reads checkpoints with."""

    Unpickler = _Unpickler
    load = staticmethod(lambda file, **kwargs: _Unpickler(file, **kwargs).load())


def load_state(source: Path | io.BytesIO, device: torch.device | str = "cpu") -> Any:
    """A checkpoint's state (:func:`torch.load` with :class:`_PickleModule`)."""
    return torch.load(source, map_location=device, weights_only=False,
                      pickle_module=_PickleModule)


@dataclass
class Checkpointer:
    """Saves the state every ``every_s`` seconds of wall time (never when None), with
    ``fingerprint``, the run's identity."""

    path: Path
    every_s: float | None
    fingerprint: str
    _last: float = field(default_factory=time.monotonic)

    def due(self) -> bool:
        return self.every_s is not None and time.monotonic() - self._last >= self.every_s

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state`` atomically (the previous checkpoint stays until the rename)."""
        with atomic_writer(self.path) as handle:
            torch.save({**state, "fingerprint": self.fingerprint}, handle)
        self._last = time.monotonic()

    def remove(self) -> None:
        """Delete the checkpoint (the run finished) and any temporary file a killed save
        left behind (:func:`~decobench.atomicio.atomic_writer`'s ``.NAME.*.tmp``)."""
        self.path.unlink(missing_ok=True)
        for stale in self.path.parent.glob(f".{self.path.name}.*.tmp"):
            stale.unlink(missing_ok=True)


def wall_start_for(resume: dict[str, Any] | None) -> float:
    """The :func:`time.perf_counter` origin of a run's ``wall_time_s``: now, or for a run
    resumed from the state ``resume`` now less the wall time counted up to its checkpoint, so
    that a resumed run's rows and summary count the time before the interruption too (not
    the time between the checkpoint and the kill, which the resumed run trains again)."""
    before = 0.0 if resume is None else float(resume.get("wall_time_s", 0.0))  # older files
    return time.perf_counter() - before


def load_checkpoint(path: Path, expected: str) -> dict[str, Any]:
    """The state saved at ``path``; one-line errors when there is none or it belongs to
    another configuration."""
    if (path.parent / SUMMARY).is_file():
        raise DecobenchError(f"--resume: {path.parent} holds a finished run; nothing to "
                             "resume (pass --overwrite to run it again)")
    if not path.is_file():
        raise DecobenchError(f"--resume: no checkpoint in {path.parent} (a run writes "
                             f"{CHECKPOINT} every --checkpoint-every-s seconds); run without "
                             "--resume to start it over")
    return _load(path, expected, "the checkpoint")


_RANK_FILE = re.compile(r"rank(\d+)-(\d+)\.pt")


@dataclass
class RankCheckpointer:
    """One emulated rank's checkpoints: ``folder/rankR-ITERATION.pt``.

    The leader's :meth:`due` (every ``every_s`` seconds of wall time) asks the ranks to save;
    they save at the iteration they agree on (:meth:`save`), report the newest iteration
    saved in their headers (:attr:`latest`), and :meth:`prune` files older than the newest
    iteration every rank has reported, so the ranks always share at least one iteration.
    """

    folder: Path
    rank: int
    every_s: float | None
    fingerprint: str
    latest: int | None = None
    _last: float = field(default_factory=time.monotonic)

    def due(self) -> bool:
        return self.every_s is not None and time.monotonic() - self._last >= self.every_s

    def path(self, iteration: int) -> Path:
        return self.folder / f"rank{self.rank}-{iteration:09d}.pt"

    def save(self, state: dict[str, Any]) -> None:
        iteration = int(state["iteration"])
        self.folder.mkdir(parents=True, exist_ok=True)
        with atomic_writer(self.path(iteration)) as handle:
            torch.save({**state, "fingerprint": self.fingerprint, "rank": self.rank}, handle)
        self.latest = iteration
        self._last = time.monotonic()

    def iterations(self) -> list[int]:
        """The iterations this rank holds a checkpoint of, in increasing order."""
        return sorted(it for rank, it in _rank_files(self.folder) if rank == self.rank)

    def prune(self, committed: int) -> None:
        """Delete this rank's checkpoints older than ``committed`` (every rank has saved it)."""
        for iteration in self.iterations():
            if iteration < committed:
                self.path(iteration).unlink(missing_ok=True)

    def discard_after(self, iteration: int) -> None:
        """Delete this rank's checkpoints newer than ``iteration`` (the ranks resumed from
        it; a newer file of the interrupted attempt would be mixed with the new attempt's)."""
        for newer in self.iterations():
            if newer > iteration:
                self.path(newer).unlink(missing_ok=True)

    def load(self, iteration: int, device: torch.device | str = "cpu") -> dict[str, Any]:
        """This rank's state at ``iteration`` (tensors on ``device``), checked against the
        run's identity."""
        return _load(self.path(iteration), self.fingerprint, "this rank's checkpoint", device)

    def remove(self) -> None:
        """Delete this rank's checkpoints and temporary files (the run finished)."""
        for iteration in self.iterations():
            self.path(iteration).unlink(missing_ok=True)
        for stale in self.folder.glob(f".rank{self.rank}-*.tmp"):
            stale.unlink(missing_ok=True)


def _rank_files(folder: Path) -> list[tuple[int, int]]:
    if not folder.is_dir():
        return []
    found = []
    for entry in folder.iterdir():
        match = _RANK_FILE.fullmatch(entry.name)
        if match:
            found.append((int(match[1]), int(match[2])))
    return found


def has_rank_checkpoints(run_dir: Path) -> bool:
    """Whether an emulated run's directory holds per-rank checkpoints."""
    return bool(_rank_files(run_dir / RANK_CHECKPOINTS))


def has_checkpoint(run_dir: Path) -> bool:
    """Whether a run's directory holds a checkpoint: ``checkpoint.pt`` (simulated) or
    per-rank checkpoints (emulated)."""
    return (run_dir / CHECKPOINT).is_file() or has_rank_checkpoints(run_dir)


def common_iteration(held: list[list[int]], where: Path) -> int:
    """The newest iteration every rank holds a checkpoint of (``held[r]``: rank r's)."""
    common = set(held[0]).intersection(*map(set, held[1:])) if held else set()
    if not common:
        missing = [r for r, its in enumerate(held) if not its]
        detail = (f"rank(s) {', '.join(map(str, missing))} hold none" if missing
                  else "the ranks hold no iteration in common")
        raise DecobenchError(f"--resume: no checkpoint every rank can restore in "
                             f"{where / RANK_CHECKPOINTS} ({detail}); run without --resume to "
                             "start over")
    return max(common)


def _load(path: Path, expected: str, what: str,
          device: torch.device | str = "cpu") -> dict[str, Any]:
    try:
        state = load_state(path, device)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file
        raise DecobenchError(f"--resume: {path} cannot be read ({exc}); run without "
                             "--resume to start over") from exc
    if not isinstance(state, dict) or state.get("fingerprint") != expected:
        raise DecobenchError(f"--resume: {what} in {path.parent} was made by a different "
                             "configuration; give the same flags as the interrupted run, or "
                             "run without --resume to start over")
    return state


@dataclass
class RefineStarts:
    """An in-memory copy of a first pass's state where its refine pass starts.

    A refine pass (:func:`decobench.runs.runner.execute`) re-evaluates the brackets
    ``(previous evaluation, hit]`` wider than their resolution allows
    (:class:`decobench.training.evaluation.Resolution`, :func:`decobench.training.evaluation.refine_windows`).
    Before the first such bracket the replay evaluates exactly as the first pass did, so it
    can start from the first pass's state at that bracket's previous evaluation instead of
    from iteration 0. :meth:`after_evaluation`
    keeps the latest evaluation's state (the checkpoint's format, pickled with
    :func:`torch.save` into memory, so later iterations cannot change it) and holds on to it
    when the next evaluation meets a target with a bracket that wide; that is the first
    bracket, so from then on nothing more is copied. :meth:`state_at` gives it back. A state
    at iteration 0 is never kept: the replay starts from the seed there.
    """

    resolution: Resolution
    """How fine a time to target must be."""
    kept: tuple[int, bytes] | None = None
    _last: tuple[int, bytes] | None = None

    def after_evaluation(self, iteration: int, hits: Any, state: Any, fine: bool) -> None:
        """An evaluation after ``iteration`` iterations; ``hits``: the target book's hits so
        far; ``state()``: the whole state after it, as a checkpoint holds it; ``fine``: the
        next evaluation is at most the fine cadence away (no bracket can open here that needs
        refining, so no copy is made)."""
        if self.kept is not None:
            return
        if self._last is not None and any(
                hit.previous_iteration == self._last[0] and self.resolution.too_wide(hit)
                for hit in hits.values()):
            self.kept, self._last = self._last, None
            return
        self._last = None
        if fine:
            return
        buffer = io.BytesIO()
        torch.save(state(), buffer)
        self._last = (iteration, buffer.getvalue())

    def state_at(self, iteration: int) -> dict[str, Any] | None:
        """The state kept after ``iteration`` iterations, or None. The latest copy counts
        too: a run that stops at the evaluation meeting its target never reaches the next
        :meth:`after_evaluation`."""
        for copy in (self.kept, self._last):
            if copy is not None and copy[0] == iteration:
                return load_state(io.BytesIO(copy[1]))
        return None
