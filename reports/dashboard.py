"""The W&B comparison dashboard of a results folder, as code (``decobench dashboard``).

Saved views (workspaces) built with ``wandb-workspaces``, one per task and network
condition: the runs of that condition grouped by method variant (``label``), its metric and
training loss against simulated time, time to target per method (bar chart), and δ, τ and
the trace's bandwidth against simulated time. With ``base`` (what ``decobench compare BASE
RESULTS`` compares) one more view per condition overlays BASE's runs (grey) on RESULTS'
(orange), cell by cell.

A view selects its runs by W&B run id (each run directory's ``wandb.json``), so runs of
other sweeps logged to the same project stay out, and by the ``task:`` and ``condition:``
tags :func:`decobench.runs.tracking.run_identity` gives every run. Offline the views'
specifications (the library's own serialisation) are written to a JSON file; online they
are saved to the runs' project (docs/wandb.md "Dashboards as code").
"""

from __future__ import annotations

import json
import os
import unicodedata
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decobench.atomicio import write_text_atomic
from decobench.errors import DecobenchError
from decobench.reports.compare import Snapshot, load_results
from decobench.runs.tracking import (
    ROW_KEYS,
    STEP_METRIC,
    project_name,
    run_condition,
    run_identity,
    run_label,
)

DASHBOARD_FILE = "wandb-dashboard.json"
"""Where the view specifications go in the results folder."""
BASE_COLOR, NEW_COLOR = "#9e9e9e", "#e4572e"
"""BASE's runs grey, RESULTS' orange in the BASE-against-NEW views."""
PINNED_COLUMNS = ["summary:time_to_target_s", "summary:iters_to_target",
                  "summary:final_metric", "summary:status"]


@dataclass(frozen=True)
class Member:
    """One run of a results set as W&B knows it."""

    cell: str
    id: str
    project: str | None
    entity: str | None
    task: str
    condition: str
    label: str
    seed: Any
    metric: str
    tags: tuple[str, ...]


@dataclass(frozen=True)
class Dashboard:
    """What :func:`make_dashboard` did: the file written, the saved views' URLs (online),
    and notes on what was left out."""

    path: Path
    urls: list[str]
    notes: list[str]


def members(snapshot: Snapshot) -> tuple[list[Member], int]:
    """The cells of ``snapshot`` logged to W&B, sorted, and how many were not."""
    found, missing = [], 0
    for name, cell in sorted(snapshot.cells.items()):
        record = cell.wandb or {}
        if not record.get("id"):
            missing += 1
            continue
        # the run's own task:/condition: tags (as logged, truncated alike) come after
        # any WANDB_TAGS, so they win here
        tags = {t.split(":", 1)[0]: t for t in run_identity(cell.config)["tags"]}
        found.append(Member(
            name, str(record["id"]), record.get("project"), record.get("entity"),
            str(cell.config.get("task")), run_condition(cell.config), run_label(cell.config),
            cell.config.get("seed"),
            str(ROW_KEYS["metric"]).format(metric_name=cell.metric_name or "metric"),
            tuple(tags[axis] for axis in ("task", "condition") if axis in tags)))
    return found, missing


def _by_condition(runs: Iterable[Member]) -> dict[tuple[str, str], list[Member]]:
    grouped: dict[tuple[str, str], list[Member]] = defaultdict(list)
    for run in runs:
        grouped[(run.task, run.condition)].append(run)
    return dict(sorted(grouped.items()))


def _view_name(text: str) -> str:
    """W&B view names may not hold symbols (emoji check): ``|``, ``+``, ``=`` become ``-``."""
    return "".join("-" if unicodedata.category(c).startswith(("S", "Cs")) else c for c in text)


def _by_label(grouped: bool) -> dict[str, Any]:
    """A panel's grouping: by method variant, mean with the min-max band (or none)."""
    import wandb_workspaces.reports.v2 as wr

    return dict(groupby=wr.Config("label"), groupby_aggfunc="mean",
                groupby_rangefunc="minmax") if grouped else {}


def _curve(key: str, grouped: bool, titles: dict[str, str] | None) -> Any:
    import wandb_workspaces.reports.v2 as wr

    return wr.LinePlot(title=f"{key} against simulated time", x=STEP_METRIC, y=[key],
                       line_titles={f"{i}:{key}": t for i, t in titles.items()} if titles
                       else None, **_by_label(grouped))


def _sections(runs: list[Member], grouped: bool, titles: dict[str, str] | None = None
              ) -> list[Any]:
    """Curves, time to target and δ/τ of one condition; ``grouped``: by method variant;
    ``titles``: each run's line title by run id."""
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    metrics = sorted({run.metric for run in runs})
    bar = wr.BarPlot(title="time to target (s, simulated; not reached: no bar)",
                     metrics=[wr.SummaryMetric("time_to_target_s")], **_by_label(grouped))
    names = " and ".join(m.split("/", 1)[-1] for m in metrics)
    return [
        ws.Section(name=f"{names} and loss against simulated time", is_open=True,
                   panels=[_curve(k, grouped, titles) for k in [*metrics, str(ROW_KEYS["loss"])]]),
        ws.Section(name="time to target", is_open=True, panels=[bar]),
        ws.Section(name="δ and τ against simulated time", is_open=True,
                   panels=[_curve(str(ROW_KEYS[k]), grouped, titles)
                           for k in ("delta", "tau", "bandwidth_mbps")]),
    ]


def _workspace(name: str, runs: list[Member], sections: list[Any], where: tuple[str, str],
               *, grouped: bool, colors: dict[str, str] | None = None) -> Any:
    import wandb_workspaces.workspaces as ws

    ids = list(dict.fromkeys(run.id for run in runs))
    settings = {id_: ws.RunSettings(color=c) for id_, c in (colors or {}).items()}
    return ws.Workspace(
        entity=where[0], project=where[1], name=_view_name(name), sections=sections,
        settings=ws.WorkspaceSettings(x_axis=STEP_METRIC, max_runs=max(10, len(ids))),
        runset_settings=ws.RunsetSettings(
            filters=ws.And(*(ws.Tags().isin([tag]) for tag in runs[0].tags),
                           ws.Metric("ID").isin(ids)),
            groupby=[ws.Config("label")] if grouped else [], run_settings=settings,
            pinned_columns=list(PINNED_COLUMNS)))


def build_views(new: list[Member], base: list[Member] | None, entity: str,
                project: str) -> list[Any]:
    """The saved views (``wandb_workspaces.workspaces.Workspace``): one per task and condition
    of ``new``, and, with ``base``, one per condition overlaying BASE's and NEW's runs of
    the cells both have."""
    where = (entity, project)
    views = [_workspace(f"decobench: {task} / {condition}", runs, _sections(runs, True),
                        where, grouped=True)
             for (task, condition), runs in _by_condition(new).items()]
    if base is None:
        return views
    base_of = {run.cell: run for run in base}
    base_ids = {run.id for run in base}
    pairs = [(base_of[run.cell], run) for run in new if run.cell in base_of]
    if not pairs:
        raise DecobenchError("BASE and RESULTS have no cell in common whose runs were both "
                             "logged to W&B: nothing to compare")
    for (task, condition), runs in _by_condition(r for pair in pairs for r in pair).items():
        sides = {run.id: "BASE" if run.id in base_ids else "NEW" for run in runs}
        titles = {run.id: f"{sides[run.id]} {run.label} s{run.seed}" for run in runs}
        colors = {i: BASE_COLOR if side == "BASE" else NEW_COLOR for i, side in sides.items()}
        views.append(_workspace(f"decobench BASE vs NEW: {task} / {condition}", runs,
                                _sections(runs, False, titles), where, grouped=False,
                                colors=colors))
    return views


def _project(runs: list[Member], suite: str | None) -> str:
    """The one project the runs were logged to (their ``wandb.json``), else the suite's."""
    projects = sorted({run.project for run in runs if run.project})
    if len(projects) > 1:
        raise DecobenchError(f"the runs were logged to several W&B projects ({', '.join(projects)}"
                             "): a view shows one project's runs; log both sides to one "
                             "project (WANDB_PROJECT)")
    return projects[0] if projects else project_name(suite)


def _logged(path: str | Path, side: str) -> tuple[list[Member], Snapshot, list[str]]:
    """The runs of a results folder (or snapshot) logged to W&B, and notes on the others."""
    snapshot, unfinished = load_results(path)
    runs, missing = members(snapshot)
    if not runs and Path(path).is_file():
        raise DecobenchError(f"{side} {path}: this snapshot names no W&B run (snapshots keep "
                             "only the runs logged online); give its results folder instead")
    if not runs:
        raise DecobenchError(f"{side} {path}: none of its runs was logged to W&B (no "
                             "wandb.json in their run directories: they ran with --no-wandb "
                             "or WANDB_MODE=disabled)")
    notes = [f"{side}: {missing} run(s) without a W&B run left out"] if missing else []
    if unfinished:
        notes.append(f"{side}: {len(unfinished)} cell(s) of its manifest have no finished run")
    return runs, snapshot, notes


def _save(views: list[Any]) -> list[str]:
    """Save each view to W&B and return their URLs (online mode)."""
    urls = []
    for view in views:
        try:
            view.save()
            urls.append(view.url)
        except Exception as exc:  # no API key, no network, no such entity, ...
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise DecobenchError(f"could not save the W&B view {view.name!r} to "
                                 f"{view.entity}/{view.project}: {first}; run `wandb login`, "
                                 "or unset WANDB_MODE=online to write the views to a file"
                                 ) from exc
    return urls


def _default_entity() -> str:
    import wandb

    try:
        return str(wandb.Api().default_entity or "")
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DecobenchError(f"could not reach W&B (mode online): {first}; run `wandb login`, "
                             "set WANDB_ENTITY, or unset WANDB_MODE=online") from exc


def make_dashboard(results: str | Path, *, base: str | Path | None = None,
                   out: str | Path | None = None, mode: str = "offline") -> Dashboard:
    """Build the views of ``results`` (and BASE against it) and write their specifications
    to ``out`` (default ``RESULTS/wandb-dashboard.json``), atomically. In ``online`` mode
    they are also saved to the runs' W&B project (entity: ``WANDB_ENTITY``, else the runs',
    else the account's default) and the file records their URLs."""
    if not Path(results).is_dir():
        raise DecobenchError(f"{results}: no such results folder")
    new, snapshot, notes = _logged(results, "RESULTS")
    old = None
    if base is not None:
        old, _, more = _logged(base, "BASE")
        notes += more
    both = [*new, *(old or [])]
    project = _project(both, snapshot.suite)
    entity = (os.environ.get("WANDB_ENTITY", "").strip()
              or next((r.entity for r in both if r.entity), ""))
    if mode == "online" and not entity:
        entity = _default_entity()
    views = build_views(new, old, entity, project)
    urls = _save(views) if mode == "online" else []
    path = Path(out) if out else Path(results) / DASHBOARD_FILE
    record: dict[str, Any] = {"views": [view._to_model().model_dump(
        mode="json", by_alias=True, exclude_none=True) for view in views]}
    if urls:
        record["urls"] = urls
    write_text_atomic(path, json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    return Dashboard(path, urls, notes)
