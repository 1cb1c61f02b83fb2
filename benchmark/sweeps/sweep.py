"""``decobench sweep``: run a suite's cells in parallel worker processes, resumably.

Layout of the results folder ``DIR``::

    DIR/suite.yaml        the suite as run (resolved, for the record)
    DIR/manifest.json     every cell: id, run_dir, task, method, label, condition, workers, seed
                          (and the trace family of a ``family`` condition)
    DIR/traces/           one-row traces of the suite's ``constant`` conditions
    DIR/runs/NAME/        one complete run directory per finished cell
    DIR/failures.jsonl    cells that crashed (the report refuses to run while any is missing)

A cell's identity is the SHA-256 of its resolved configuration and seed
(:func:`decobench.runs.identity.identity`); its directory name ends with the first 12 hex digits.
Ctrl-C (SIGINT) or SIGTERM stops a sweep at once: queued cells are cancelled, the worker
processes of the cells in flight are killed, and :class:`SweepInterrupted` says how many
runs are finished; rerunning resumes.
**Trajectory reuse** (:mod:`decobench.runs.trajectory`; on by default, ``reuse=False`` /
``--no-reuse`` turns it off): cells whose trajectory keys are equal (same task, seed and
options, and a method whose decisions come out the same on their networks, or another method
of the same learner making the same decisions, e.g. DeCo-SGD and its frozen first plan) train
once: the first such cell trains and records its trajectory, the others are re-timed from it
on their own networks once it has finished (seconds each). A re-timed run directory is complete and
says ``retimed_from``. A finished run that recorded the trajectory serves later sweeps too.
A cell runs in ``runs/.staging-NAME`` and is renamed to ``runs/NAME`` only when it is
complete, so ``runs/NAME`` exists exactly when the run finished: killing the sweep (or the
machine) at any moment loses at most the cells in flight since their last checkpoint
(``checkpoint_every_s``, :mod:`decobench.runs.checkpoint`). A rerun skips every finished cell,
continues each interrupted cell whose staging folder holds a checkpoint of it, and removes
the other abandoned staging folders. One sweep at a time may use a folder (a lock file says
so).
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from decobench.atomicio import write_text_atomic
from decobench.errors import DecobenchError
from decobench.runs.rundir import MANIFEST
from decobench.sweeps.cell import STAGING_PREFIX, is_done, run_cell, run_dir
from decobench.sweeps.executors import ExecutorConfig
from decobench.sweeps.suite import (
    Cell,
    Suite,
    expand_cells,
    write_constant_traces,
    write_realised_traces,
)

LOCK_FILE = ".sweep.lock"
FAILURES = "failures.jsonl"


@dataclass(frozen=True)
class SweepPlan:
    """A suite resolved against a results folder: which cells exist and which remain, and
    each reusable cell's trajectory key (:func:`decobench.runs.trajectory.reuse_key`)."""

    suite: Suite
    out: Path
    cells: list[Cell]
    done: list[Cell]
    todo: list[Cell]
    keys: dict[str, str] = field(default_factory=dict)


def plan_sweep(suite: Suite, out: Path, data_roots: dict[str, str] | None = None,
               backend: str | None = None, reuse: bool = True) -> SweepPlan:
    """Expand and check every cell (:func:`decobench.runs.runner.prepare`: options, targets,
    traces, data; and the backend's own check, e.g. root for the emulated one) before
    anything runs; a bad cell is an error naming it. With ``reuse``, each cell's trajectory
    key is computed (its method's decisions on its network, no training)."""
    from decobench.methods.base import changed_options
    from decobench.runs.backends import get_backend
    from decobench.runs.rundir import read_config
    from decobench.runs.runner import load_task_data, prepare
    from decobench.runs.trajectory import reuse_key
    from decobench.training.sharding import check_batch_size

    write_constant_traces(suite, out / "traces")
    write_realised_traces(suite, out / "traces")
    cells = expand_cells(suite, out / "traces", data_roots, backend=backend)
    keys: dict[str, str] = {}
    stale: list[str] = []
    done: list[Cell] = []
    todo: list[Cell] = []
    train_sizes: dict[tuple[str, ...], int] = {}
    for cell in cells:
        finished = is_done(out, cell)
        try:
            run = prepare(cell.config)
            if finished:                        # made with today's resolved options?
                recorded = read_config(run_dir(out, cell)).get("method_options")
                changed = (changed_options(recorded, run.options)
                           if isinstance(recorded, dict) else {})
                if changed:
                    what = "; ".join(f"{name}: {how}" for name, how in changed.items())
                    stale.append(f"runs/{cell.name} ({what})")
            else:
                get_backend(cell.config.backend).check(run)
                if run.data_root is not None:   # a batch that no shard holds fails here,
                    # not after the cells before it trained (data to download: at run time)
                    data_key = (run.task.name, str(run.data_root), str(run.dataset),
                                repr(run.profile))
                    if data_key not in train_sizes:
                        train_sizes[data_key] = load_task_data(run).num_train
                    check_batch_size(train_sizes[data_key], cell.config.workers,
                                     run.batch_size)
            key = reuse_key(run)[0] if reuse else None
        except DecobenchError as exc:
            raise DecobenchError(f"suite {suite.name}: cell {cell.name} ({cell.experiment}): "
                                 f"{exc}") from exc
        if key is not None:
            keys[cell.name] = key
        (done if finished else todo).append(cell)
    if stale:
        raise DecobenchError(
            f"suite {suite.name}: {len(stale)} finished run(s) in {out} were made with method "
            f"options this code resolves otherwise (a default changed since), e.g. {stale[0]}; "
            "move those run folders aside, or sweep into a new --out, to run them again")
    return SweepPlan(suite, out, cells, done, todo, keys)


class CellQueue:
    """The order a sweep runs its remaining cells in, with trajectory reuse: every cell
    without a key, and the first remaining cell of each key without a recorded trajectory,
    trains (:attr:`trained`); the other cells of a key are re-timed as soon as a finished run
    holds its trajectory. :meth:`ready` hands out what can run now; :meth:`finished` says a
    cell ended, and returns what that made ready."""

    def __init__(self, plan: SweepPlan) -> None:
        from decobench.runs.trajectory import Reuse, load_trajectory

        self.out, self.keys = plan.out, plan.keys
        self.sources: dict[str, Path] = {}
        for cell in plan.done:                  # finished runs that recorded a trajectory
            key = plan.keys.get(cell.name)
            if key is not None and key not in self.sources:
                try:
                    if load_trajectory(run_dir(plan.out, cell), key) is not None:
                        self.sources[key] = run_dir(plan.out, cell)
                except DecobenchError:          # unreadable: its cells train again
                    pass
        self.now: list[tuple[Cell, Reuse | None]] = []
        self.waiting: dict[str, list[Cell]] = {}
        self.trained: list[Cell] = []
        for cell in plan.todo:
            key = plan.keys.get(cell.name)
            if key is None:
                self.now.append((cell, None))
                self.trained.append(cell)
            elif key in self.sources:
                self.now.append((cell, Reuse(key, self.sources[key])))
            elif key in self.waiting:
                self.waiting[key].append(cell)
            else:
                self.waiting[key] = []
                self.now.append((cell, Reuse(key)))
                self.trained.append(cell)

    def ready(self) -> list[tuple[Cell, Any]]:
        """The cells that can run now, each with its :class:`~decobench.runs.trajectory.Reuse`
        (None: train without recording), and forget them."""
        now, self.now = self.now, []
        return now

    def finished(self, cell: Cell, reuse: Any, ok: bool) -> list[tuple[Cell, Any]]:
        """``cell`` ended (``ok``: published). The cells waiting for its trajectory are
        re-timed from it; if it failed (or did not record it), they train, each on its own."""
        from decobench.runs.rundir import TRAJECTORY
        from decobench.runs.trajectory import Reuse

        if reuse is None or reuse.source is not None:
            return []
        followers = self.waiting.pop(reuse.key, [])
        source = run_dir(self.out, cell)
        if ok and (source / TRAJECTORY).is_file():
            self.sources[reuse.key] = source
            return [(c, Reuse(reuse.key, source)) for c in followers]
        return [(c, None) for c in followers]


def previous_cells(out: Path, suite: Suite) -> set[str] | None:
    """The run folders of the suite an earlier sweep wrote into ``out`` (None if none did);
    a folder that holds another suite is refused, naming both."""
    manifest = out / MANIFEST
    if not manifest.is_file():
        return None
    try:
        recorded = json.loads(manifest.read_text())
        name, cells = recorded["suite"], {c["run_dir"] for c in recorded["cells"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DecobenchError(f"{manifest} is not a sweep manifest ({exc}); choose another "
                             "--out or remove the file") from exc
    if name != suite.name:
        raise DecobenchError(f"{out} holds the results of suite {name!r}, not {suite.name!r}: "
                             f"choose another --out (e.g. results/{suite.name})")
    return cells


def write_manifest(plan: SweepPlan) -> None:
    write_text_atomic(plan.out / "suite.yaml",
                      yaml.safe_dump(plan.suite.model_dump(mode="json"), sort_keys=False))
    write_text_atomic(plan.out / MANIFEST, json.dumps(
        {"suite": plan.suite.name, "cells": [c.manifest_entry() for c in plan.cells]},
        indent=1) + "\n")


@contextmanager
def sweep_lock(out: Path) -> Iterator[None]:
    """Exclusive use of ``out`` by this sweep (released when the process ends, even killed)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / LOCK_FILE, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DecobenchError(f"another decobench sweep is using {out}; wait for it or "
                                 "choose another --out") from None
        yield


def remove_abandoned_staging(out: Path, cells: list[Cell]) -> list[Path]:
    """Remove the staging folders of cells an interrupted sweep left unfinished, except
    those holding a checkpoint of a cell still in ``cells`` (that cell resumes from it,
    :func:`run_cell`). A folder whose cell left the suite (its configuration changed, which
    changes its name's identity suffix) can never resume and is removed too."""
    from decobench.runs.checkpoint import has_checkpoint

    runs = out / "runs"
    names = {STAGING_PREFIX + cell.name for cell in cells}
    stale = [path for path in (sorted(runs.glob(STAGING_PREFIX + "*")) if runs.is_dir()
                               else [])
             if path.name not in names or not has_checkpoint(path)]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


class SweepInterrupted(KeyboardInterrupt):
    """The sweep was stopped by Ctrl-C or SIGTERM; ``finished`` of ``total`` runs are done
    (the rest resume on the next sweep into the same folder)."""

    def __init__(self, finished: int, total: int) -> None:
        super().__init__(f"{finished} of {total} runs finished")
        self.finished, self.total = finished, total


def _record_failure(out: Path, cell: Cell, error: str) -> None:
    with open(out / FAILURES, "a") as handle:
        handle.write(json.dumps({"id": cell.identity[:12], "run_dir": f"runs/{cell.name}",
                                 "error": error}) + "\n")


INTERRUPT_POLL_S: float = 0.2
"""How often the parallel sweep looks for a Ctrl-C or SIGTERM (:func:`_deferred_interrupts`)."""


@contextmanager
def _deferred_interrupts() -> Iterator[threading.Event]:
    """While the cells run in parallel, Ctrl-C and SIGTERM set an event that the sweep's loop
    checks between waits, instead of raising ``KeyboardInterrupt`` wherever the main thread
    is. Raised inside ``concurrent.futures`` (say between a lock's acquire and its ``with``
    block) it can leave a lock held: seen once in make test, the sweep printed nothing
    after Ctrl-C and it and both workers were still training 15 minutes later. Outside the
    main thread (where no handler can be set) the signals keep their handlers."""
    import signal

    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {signum: signal.signal(signum, lambda *_: stop.set())
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def execute_sweep(plan: SweepPlan, jobs: int, wandb: bool = True, show_progress: bool = True,
                  executor: ExecutorConfig | None = None,
                  queue: CellQueue | None = None) -> list[tuple[Cell, str]]:
    """Run the remaining cells on ``executor`` (default: ``jobs`` local worker processes,
    each with ``max(1, cores // jobs)`` torch threads; or Slurm or Ray,
    :mod:`decobench.sweeps.executors`); returns the failed cells with their errors."""
    from decobench.runs.backends import get_backend
    from decobench.training.progress import SweepProgress

    failures: list[tuple[Cell, str]] = []
    if not plan.todo:
        return failures
    queue = queue or CellQueue(plan)
    executor = executor or ExecutorConfig()
    if not all(get_backend(c.config.backend).parallel_cells for c in plan.todo):
        if executor.name != "local":
            raise DecobenchError(f"--executor {executor.name}: the {plan.todo[0].config.backend} "
                                 "backend runs one cell at a time on this machine; use "
                                 "--executor local")
        return _execute_one_at_a_time(plan, queue, wandb, show_progress)
    runner = executor.build(plan.out, wandb, jobs)
    try:
        with SweepProgress(total=len(plan.cells), done=len(plan.done),
                           enabled=show_progress) as bar, _deferred_interrupts() as stop:
            pending: dict[Future, tuple[Cell, Any]] = {}

            def submit(ready: list[tuple[Cell, Any]]) -> None:
                pending.update(zip(runner.submit(ready), ready, strict=True))
            submit(queue.ready())
            while pending:
                finished, _ = wait(pending, timeout=INTERRUPT_POLL_S,
                                   return_when=FIRST_COMPLETED)
                if stop.is_set():
                    raise KeyboardInterrupt
                for future in finished:
                    cell, reuse = pending.pop(future)
                    ok = _settle(plan, cell, future.result, bar, failures)
                    submit(queue.finished(cell, reuse, ok))
    except KeyboardInterrupt:
        runner.shutdown(cancel=True)
        raise SweepInterrupted(sum(is_done(plan.out, c) for c in plan.cells),
                               len(plan.cells)) from None
    runner.shutdown(cancel=False)
    return failures


def _settle(plan: SweepPlan, cell: Cell, result: Callable[[], dict[str, Any]], bar: Any,
            failures: list[tuple[Cell, str]]) -> bool:
    """Wait for one cell's ``result()``: a line on the progress bar, and a failure recorded
    (the sweep goes on) if it raised; returns whether the cell finished."""
    try:
        summary = result()
    except Exception as exc:  # noqa: BLE001 - recorded and reported, sweep goes on
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        failures.append((cell, error))
        _record_failure(plan.out, cell, error)
        bar.advance(cell.name, f"FAILED: {error}")
        return False
    ttt = summary["time_to_target_s"]
    retimed = " (re-timed)" if summary.get("retimed_from") else ""
    bar.advance(cell.name, f"{summary['status']}{retimed}, time to target "
                + ("not reached" if ttt is None else f"{ttt:.2f} s"))
    return True


def _execute_one_at_a_time(plan: SweepPlan, queue: CellQueue, wandb: bool,
                           show_progress: bool) -> list[tuple[Cell, str]]:
    """Run the remaining cells in this process, one after the other (backends whose runs
    need the whole machine, e.g. the emulated one's n worker processes)."""
    from decobench.training.progress import SweepProgress

    failures: list[tuple[Cell, str]] = []
    try:
        with SweepProgress(total=len(plan.cells), done=len(plan.done),
                           enabled=show_progress) as bar:
            ready = queue.ready()
            while ready:
                cell, reuse = ready.pop(0)
                ok = _settle(plan, cell, functools.partial(run_cell, cell, plan.out, wandb,
                                                           reuse), bar, failures)
                ready += queue.finished(cell, reuse, ok)
    except KeyboardInterrupt:
        raise SweepInterrupted(sum(is_done(plan.out, c) for c in plan.cells),
                               len(plan.cells)) from None
    return failures


def sweep(suite: Suite, out: Path, jobs: int | None = None, data_roots: dict[str, str] | None = None,
          wandb: bool = True, show_progress: bool = True, dry_run: bool = False,
          backend: str | None = None, reuse: bool = True,
          executor: ExecutorConfig | None = None) -> SweepPlan:
    """Plan, lock, clean up, write the manifest and run what remains, on ``backend`` when
    given (cells of a backend without ``parallel_cells`` run one at a time); ``reuse``:
    train each trajectory once and re-time it for the other cells that share it;
    ``executor``: where the cells run (default: local worker processes)."""
    if jobs is None:
        from decobench.training.devices import default_jobs  # imports torch: only when needed

        jobs = default_jobs(os.cpu_count())
    if jobs < 1:
        raise DecobenchError(f"--jobs must be >= 1, got {jobs}")
    created = not out.exists()        # a folder this call made goes again on a bad suite
    with sweep_lock(out):
        try:
            previous = previous_cells(out, suite)
            plan = plan_sweep(suite, out, data_roots, backend=backend, reuse=reuse)
        except BaseException:
            if created:
                shutil.rmtree(out, ignore_errors=True)
            raise
        if previous is not None:
            now = {f"runs/{c.name}" for c in plan.cells}
            added, removed = len(now - previous), len(previous - now)
            if added or removed:
                print(f"suite {suite.name} changed since the last sweep into {out}: "
                      f"{added} run(s) added, {removed} left out (their finished runs stay "
                      "in runs/ but leave the manifest and the report)", file=sys.stderr)
        queue = CellQueue(plan)            # reads the finished runs' trajectories once
        trainings = len(queue.trained)
        retimed = (f" ({trainings} trained, {len(plan.todo) - trainings} re-timed from their "
                   "trajectories)" if trainings < len(plan.todo) else "")
        placement = executor or ExecutorConfig()
        where = {"ray": f"as Ray tasks ({placement.ray_address or 'a local cluster'})",
                 "slurm": "as Slurm jobs"}.get(
            placement.name, f"with {min(jobs, max(1, len(plan.todo)))} worker process(es)")
        print(f"suite {suite.name}: {len(plan.cells)} runs, {len(plan.done)} already finished, "
              f"{len(plan.todo)} to run{retimed} {where} -> {out}", file=sys.stderr)
        if dry_run:
            from decobench.sweeps.cost import describe, suite_cost

            trained = queue.trained
            for cell in plan.todo:
                verb = "run" if cell in trained else "re-time"
                print(f"  would {verb} {cell.name}", file=sys.stderr)
            print(describe(suite_cost([cell.config for cell in trained])), file=sys.stderr)
            if len(trained) < len(plan.todo):
                print(f"  the {len(plan.todo) - len(trained)} re-timed run(s) take seconds "
                      "each and are not counted", file=sys.stderr)
            if created:                    # a dry run leaves nothing behind
                shutil.rmtree(out, ignore_errors=True)
            return plan
        write_manifest(plan)
        stale = remove_abandoned_staging(out, plan.cells)
        if stale:
            print(f"removed {len(stale)} unfinished run folder(s) of an interrupted sweep",
                  file=sys.stderr)
        (out / FAILURES).unlink(missing_ok=True)
        try:
            failures = execute_sweep(plan, jobs, wandb=wandb, show_progress=show_progress,
                                     executor=executor, queue=queue)
        except KeyboardInterrupt:
            remove_abandoned_staging(out, plan.cells)   # the cells in flight start over
            raise
    if failures:
        lines = "\n".join(f"  {cell.name}: {error}" for cell, error in failures)
        raise DecobenchError(f"{len(failures)} of {len(plan.todo)} runs failed (see "
                             f"{out / FAILURES}):\n{lines}")
    return plan
