"""Helpers for the end-to-end tests that sweep small suites (imported by the test modules,
not a conftest): what makes a sweep cheap in a test without changing what it computes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def cells_in_this_process() -> Iterator[None]:
    """Sweeps started inside run their cells in this process, one at a time, instead of in
    spawned worker processes. Each spawned worker imports torch and warms the gradient engine
    afresh, about 5 s of CPU, where a test's cell trains in about a second; what a cell
    computes and writes is the same either way (``decobench.sweeps.cell.run_cell``). The worker
    pool itself (spawning, threads, Ctrl-C, a killed worker) is tested with real processes:
    test_sweep.py, test_executors.py, test_sweep_smoke.py and the CLI subprocesses of
    test_ci_workflow.py and test_trajectory.py's killed sweep (make test-slow)."""
    from concurrent.futures import ThreadPoolExecutor

    import decobench.sweeps.executors as executors

    def one_thread(max_workers: int, **_process_pool_options: object) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="decobench-cell")

    patch = pytest.MonkeyPatch()
    patch.setattr(executors, "ProcessPoolExecutor", one_thread)
    try:
        yield
    finally:
        patch.undo()
