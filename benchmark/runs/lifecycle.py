"""One run's directory from its first file to its summary or its failure record
(docs/design.md §9.3).

Both backends write a run through :class:`RunRecord`: the simulated run
(:func:`decobench.runs.runner.execute`) and rank 0 of an emulated run
(:mod:`decobench.emulated.worker`), so the two run directories are written by the same code:

1. :meth:`RunRecord.open`: a new directory, one a launcher already made (``attach``), or an
   interrupted run's, reopened after the iteration its checkpoint holds (its earlier failure
   record removed). Nothing is written before this.
2. :meth:`RunRecord.begin`, once the model's size is known: ``config.yaml`` (the resolved
   config), ``trace.csv`` where the network is not a trace file, any backend files (the
   emulated probe), the tracker, and a fresh ``metrics.jsonl.partial``.
3. :meth:`RunRecord.log` per metrics row (to the tracker too, unless ``track=False``).
4. :meth:`RunRecord.finish`: ``metrics.jsonl`` published, the tracker finished,
   ``summary.json`` written last; or :meth:`RunRecord.fail`: the partial metrics kept, the
   tracker told, and ``failure.json`` written by :func:`record_failure`, the one writer of
   that file (its schema: :data:`FAILURE_FIELDS`).

Checkpoints stay with their own classes (:mod:`decobench.runs.checkpoint`): a backend saves
and removes them; the record only knows the run directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from decobench.atomicio import write_text_atomic
from decobench.netem.trace import Trace, write_trace
from decobench.runs.rundir import FAILURE, TRACE_CSV, RunDirectory
from decobench.runs.tracking import NullTracker, RunTracker, TrackerFactory

FAILURE_FIELDS = ("status", "backend", "error", "error_type", "lost_ranks", "reported_by",
                  "exit_statuses", "earlier_error")
"""``failure.json``'s keys, for every writer: ``status`` is ``failed``; ``error`` the
one-line reason and ``error_type`` its exception class (None for a launcher's own finding);
``lost_ranks`` the emulated ranks that died first; ``reported_by`` who wrote it (``rank 0``,
``launcher``, ``simulated``); ``exit_statuses`` each rank's exit status (launcher);
``earlier_error`` the error a record already there held (rank 0's, when the launcher writes
after it)."""


def record_failure(out: Path, error: str, *, backend: str, reported_by: str,
                   error_type: str | None = None, lost_ranks: Sequence[int] = (),
                   exit_statuses: Mapping[int, int | None] | None = None) -> dict[str, Any]:
    """Write ``out/failure.json`` (:data:`FAILURE_FIELDS`); a record already there is merged:
    its error becomes ``earlier_error`` and its lost ranks stand when this writer names none.
    Returns the record."""
    path = out / FAILURE
    earlier: dict[str, Any] = {}
    if path.is_file():
        try:
            earlier = json.loads(path.read_text())
        except (OSError, ValueError):
            earlier = {}
    record = {"status": "failed", "backend": backend, "error": error,
              "error_type": error_type,
              "lost_ranks": list(lost_ranks) or list(earlier.get("lost_ranks") or []),
              "reported_by": reported_by,
              "exit_statuses": {str(k): v for k, v in (exit_statuses or {}).items()},
              "earlier_error": earlier.get("error")}
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(record, indent=2) + "\n")
    return record


class RunRecord:
    """The run directory, tracker and failure record of one run (module docstring)."""

    def __init__(self, out: Path, backend: str,
                 tracker_factory: TrackerFactory | None = None) -> None:
        self.out = Path(out)
        self.backend = backend
        self.tracker_factory = tracker_factory
        self.tracker: RunTracker = NullTracker()
        self.directory: RunDirectory | None = None
        self._fresh = True

    def open(self, *, resume_after: int | None = None, overwrite: bool = False,
             attach: bool = False) -> None:
        """Create the directory (``overwrite``: replace a finished run's), fill one a launcher
        made (``attach``), or reopen an interrupted run's after iteration ``resume_after``."""
        if resume_after is not None:
            (self.out / FAILURE).unlink(missing_ok=True)       # the interrupted attempt's
            self.directory = RunDirectory.resume(self.out, resume_after)
        elif attach:
            self.directory = RunDirectory.attach(self.out)
        else:
            self.directory = RunDirectory(self.out, overwrite=overwrite)
        self._fresh = resume_after is None

    def begin(self, resolved: dict[str, Any], trace: Trace | None = None, trace_note: str = "",
              files: Mapping[str, str] | None = None) -> None:
        """``config.yaml``, ``trace.csv`` (``trace``: the network, where it is not a trace
        file the config names), ``files`` (name -> text), the tracker, fresh metrics."""
        directory = self._directory()
        directory.write_config(resolved)
        for name, text in (files or {}).items():
            write_text_atomic(directory.path / name, text)
        if trace is not None:
            write_trace(trace, directory.path / TRACE_CSV,
                        comment=f"network of this run: {trace_note}")
        if self.tracker_factory:
            self.tracker = self.tracker_factory(resolved, directory.path)
        if self._fresh:
            directory.open_metrics()

    def log(self, row: dict[str, Any], track: bool = True) -> None:
        self._directory().log(row)
        if track:
            self.tracker.log(row)

    def restart_metrics(self, after: int | None) -> None:
        """Write the metrics again from iteration ``after`` on (None: from the start), keeping
        the rows up to it: a refine pass replaying part of the run."""
        directory = self._directory()
        directory.abandon_metrics()
        if after is None:
            directory.open_metrics()
        else:
            self.directory = RunDirectory.resume(self.out, after)

    def fail(self, exc: BaseException) -> None:
        """The run failed: keep its partial metrics, tell the tracker, and write
        ``failure.json`` (the lost ranks an emulated error names, if any)."""
        if self.directory is not None:
            self.directory.abandon_metrics()
            self.tracker.fail(exc)
        record_failure(self.out, str(exc) or type(exc).__name__, backend=self.backend,
                       reported_by="rank 0" if self.backend == "emulated" else self.backend,
                       error_type=type(exc).__name__, lost_ranks=getattr(exc, "lost_ranks", ()))

    def finish(self, summary: dict[str, Any]) -> None:
        """Publish the metrics, finish the tracker and write ``summary.json`` (last: a run
        directory with a summary is complete)."""
        directory = self._directory()
        directory.close_metrics()
        self.tracker.finish(summary)
        directory.write_summary(summary)

    def _directory(self) -> RunDirectory:
        assert self.directory is not None, "RunRecord.open() first"
        return self.directory
