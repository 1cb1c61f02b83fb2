"""The run directory contract (docs/design.md §9.3): its file names, its writer
(:class:`RunDirectory`) and its one reader (:func:`read_summary`, :func:`read_config`,
:func:`read_metrics`), which the report, ``compare``, resume and the launcher share.

Files appear complete or not at all: ``config.yaml`` and ``summary.json`` are written to a
temporary file and renamed; metrics stream to ``metrics.jsonl.partial`` and are renamed to
``metrics.jsonl`` when the run ends. A crashed run therefore leaves no ``summary.json``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from decobench.atomicio import check_output_dir, write_text_atomic
from decobench.errors import DecobenchError

CONFIG, METRICS, SUMMARY = "config.yaml", "metrics.jsonl", "summary.json"
PARTIAL_SUFFIX = ".partial"
TRACE_CSV = "trace.csv"
"""The run's network as a trace, where the config does not name a trace file."""
FAILURE = "failure.json"
"""Written instead of ``summary.json`` when a run fails (:mod:`decobench.runs.lifecycle`)."""
CHECKPOINT, RANK_CHECKPOINTS = "checkpoint.pt", "checkpoints"
"""A simulated run's checkpoint file; an emulated run's folder of per-rank ones."""
TRAJECTORY = "trajectory.pt"
"""A trained run's recorded trajectory (:mod:`decobench.runs.trajectory`)."""
WANDB_DIR, WANDB_RECORD = "wandb", "wandb.json"
"""W&B's own folder, and where its run lives (:mod:`decobench.runs.tracking`)."""
PROBE = "network_probe.json"
"""The emulated links' measured goodput and latency before training."""
TC_COMMANDS, TRACE_PLAYER_LOG = "tc_commands.txt", "trace_player.jsonl"
"""The emulated backend's tc commands and each live change of the links."""
LAUNCH_DIR, WORKER_LOGS = "launch", "workers"
"""The emulated launcher's run.yaml and each rank's log."""
START_FILE = ".clock_start"
"""When the emulated ranks' shared clock started."""
DELAY_REPORT, QDISC_REPORT = "nfqueue_delay.json", "qdisc_stats.json"
"""The NFQUEUE delayers' release lags and the qdiscs' counters of an emulated run."""
MANIFEST = "manifest.json"
"""A sweep's results folder: every cell of its suite and its run directory."""
RUN_FILES = frozenset({CONFIG, METRICS, METRICS + PARTIAL_SUFFIX, TRACE_CSV, WANDB_DIR,
                       CHECKPOINT, RANK_CHECKPOINTS, FAILURE, PROBE, TC_COMMANDS,
                       TRACE_PLAYER_LOG, LAUNCH_DIR, WORKER_LOGS, START_FILE, TRAJECTORY})
"""Names a run directory may hold before its summary is written: a folder holding only
these and no summary is an unfinished run, which a new run replaces without --overwrite."""


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def dumps_row(row: dict[str, Any]) -> str:
    """One metrics row as compact, key-sorted JSON (non-finite floats made explicit)."""
    return json.dumps({k: _json_safe(v) for k, v in row.items()}, sort_keys=True,
                      separators=(",", ":"))


class RunDirectory:
    """Creates and fills one run's directory."""

    def __init__(self, path: str | Path, overwrite: bool = False) -> None:
        self.path = Path(path)
        check_output_dir(self.path, "--out")
        if self.path.exists() and any(self.path.iterdir()):
            names = {entry.name for entry in self.path.iterdir()
                     if not (entry.name.startswith(".") and entry.name.endswith(".tmp"))}
            unfinished = names <= RUN_FILES                 # an interrupted or failed run
            if not (overwrite or unfinished):
                raise DecobenchError(f"run directory {self.path} already exists and is not "
                                     "empty; pass --overwrite or choose another --out")
            shutil.rmtree(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._metrics = None

    @classmethod
    def attach(cls, path: str | Path) -> RunDirectory:
        """Fill a directory a launcher has already created and checked (the emulated
        backend's launcher puts the network probe there before the workers start)."""
        rundir = cls.__new__(cls)
        rundir.path = Path(path)
        rundir.path.mkdir(parents=True, exist_ok=True)
        rundir._metrics = None
        return rundir

    @classmethod
    def resume(cls, path: str | Path, iteration: int) -> RunDirectory:
        """Reopen an interrupted run's directory to continue after ``iteration``: its
        partial metrics keep the rows up to that iteration (later ones, written after the
        checkpoint, are dropped) and new rows are appended."""
        rundir = cls.__new__(cls)
        rundir.path = Path(path)
        partial = rundir.path / (METRICS + PARTIAL_SUFFIX)
        kept = []
        for row in read_metrics(rundir.path, partial=True):
            if row.get("iteration", 0) > iteration:
                break
            kept.append(dumps_row(row) + "\n")       # as written: compact, sorted keys
        write_text_atomic(partial, "".join(kept))
        rundir._metrics = open(partial, "a", buffering=1)  # noqa: SIM115
        return rundir

    def write_config(self, config: dict[str, Any]) -> None:
        write_text_atomic(self.path / CONFIG, yaml.safe_dump(config, sort_keys=True))

    def open_metrics(self) -> None:
        # line-buffered, so a live run can be followed with `tail -f`
        self._metrics = open(self.path / (METRICS + PARTIAL_SUFFIX), "w",  # noqa: SIM115
                             buffering=1)

    def log(self, row: dict[str, Any]) -> None:
        assert self._metrics is not None, "open_metrics() first"
        self._metrics.write(dumps_row(row) + "\n")

    def close_metrics(self) -> None:
        """Flush and publish ``metrics.jsonl`` (atomic rename)."""
        if self._metrics is None:
            return
        self._metrics.flush()
        os.fsync(self._metrics.fileno())
        self._metrics.close()
        self._metrics = None
        os.replace(self.path / (METRICS + PARTIAL_SUFFIX), self.path / METRICS)

    def abandon_metrics(self) -> None:
        """Close the partial metrics file of a crashed run (it stays ``.partial``)."""
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_text_atomic(self.path / SUMMARY,
                          json.dumps({k: _json_safe(v) for k, v in summary.items()},
                                     indent=2, sort_keys=True) + "\n")


def read_json(path: Path) -> Any:
    """A JSON file's content; an unreadable file is a one-line DecobenchError naming it."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DecobenchError(f"{path}: cannot read ({exc})") from None


def read_metrics(path: str | Path, partial: bool = False) -> list[dict[str, Any]]:
    """The rows of a run's ``metrics.jsonl``; a line that is not JSON is a one-line
    DecobenchError naming the file and line. ``partial``: a live or interrupted run's
    ``metrics.jsonl.partial`` (none when it is missing), read up to a line the interruption
    cut, as a resumed run keeps it (:meth:`RunDirectory.resume`)."""
    file = Path(path) / (METRICS + (PARTIAL_SUFFIX if partial else ""))
    if partial and not file.is_file():
        return []
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DecobenchError(f"{file}: cannot read ({exc})") from None
    rows = []
    for lineno, line in enumerate(lines, start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                if partial:                      # a line cut by the interruption
                    break
                raise DecobenchError(f"{file}:{lineno}: not JSON ({exc})") from None
    return rows


def read_summary(path: str | Path) -> dict[str, Any]:
    """A run's ``summary.json`` (a JSON object, else a one-line DecobenchError)."""
    summary = read_json(Path(path) / SUMMARY)
    if not isinstance(summary, dict):
        raise DecobenchError(f"{Path(path) / SUMMARY}: not a JSON object")
    return summary


def read_config(path: str | Path) -> dict[str, Any]:
    """A run's ``config.yaml`` ({} when it has none: a run made before it was written)."""
    file = Path(path) / CONFIG
    if not file.is_file():
        return {}
    try:
        loaded = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise DecobenchError(f"{file}: cannot read ({exc})") from None
    return loaded if isinstance(loaded, dict) else {}
