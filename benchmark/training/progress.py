"""A progress bar for long runs: simulated time, iteration, metric, δ and τ (rich)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class RunProgress:
    """Context manager around :class:`rich.progress.Progress` (a no-op when disabled)."""

    def __init__(self, total: int, metric_name: str, enabled: bool = True) -> None:
        self.metric_name = metric_name
        self._progress = (Progress(TextColumn("[bold]iter"), MofNCompleteColumn(), BarColumn(),
                                   TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                                   console=Console(file=sys.stderr))
                          if enabled else None)
        self._total = total
        self._task = None

    def __enter__(self) -> RunProgress:
        if self._progress is not None:
            self._progress.__enter__()
            self._task = self._progress.add_task("run", total=self._total, status="")
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def update(self, iteration: int, sim_time_s: float, metric: float | None, delta: float,
               staleness: int) -> None:
        if self._progress is None:
            return
        shown = "–" if metric is None else f"{metric:.4g}"
        status = (f"sim {sim_time_s:9.2f}s  {self.metric_name} {shown}  "
                  f"δ {delta:.4g}  τ {staleness}")
        self._progress.update(self._task, completed=iteration, status=status)


class SweepProgress:
    """Overall progress of a sweep: finished runs out of all (a bar unless disabled), and
    each run's outcome as a line."""

    def __init__(self, total: int, done: int, enabled: bool = True) -> None:
        self._console = Console(file=sys.stderr)
        self._progress = (Progress(TextColumn("[bold]runs"), MofNCompleteColumn(), BarColumn(),
                                   TimeElapsedColumn(), console=self._console)
                          if enabled else None)
        self._total, self._done = total, done
        self._task = None

    def __enter__(self) -> SweepProgress:
        if self._progress is not None:
            self._progress.__enter__()
            self._task = self._progress.add_task("sweep", total=self._total,
                                                 completed=self._done)
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def advance(self, name: str, outcome: str) -> None:
        self._done += 1
        self._console.print(f"[{self._done}/{self._total}] {name}: {outcome}", highlight=False,
                            soft_wrap=True, markup=False)
        if self._progress is not None:
            self._progress.advance(self._task)
