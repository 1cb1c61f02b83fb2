"""One cell of a sweep, run where an executor put it (docs/suites.md).

:func:`run_cell` runs the cell on its backend in a staging folder and publishes it by
renaming; :func:`init_worker` sets up a local worker process. Both are what the executors
(:mod:`decobench.sweeps.executors`) start and what the sweep (:mod:`decobench.sweeps.sweep`)
drives, so neither of those imports the other for them.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from decobench.errors import DecobenchError
from decobench.runs.rundir import SUMMARY
from decobench.sweeps.suite import Cell

STAGING_PREFIX = ".staging-"
"""A cell trains in ``runs/.staging-NAME`` and is renamed to ``runs/NAME`` when it ends."""


def run_dir(out: Path, cell: Cell) -> Path:
    return out / "runs" / cell.name


def is_done(out: Path, cell: Cell) -> bool:
    return (run_dir(out, cell) / SUMMARY).is_file()


def init_worker(threads: int, slots: Any = None, gpus: int = 0) -> None:
    """Worker set-up: torch threads; on a machine with ``gpus`` GPUs, one of them (the
    worker takes the next number from the shared counter ``slots`` and sees only GPU
    ``number % gpus`` through ``CUDA_VISIBLE_DEVICES``, set before CUDA starts in this
    spawned process); Ctrl-C is the sweep's to handle (a terminal sends it to the workers
    too); and (Linux) die with the sweep process, so killing the sweep leaves no orphan
    still training."""
    import signal

    if gpus and slots is not None:
        with slots.get_lock():
            number = slots.value
            slots.value += 1
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = visible.split(",") if visible else [str(i) for i in range(gpus)]
        os.environ["CUDA_VISIBLE_DEVICES"] = ids[number % len(ids)]

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


def run_cell(cell: Cell, out: Path, wandb: bool, reuse: Any = None) -> dict[str, Any]:
    """Run one cell on its backend in a staging folder and publish it by renaming (in a
    worker process, or in the sweep's own process for backends that run one cell at a
    time); ``reuse``: record its trajectory, or re-time one (:class:`decobench.runs.trajectory.Reuse`)."""
    from decobench.runs.backends import get_backend
    from decobench.runs.runner import prepare

    final = run_dir(out, cell)
    staging = final.parent / f"{STAGING_PREFIX}{cell.name}"
    config = cell.config.model_copy(update={"out": str(final)})
    run = replace(prepare(config), out=staging)
    retime = reuse is not None and reuse.source is not None      # quick: never resumed
    resume = not retime and _resumable(staging, cell.identity)
    extra = {**({"resume": True} if resume else {}), **({"reuse": reuse} if reuse else {})}
    summary = get_backend(config.backend).run(run, overwrite=not resume, show_progress=False,
                                              wandb=wandb, **extra)
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
    from decobench.runs.checkpoint import has_rank_checkpoints, load_checkpoint
    from decobench.runs.rundir import CHECKPOINT

    if has_rank_checkpoints(staging):
        return not (staging / SUMMARY).is_file()
    try:
        load_checkpoint(staging / CHECKPOINT, expected)   # none, finished or another run's
    except DecobenchError:
        return False
    return True
