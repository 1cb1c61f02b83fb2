"""Where a sweep's cells run: this machine's worker processes, a Slurm cluster, or Ray.

Each executor turns cells into :class:`concurrent.futures.Future` objects of
:func:`decobench.sweeps.cell.run_cell`, so one loop in :mod:`decobench.sweeps.sweep` drives all of them
(trajectory reuse included: a cell waiting for another's trajectory is submitted when that
one has finished). Every executor writes the same run directories into the results folder,
which a cluster's nodes must see at the same path (a shared filesystem); a killed cell
restarts from its checkpoint (``checkpoint_every_s``) when it is retried.

- ``local`` (default): ``jobs`` worker processes here, each with cores / jobs torch threads
  and, where torch sees GPUs, one GPU (round robin).
- ``slurm``: `submitit <https://github.com/facebookincubator/submitit>`_ submits each wave of
  ready cells as one job array per resource set (the suite's ``resources``: CPUs, GPUs,
  memory, time limit), job logs in ``DIR/slurm/``; a job that dies without a result (killed,
  preempted, node failure) is submitted again up to ``retries`` times.
- ``ray``: each cell is a Ray task (``num_cpus``/``num_gpus``/``memory`` from ``resources``)
  on the cluster at ``ray_address`` (None: a local one started here), retried by Ray up to
  ``retries`` times when its worker dies.
"""

from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decobench.errors import DecobenchError
from decobench.sweeps.cell import init_worker, run_cell

EXECUTORS = ("local", "slurm", "ray")

Ready = Sequence[tuple[Any, Any]]
"""Cells with their :class:`~decobench.runs.trajectory.Reuse` (or None), as
:class:`~decobench.sweeps.sweep.CellQueue` hands them out."""


def run_cell_on(threads: int, cell: Any, out: str, wandb: bool, reuse: Any) -> dict[str, Any]:
    """:func:`decobench.sweeps.cell.run_cell` in a cluster's worker, with ``threads`` torch threads
    (the cell's CPUs)."""
    import torch

    torch.set_num_threads(threads)
    return run_cell(cell, Path(out), wandb, reuse)


def _cluster_module(module: str, executor: str) -> Any:
    """Import the package an executor needs, or say how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise DecobenchError(f"--executor {executor} needs {module}: pip install "
                             f"'decobench[cluster]' (or pip install {module})") from None


class CellExecutor(ABC):
    """Runs cells somewhere; :meth:`submit` returns one future per cell, in order."""

    name: str

    @abstractmethod
    def submit(self, ready: Ready) -> list[Future]:
        """Start these cells (each a future of its summary)."""

    @abstractmethod
    def shutdown(self, cancel: bool) -> None:
        """Wait for nothing more; ``cancel``: stop what is queued or running (Ctrl-C)."""


class LocalExecutor(CellExecutor):
    """``jobs`` spawned worker processes on this machine (the default)."""

    name = "local"

    def __init__(self, out: Path, wandb: bool, jobs: int) -> None:
        import multiprocessing

        from decobench.training.devices import visible_gpus  # imports torch: only here

        self.out, self.wandb = out, wandb
        context = multiprocessing.get_context("spawn")
        self.pool = ProcessPoolExecutor(
            max_workers=jobs, mp_context=context, initializer=init_worker,
            initargs=(max(1, (os.cpu_count() or 1) // jobs), context.Value("i", 0),
                      visible_gpus()))

    def submit(self, ready: Ready) -> list[Future]:
        return [self.pool.submit(run_cell, cell, self.out, self.wandb, reuse)
                for cell, reuse in ready]

    def shutdown(self, cancel: bool) -> None:
        """On cancel: drop the queued cells and kill the worker processes of those in flight
        (the caller removes their staging folders)."""
        import multiprocessing

        if not cancel:
            self.pool.shutdown(wait=True)
            return
        workers = multiprocessing.active_children()   # killed first: nothing goes on training
        for process in workers:
            process.kill()
        for process in workers:
            process.join(timeout=5)
        # wait=True joins the pool's manager thread, which sees the dead workers and closes
        # its wake-up pipe. Left running (wait=False), it could close that pipe while the
        # interpreter's exit hook writes to it: "Bad file descriptor" after exit 130.
        self.pool.shutdown(wait=True, cancel_futures=True)


class RayExecutor(CellExecutor):
    """Each cell a Ray task on the cluster at ``address`` (None: start one here)."""

    name = "ray"

    def __init__(self, out: Path, wandb: bool, address: str | None, retries: int) -> None:
        ray = _cluster_module("ray", "ray")
        self.ray, self.out, self.wandb, self.retries = ray, out, wandb, retries
        try:
            ray.init(address=address, log_to_driver=True, ignore_reinit_error=True,
                     include_dashboard=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise DecobenchError(f"--ray-address {address}: cannot connect to a Ray cluster "
                                 f"({str(exc).splitlines()[0] if str(exc) else exc})") from exc
        self.task = ray.remote(run_cell_on)        # named per cell: ray::CELL_NAME
        self.refs: list[Any] = []

    def submit(self, ready: Ready) -> list[Future]:
        futures = []
        for cell, reuse in ready:
            r = cell.resources
            options: dict[str, Any] = {"num_cpus": r.cpus, "num_gpus": r.gpus,
                                       "max_retries": self.retries, "name": cell.name}
            if r.mem_gb is not None:
                options["memory"] = int(r.mem_gb * 2**30)
            ref = self.task.options(**options).remote(r.cpus, cell, str(self.out),
                                                      self.wandb, reuse)
            self.refs.append(ref)
            futures.append(ref.future())
        return futures

    def shutdown(self, cancel: bool) -> None:
        if cancel:
            for ref in self.refs:
                try:
                    self.ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - finished or already gone
                    pass
        self.ray.shutdown()


class SlurmExecutor(CellExecutor):
    """Job arrays through submitit; a job that ends without a result is submitted again."""

    name = "slurm"

    def __init__(self, out: Path, wandb: bool, partition: str | None, retries: int) -> None:
        submitit = _cluster_module("submitit", "slurm")
        self.submitit, self.out, self.wandb, self.retries = submitit, out, wandb, retries
        self.partition = partition
        self.executor = submitit.AutoExecutor(folder=out / "slurm" / "%j", cluster="slurm")
        self.lock = threading.Lock()                # update_parameters + submit go together
        self.waiters = ThreadPoolExecutor(max_workers=64, thread_name_prefix="slurm-wait")
        self.jobs: list[Any] = []
        self.cancelled = False

    def _parameters(self, resources: Any) -> None:
        parameters: dict[str, Any] = {"timeout_min": resources.timeout_min,
                                      "cpus_per_task": resources.cpus,
                                      "slurm_job_name": "decobench"}
        if resources.gpus:
            parameters["gpus_per_node"] = resources.gpus
        if resources.mem_gb is not None:
            parameters["mem_gb"] = resources.mem_gb
        if self.partition:
            parameters["slurm_partition"] = self.partition
        self.executor.update_parameters(**parameters)

    def _args(self, cell: Any, reuse: Any) -> tuple[Any, ...]:
        return (cell.resources.cpus, cell, str(self.out), self.wandb, reuse)

    def submit(self, ready: Ready) -> list[Future]:
        groups: dict[Any, list[int]] = {}
        for i, (cell, _) in enumerate(ready):
            groups.setdefault(cell.resources, []).append(i)
        jobs: dict[int, Any] = {}
        with self.lock:
            for resources, members in groups.items():
                self._parameters(resources)
                with self.executor.batch():         # one job array per resource set
                    pending = [self.executor.submit(run_cell_on, *self._args(*ready[i]))
                               for i in members]
                jobs.update(zip(members, pending, strict=True))
            self.jobs += jobs.values()
        return [self.waiters.submit(self._result, jobs[i], *ready[i]) for i in range(len(ready))]

    def _result(self, job: Any, cell: Any, reuse: Any) -> dict[str, Any]:
        """The job's summary; a job killed before it returned is submitted again (the cell
        resumes from its checkpoint) up to ``retries`` times."""
        uncompleted = self.submitit.core.utils.UncompletedJobError
        for attempt in range(self.retries + 1):
            try:
                return job.result()
            except uncompleted:
                if self.cancelled or attempt == self.retries:
                    raise
            with self.lock:
                self._parameters(cell.resources)
                job = self.executor.submit(run_cell_on, *self._args(cell, reuse))
                self.jobs.append(job)
        raise AssertionError("unreachable")

    def shutdown(self, cancel: bool) -> None:
        if cancel:
            self.cancelled = True
            for job in self.jobs:
                try:
                    job.cancel(check=False)
                except Exception:  # noqa: BLE001 - finished or already gone
                    pass
        self.waiters.shutdown(wait=not cancel, cancel_futures=cancel)


@dataclass(frozen=True)
class ExecutorConfig:
    """Which executor a sweep uses (``decobench sweep --executor``) and its settings."""

    name: str = "local"
    ray_address: str | None = None
    slurm_partition: str | None = None
    retries: int = 2

    def __post_init__(self) -> None:
        if self.name not in EXECUTORS:
            raise DecobenchError(f"--executor {self.name!r}: choose one of "
                                 f"{', '.join(EXECUTORS)}")
        if self.retries < 0:
            raise DecobenchError(f"--retries must be >= 0, got {self.retries}")
        if self.ray_address is not None and self.name != "ray":
            raise DecobenchError("--ray-address needs --executor ray")
        if self.slurm_partition is not None and self.name != "slurm":
            raise DecobenchError("--slurm-partition needs --executor slurm")

    def build(self, out: Path, wandb: bool, jobs: int) -> CellExecutor:
        """The executor for a sweep into ``out`` (``jobs``: the local executor's processes)."""
        if self.name == "ray":
            return RayExecutor(out.resolve(), wandb, self.ray_address, self.retries)
        if self.name == "slurm":
            return SlurmExecutor(out.resolve(), wandb, self.slurm_partition, self.retries)
        return LocalExecutor(out, wandb, jobs)


__all__ = ["EXECUTORS", "CellExecutor", "ExecutorConfig", "LocalExecutor", "RayExecutor",
           "SlurmExecutor", "run_cell_on"]
