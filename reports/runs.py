"""Finding and loading the finished runs of a results folder (docs/design.md §9.3;
the sweep's ``manifest.json``).

- With ``DIR/manifest.json`` every cell's ``run_dir`` must hold a ``summary.json``; otherwise
  :class:`~decobench.errors.DecobenchError` names the missing cells: the report fails loudly on
  a missing run rather than report a partial sweep as if it were whole.
- Without a manifest every ``summary.json`` below DIR is a run; folders whose name starts
  with ``.`` (a sweep's staging folders) are skipped.

``label`` falls back to ``method`` and ``condition`` to ``trace`` for runs written before
those fields existed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from decobench.errors import DecobenchError
from decobench.reports.speedup import ttt_obs
from decobench.reports.stats import Obs
from decobench.runs.rundir import (
    MANIFEST,
    METRICS,
    SUMMARY,
    read_config,
    read_json,
    read_metrics,
    read_summary,
)

MAX_NAMED = 10


def as_float(value: Any) -> float | None:
    """A JSON number, or the strings ``"inf"``/``"-inf"``/``"nan"`` written for non-finite
    values, as a float; ``None`` for null or anything else."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


@dataclass(frozen=True)
class Run:
    """One finished run: its summary, resolved config and metrics rows."""

    path: Path
    rel: str
    summary: dict[str, Any]
    config: dict[str, Any]
    metrics: tuple[dict[str, Any], ...] = field(repr=False)
    manifest_role: str | None = None
    manifest_family: str | None = None
    """The trace family of the run's condition, as the sweep's manifest records it."""

    @property
    def role(self) -> str:
        """What the run is evidence for (decobench.sweeps.suite.Role): its suite experiment's
        ``role`` from the manifest; otherwise ``regime-map`` for a network given by ratios
        and ``main`` for the rest."""
        if self.manifest_role:
            return self.manifest_role
        return "regime-map" if self.summary.get("network") == "ratios" else "main"

    @property
    def task(self) -> str:
        return str(self.summary.get("task"))

    @property
    def standin(self) -> bool:
        """Whether the run read a stand-in data set: its ``data_source`` (config.yaml) carries
        the stand-in's label (``decobench data standins``: "STAND-IN: built from ...")."""
        return "STAND-IN" in str(self.config.get("data_source") or "")

    @property
    def data_kind(self) -> str:
        """``full``, ``slice`` or ``stand-in`` (config.yaml's ``data_kind``; runs written
        before it existed: ``stand-in`` from ``data_source``, else ``not recorded``)."""
        if self.standin:
            return "stand-in"
        return str(self.config.get("data_kind") or "not recorded")

    @property
    def method(self) -> str:
        return str(self.summary.get("method"))

    @property
    def label(self) -> str:
        return str(self.summary.get("label") or self.config.get("label") or self.method)

    @property
    def condition(self) -> str:
        return str(self.summary.get("condition") or self.config.get("condition")
                   or self.summary.get("trace"))

    @property
    def workers(self) -> int:
        return int(self.summary.get("workers") or 0)

    @property
    def seed(self) -> int:
        return int(self.summary.get("seed") or 0)

    @property
    def status(self) -> str:
        return str(self.summary.get("status"))

    @property
    def reached(self) -> bool:
        return bool(self.summary.get("reached"))

    @property
    def metric_name(self) -> str:
        return str(self.summary.get("metric_name"))

    @property
    def sim_time_s(self) -> float:
        return float(as_float(self.summary.get("sim_time_s")) or 0.0)

    @property
    def ttt(self) -> Obs:
        """Time to target, censored at ``sim_time_s`` when not reached."""
        return ttt_obs(self.summary)

    @property
    def ttt_resolution_s(self) -> float | None:
        """Width of the bracket (previous evaluation, first evaluation meeting the target]
        that holds the true crossing: ``summary.json``'s ``ttt_resolution_s``, or, for runs
        written before it existed, from the evaluation rows; 0 when the bracket is one
        iteration (the model changes only at iterations). ``None`` when not reached."""
        if not self.reached:
            return None
        if self.summary.get("ttt_resolution_iters") == 1:
            return 0.0  # consecutive models evaluated: the first one meeting it is exact
        given = as_float(self.summary.get("ttt_resolution_s"))
        if given is not None:
            return given
        hit = as_float(self.summary.get("time_to_target_s"))
        if hit is None:
            return None
        before = [t for t, _ in self.evaluations() if t < hit]
        return hit - (max(before) if before else 0.0)

    @property
    def iters(self) -> Obs:
        """Iterations to target, censored at the iterations run when not reached."""
        if self.reached and self.summary.get("iters_to_target") is not None:
            return Obs(float(self.summary["iters_to_target"]))
        return Obs(float(self.summary.get("iterations") or 0), censored=True)

    @property
    def method_options(self) -> dict[str, Any]:
        options = self.config.get("method_options")
        return options if isinstance(options, dict) else {}

    def evaluations(self) -> list[tuple[float, float]]:
        """``(metric_time_s, metric)`` of each evaluation row with a finite metric, by time.

        ``metric_time_s`` is the simulated time the evaluated model existed; rows written
        without it fall back to ``sim_time_s``.
        """
        points = []
        for row in self.metrics:
            metric = as_float(row.get("metric"))
            when = as_float(row.get("metric_time_s", row.get("sim_time_s")))
            if metric is not None and when is not None and math.isfinite(metric):
                points.append((when, metric))
        return sorted(points)


REQUIRED_SUMMARY = ("task", "method", "workers", "seed", "target", "metric_name", "reached",
                    "time_to_target_s", "iters_to_target", "final_metric", "iterations",
                    "sim_time_s", "bits_sent", "status")
"""Fields every ``summary.json`` has (docs/design.md §9.3); a summary without
them is not a run the report can show."""


def load_run(path: Path, root: Path) -> Run:
    """The run in ``path`` (which holds a ``summary.json``); ``rel`` is relative to root."""
    summary = read_summary(path)
    missing = [key for key in REQUIRED_SUMMARY if key not in summary]
    if missing:
        raise DecobenchError(f"{path / SUMMARY} is not a run's summary: it lacks "
                             f"{', '.join(missing)}; rerun the run (or move the folder out "
                             "of the results folder)")
    config = read_config(path)
    try:
        rel = path.resolve().relative_to(root.resolve()).as_posix() or "."
    except ValueError:
        rel = path.as_posix()
    return Run(path=path, rel=rel, summary=summary, config=config,
               metrics=tuple(read_metrics(path)) if (path / METRICS).is_file() else ())


@dataclass(frozen=True)
class RunSet:
    """The runs of a results folder and, when it has one, its manifest."""

    root: Path
    runs: tuple[Run, ...]
    manifest: dict[str, Any] | None

    @property
    def suite(self) -> str | None:
        if self.manifest and self.manifest.get("suite"):
            return str(self.manifest["suite"])
        names = sorted({str(r.summary["suite"]) for r in self.runs if r.summary.get("suite")})
        return ", ".join(names) if names else None


def sort_key(run: Run) -> tuple:
    return (run.task, run.condition, run.workers, run.label, run.seed, run.rel)


def summary_dirs(root: Path) -> Iterator[Path]:
    """Every run directory below ``root`` (a folder holding ``summary.json``), sorted, leaving
    out folders whose name starts with ``.`` (a sweep's staging folders)."""
    for path in sorted(root.rglob(SUMMARY)):
        parts = path.relative_to(root).parts[:-1]
        if not any(part.startswith(".") for part in parts):
            yield path.parent


def _describe_cell(cell: dict[str, Any]) -> str:
    details = ", ".join(f"{k} {cell[k]}" for k in ("task", "label", "condition", "workers",
                                                  "seed") if cell.get(k) is not None)
    return f"{cell.get('run_dir')} (cell {cell.get('id', '?')}" + (
        f": {details})" if details else ")")


def _manifest_runs(root: Path, manifest: dict[str, Any]) -> dict[Path, dict[str, Any]]:
    """Each cell's run directory with its manifest entry (its experiment's role, its
    condition's trace family)."""
    cells = manifest.get("cells")
    if not isinstance(cells, list):
        raise DecobenchError(f"{root / MANIFEST}: no 'cells' list")
    missing, found = [], {}
    for cell in cells:
        run_dir = root / str(cell.get("run_dir", ""))
        if cell.get("run_dir") and (run_dir / SUMMARY).is_file():
            found[run_dir] = cell
        else:
            missing.append(cell)
    if missing:
        named = "; ".join(_describe_cell(c) for c in missing[:MAX_NAMED])
        more = f"; and {len(missing) - MAX_NAMED} more" if len(missing) > MAX_NAMED else ""
        raise DecobenchError(
            f"{len(missing)} of {len(cells)} cells in {root / MANIFEST} have no finished run "
            f"(no {SUMMARY}): {named}{more}. Rerun `decobench sweep {root / 'suite.yaml'} "
            f"--out {root}` (with the same --data-root options) to finish them; the report "
            "refuses to leave a run out")
    return found


def load_runs(results_dir: str | Path) -> RunSet:
    """All runs of ``results_dir`` (manifest rules in the module docstring), sorted."""
    root = Path(results_dir)
    if not root.is_dir():
        raise DecobenchError(f"{root}: no such results folder")
    manifest = None
    if (root / MANIFEST).is_file():
        manifest = read_json(root / MANIFEST)
        if not isinstance(manifest, dict):
            raise DecobenchError(f"{root / MANIFEST}: not a JSON object")
        cells = _manifest_runs(root, manifest)
    else:
        cells = {d: {} for d in summary_dirs(root)}
    if not cells:
        raise DecobenchError(f"{root}: no finished runs (no {SUMMARY} below it)")
    runs = sorted((replace(load_run(d, root), manifest_role=cell.get("role"),
                           manifest_family=cell.get("family"))
                   for d, cell in cells.items()), key=sort_key)
    return RunSet(root=root, runs=tuple(runs), manifest=manifest)
