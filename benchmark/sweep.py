"""``decobench sweep``: run a suite's cells in parallel worker processes, resumably.

Layout of the results folder ``DIR``::

    DIR/suite.yaml        the suite as run (resolved, for the record)
    DIR/manifest.json     every cell: id, run_dir, task, method, label, condition, workers, seed
    DIR/traces/           one-row traces of the suite's ``constant`` conditions
    DIR/runs/NAME/        one complete run directory per finished cell
    DIR/failures.jsonl    cells that crashed (the report refuses to run while any is missing)

A cell's identity is the SHA-256 of its resolved configuration and seed
(:func:`decobench.suite.identity`); its directory name ends with the first 12 hex digits.
Ctrl-C (SIGINT) or SIGTERM stops a sweep at once: queued cells are cancelled, the worker
processes of the cells in flight are killed, and :class:`SweepInterrupted` says how many
runs are finished; rerunning resumes.
A cell runs in ``runs/.staging-NAME`` and is renamed to ``runs/NAME`` only when it is
complete, so ``runs/NAME`` exists exactly when the run finished: killing the sweep (or the
machine) at any moment loses at most the cells in flight since their last checkpoint
(``checkpoint_every_s``, :mod:`decobench.checkpoint`). A rerun skips every finished cell,
continues each interrupted cell whose staging folder holds a checkpoint of it, and removes
the other abandoned staging folders. One sweep at a time may use a folder (a lock file says
so).
"""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import shutil
import sys
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from decobench.atomicio import write_text_atomic
from decobench.errors import DecobenchError
from decobench.rundir import SUMMARY
from decobench.suite import Cell, Suite, expand_cells, write_constant_traces

STAGING_PREFIX = ".staging-"
LOCK_FILE = ".sweep.lock"
MANIFEST = "manifest.json"
FAILURES = "failures.jsonl"


@dataclass(frozen=True)
class SweepPlan:
    """A suite resolved against a results folder: which cells exist and which remain."""

    suite: Suite
    out: Path
    cells: list[Cell]
    done: list[Cell]
    todo: list[Cell]


def run_dir(out: Path, cell: Cell) -> Path:
    return out / "runs" / cell.name


def is_done(out: Path, cell: Cell) -> bool:
    return (run_dir(out, cell) / SUMMARY).is_file()


def plan_sweep(suite: Suite, out: Path, data_roots: dict[str, str] | None = None,
               backend: str | None = None) -> SweepPlan:
    """Expand and check every cell (:func:`decobench.runner.prepare`: options, targets,
    traces, data; and the backend's own check, e.g. root for the emulated one) before
    anything runs; a bad cell is an error naming it."""
    from decobench.backends import get_backend
    from decobench.runner import prepare

    write_constant_traces(suite, out / "traces")
    cells = expand_cells(suite, out / "traces", data_roots, backend=backend)
    for cell in cells:
        try:
            run = prepare(cell.config)
            if not is_done(out, cell):
                get_backend(cell.config.backend).check(run)
        except DecobenchError as exc:
            raise DecobenchError(f"suite {suite.name}: cell {cell.name} ({cell.experiment}): "
                                 f"{exc}") from exc
    done = [c for c in cells if is_done(out, c)]
    todo = [c for c in cells if not is_done(out, c)]
    return SweepPlan(suite, out, cells, done, todo)


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


def remove_abandoned_staging(out: Path) -> list[Path]:
    """Remove the staging folders of cells an interrupted sweep left unfinished, except
    those holding a checkpoint (their cell resumes from it, :func:`run_cell`)."""
    from decobench.checkpoint import has_checkpoint

    runs = out / "runs"
    stale = [path for path in (sorted(runs.glob(STAGING_PREFIX + "*")) if runs.is_dir()
                               else []) if not has_checkpoint(path)]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


class SweepInterrupted(KeyboardInterrupt):
    """The sweep was stopped by Ctrl-C or SIGTERM; ``finished`` of ``total`` runs are done
    (the rest resume on the next sweep into the same folder)."""

    def __init__(self, finished: int, total: int) -> None:
        super().__init__(f"{finished} of {total} runs finished")
        self.finished, self.total = finished, total


def _init_worker(threads: int) -> None:
    """Worker set-up: torch threads; Ctrl-C is the sweep's to handle (a terminal sends it
    to the workers too); and (Linux) die with the sweep process, so killing the sweep leaves
    no orphan still training."""
    import signal

    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(threads)
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass
        if os.getppid() == 1:              # the sweep died before the line above
            os._exit(1)


def run_cell(cell: Cell, out: Path, wandb: bool) -> dict[str, Any]:
    """Run one cell on its backend in a staging folder and publish it by renaming (in a
    worker process, or in the sweep's own process for backends that run one cell at a
    time)."""
    from decobench.backends import get_backend
    from decobench.runner import prepare

    final = run_dir(out, cell)
    staging = final.parent / f"{STAGING_PREFIX}{cell.name}"
    config = cell.config.model_copy(update={"out": str(final)})
    run = replace(prepare(config), out=staging)
    resume = _resumable(staging, cell.identity)
    summary = get_backend(config.backend).run(run, overwrite=not resume, show_progress=False,
                                              wandb=wandb, **({"resume": True} if resume else {}))
    try:
        os.rename(staging, final)
    except OSError:
        if not is_done(out, cell):         # not published by another process meanwhile
            raise
        shutil.rmtree(staging, ignore_errors=True)
    return summary


def _resumable(staging: Path, expected: str) -> bool:
    """Whether the staging folder of an interrupted cell holds a checkpoint of this cell (an
    emulated cell: per-rank checkpoints, which the ranks check when they load them)."""
    from decobench.checkpoint import CHECKPOINT, has_rank_checkpoints, load_checkpoint

    if has_rank_checkpoints(staging):
        return not (staging / SUMMARY).is_file()
    try:
        load_checkpoint(staging / CHECKPOINT, expected)   # none, finished or another run's
    except DecobenchError:
        return False
    return True


def _record_failure(out: Path, cell: Cell, error: str) -> None:
    with open(out / FAILURES, "a") as handle:
        handle.write(json.dumps({"id": cell.identity[:12], "run_dir": f"runs/{cell.name}",
                                 "error": error}) + "\n")


def execute_sweep(plan: SweepPlan, jobs: int, wandb: bool = True,
                  show_progress: bool = True) -> list[tuple[Cell, str]]:
    """Run the remaining cells with ``jobs`` worker processes; returns the failed cells with
    their errors. Each worker uses ``max(1, cores // jobs)`` torch threads."""
    from decobench.backends import get_backend
    from decobench.progress import SweepProgress

    failures: list[tuple[Cell, str]] = []
    if not plan.todo:
        return failures
    if not all(get_backend(c.config.backend).parallel_cells for c in plan.todo):
        return _execute_one_at_a_time(plan, wandb, show_progress)
    threads = max(1, (os.cpu_count() or 1) // jobs)
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_init_worker,
                               initargs=(threads,))
    try:
        with SweepProgress(total=len(plan.cells), done=len(plan.done),
                           enabled=show_progress) as bar:
            pending: dict[Future, Cell] = {pool.submit(run_cell, c, plan.out, wandb): c
                                           for c in plan.todo}
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    _settle(plan, pending.pop(future), future.result, bar, failures)
    except KeyboardInterrupt:
        _stop_pool(pool)
        raise SweepInterrupted(sum(is_done(plan.out, c) for c in plan.cells),
                               len(plan.cells)) from None
    pool.shutdown(wait=True)
    return failures


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel the queued cells and kill the worker processes of the cells in flight (their
    staging folders are removed by the caller; a finished cell was already published)."""
    pool.shutdown(wait=False, cancel_futures=True)
    workers = multiprocessing.active_children()
    for process in workers:
        process.kill()
    for process in workers:
        process.join(timeout=5)


def _settle(plan: SweepPlan, cell: Cell, result: Callable[[], dict[str, Any]], bar: Any,
            failures: list[tuple[Cell, str]]) -> None:
    """Wait for one cell's ``result()``: a line on the progress bar, and a failure recorded
    (the sweep goes on) if it raised."""
    try:
        summary = result()
    except Exception as exc:  # noqa: BLE001 - recorded and reported, sweep goes on
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        failures.append((cell, error))
        _record_failure(plan.out, cell, error)
        bar.advance(cell.name, f"FAILED: {error}")
        return
    ttt = summary["time_to_target_s"]
    bar.advance(cell.name, f"{summary['status']}, time to target "
                + ("not reached" if ttt is None else f"{ttt:.2f} s"))


def _execute_one_at_a_time(plan: SweepPlan, wandb: bool,
                           show_progress: bool) -> list[tuple[Cell, str]]:
    """Run the remaining cells in this process, one after the other (backends whose runs
    need the whole machine, e.g. the emulated one's n worker processes)."""
    from decobench.progress import SweepProgress

    failures: list[tuple[Cell, str]] = []
    try:
        with SweepProgress(total=len(plan.cells), done=len(plan.done),
                           enabled=show_progress) as bar:
            for cell in plan.todo:
                _settle(plan, cell, lambda cell=cell: run_cell(cell, plan.out, wandb), bar,
                        failures)
    except KeyboardInterrupt:
        raise SweepInterrupted(sum(is_done(plan.out, c) for c in plan.cells),
                               len(plan.cells)) from None
    return failures


def sweep(suite: Suite, out: Path, jobs: int | None = None, data_roots: dict[str, str] | None = None,
          wandb: bool = True, show_progress: bool = True, dry_run: bool = False,
          backend: str | None = None) -> SweepPlan:
    """Plan, lock, clean up, write the manifest and run what remains, on ``backend`` when
    given (cells of a backend without ``parallel_cells`` run one at a time)."""
    if jobs is None:
        jobs = os.cpu_count() or 1
    if jobs < 1:
        raise DecobenchError(f"--jobs must be >= 1, got {jobs}")
    created = not out.exists()        # a folder this call made goes again on a bad suite
    with sweep_lock(out):
        try:
            previous = previous_cells(out, suite)
            plan = plan_sweep(suite, out, data_roots, backend=backend)
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
        print(f"suite {suite.name}: {len(plan.cells)} runs, {len(plan.done)} already finished, "
              f"{len(plan.todo)} to run with {min(jobs, max(1, len(plan.todo)))} worker "
              f"process(es) -> {out}", file=sys.stderr)
        if dry_run:
            from decobench.cost import describe, suite_cost

            for cell in plan.todo:
                print(f"  would run {cell.name}", file=sys.stderr)
            print(describe(suite_cost([cell.config for cell in plan.todo])), file=sys.stderr)
            if created:                    # a dry run leaves nothing behind
                shutil.rmtree(out, ignore_errors=True)
            return plan
        write_manifest(plan)
        stale = remove_abandoned_staging(out)
        if stale:
            print(f"removed {len(stale)} unfinished run folder(s) of an interrupted sweep",
                  file=sys.stderr)
        (out / FAILURES).unlink(missing_ok=True)
        try:
            failures = execute_sweep(plan, jobs, wandb=wandb, show_progress=show_progress)
        except KeyboardInterrupt:
            remove_abandoned_staging(out)          # the cells in flight start over
            raise
    if failures:
        lines = "\n".join(f"  {cell.name}: {error}" for cell, error in failures)
        raise DecobenchError(f"{len(failures)} of {len(plan.todo)} runs failed (see "
                             f"{out / FAILURES}):\n{lines}")
    return plan
