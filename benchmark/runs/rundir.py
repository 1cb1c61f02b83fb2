"""The run directory contract (docs/design.md §9.3).

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
RUN_FILES = frozenset({CONFIG, METRICS, METRICS + PARTIAL_SUFFIX, "trace.csv", "wandb",
                       "checkpoint.pt", "checkpoints",
                       "failure.json", "network_probe.json", "tc_commands.txt",
                       "trace_player.jsonl", "launch", "workers", ".clock_start",
                       "trajectory.pt"})
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
        if partial.is_file():
            for line in partial.read_text().splitlines():
                try:
                    row = json.loads(line)
                except ValueError:               # a line cut by the interruption
                    break
                if row.get("iteration", 0) > iteration:
                    break
                kept.append(line + "\n")
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


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a finished run's ``metrics.jsonl``."""
    with open(Path(path) / METRICS) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def read_summary(path: str | Path) -> dict[str, Any]:
    with open(Path(path) / SUMMARY) as handle:
        return json.load(handle)
