"""Experiment tracking of one run: the interface the runner calls, and its W&B implementation.

:class:`RunTracker` receives every metrics row the run writes and the final summary (or the
error of a crashed run). :class:`NullTracker` does nothing (``--no-wandb``).
:class:`WandbTracker` logs the run to Weights & Biases, offline by default (see
:func:`resolve_mode` and ``docs/wandb.md``); :func:`wandb_tracker_factory` builds the
``tracker_factory`` that :func:`decobench.runs.runner.execute` takes, and :func:`log_report`
logs a suite's report (tables, figures, files) as a run of its own.

Naming of a run (so the W&B UI can compare methods per task and network condition):

* project ``decobench-<suite>`` (``decobench`` without a suite; ``WANDB_PROJECT`` overrides);
* group ``<task>|<condition>|<label>`` (the seeds of one method on one condition);
* job type ``train`` (``report`` for the report run);
* name ``<label>-<condition>-s<seed>``;
* tags ``task:…``, ``method:…``, ``label:…``, ``condition:…``, ``workers:…``, ``seed:…``,
  ``profile:…``, ``backend:…`` (and ``suite:…``).

Every metrics row becomes one ``run.log`` call with namespaced keys (:data:`ROW_KEYS`) and
the simulated clock ``sim_time_s`` as the x-axis of every namespace (``define_metric``).

``wandb`` is imported only when a run is opened: it is slow to import.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from decobench.atomicio import write_text_atomic
from decobench.errors import DecobenchError
from decobench.runs.rundir import WANDB_RECORD

log = logging.getLogger(__name__)

MODES = ("offline", "online", "disabled")
"""The W&B modes :func:`resolve_mode` returns."""
DEFAULT_MODE = "offline"
"""Without ``WANDB_MODE`` runs are logged offline (``wandb sync`` uploads them later)."""
_MODE_ALIASES = {"offline": "offline", "dryrun": "offline", "online": "online",
                 "run": "online", "disabled": "disabled"}

PROJECT_PREFIX = "decobench"
STEP_METRIC = "sim_time_s"
"""The x-axis of every logged namespace: the run's simulated clock in seconds."""
NAMESPACES = ("train", "eval", "comm", "net")
"""Key prefixes of the logged metrics; each is plotted against :data:`STEP_METRIC`."""

ROW_KEYS: dict[str, str | None] = {
    "sim_time_s": STEP_METRIC,
    "iteration": "train/iteration",
    "loss": "train/loss",
    "compute_s": "train/compute_s",
    "wall_time_s": "train/wall_time_s",
    "diverged": "train/diverged",
    "metric": "eval/{metric_name}",
    "metric_time_s": "eval/metric_time_s",
    "target_reached": "eval/target_reached",
    "metric_name": None,
    "delta": "comm/delta",
    "tau": "comm/tau",
    "bits": "comm/bits",
    "bits_sent": "comm/bits_sent",
    "bubble_s": "comm/bubble_s",
    "applied_messages": "comm/applied_messages",
    "bandwidth_mbps": "net/bandwidth_mbps",
    "latency_ms": "net/latency_ms",
}
"""How a ``metrics.jsonl`` row maps to W&B keys. ``eval/{metric_name}`` is filled in with
the row's ``metric_name`` (``eval/accuracy``, ``eval/perplexity``); ``None`` drops the key
(the metric name is in the config). Any other key (method-specific: ``plan_*`` of DeCo-SGD,
``accordion_*``, ...) is logged as ``comm/<key>`` (:data:`OTHER_PREFIX`)."""
OTHER_PREFIX = "comm/"

_TAG_AXES = ("task", "method", "label", "condition", "workers", "seed", "profile", "backend",
             "suite")
_MAX_TAG = 64
_IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".bmp"})
_HOW_TO_FIX = ("run `wandb login` (online), set WANDB_MODE=offline, or pass --no-wandb")


class RunTracker(Protocol):
    def log(self, row: dict[str, Any]) -> None:
        """One ``metrics.jsonl`` row, as written."""

    def finish(self, summary: dict[str, Any]) -> None:
        """The run ended normally (finished, diverged or budget exhausted)."""

    def fail(self, error: BaseException) -> None:
        """The run crashed or was interrupted; no summary exists."""


TrackerFactory = Callable[[dict[str, Any], Path], RunTracker]
"""Opens a run's tracker from its resolved configuration and run directory (what
:func:`decobench.runs.runner.execute` takes)."""


class NullTracker:
    """Tracking turned off."""

    def log(self, row: dict[str, Any]) -> None:
        pass

    def finish(self, summary: dict[str, Any]) -> None:
        pass

    def fail(self, error: BaseException) -> None:
        pass


# --------------------------------------------------------------------------- naming


def resolve_mode(enabled: bool = True) -> str:
    """The W&B mode to use: ``"offline"``, ``"online"`` or ``"disabled"``.

    ``disabled`` when ``enabled`` is false (the CLI's ``--no-wandb``), or ``WANDB_MODE`` is
    ``disabled`` (or the legacy ``WANDB_DISABLED`` is true); otherwise ``WANDB_MODE``
    (``online`` / ``offline``; ``dryrun`` means offline, ``run`` online); default
    ``offline``. Going online therefore takes ``wandb login`` and ``export
    WANDB_MODE=online``. Raises :class:`DecobenchError` on an unknown ``WANDB_MODE``.
    """
    if not enabled:
        return "disabled"
    if os.environ.get("WANDB_DISABLED", "").strip().lower() in ("1", "true", "yes"):
        return "disabled"
    value = os.environ.get("WANDB_MODE", "").strip().lower()
    if not value:
        return DEFAULT_MODE
    if value not in _MODE_ALIASES:
        raise DecobenchError(f"WANDB_MODE={value!r} is not a W&B mode: use offline, online "
                             "or disabled (or pass --no-wandb)")
    return _MODE_ALIASES[value]


def project_name(suite: str | None = None) -> str:
    """``decobench-<suite>``, or ``decobench`` without a suite; env ``WANDB_PROJECT``
    overrides both."""
    override = os.environ.get("WANDB_PROJECT", "").strip()
    if override:
        return override
    if not suite:
        return PROJECT_PREFIX
    return _clean_name(f"{PROJECT_PREFIX}-{suite}", 128)


def _clean_name(value: str, limit: int) -> str:
    """W&B project names may not contain ``/ \\ # ? % :``."""
    for bad in "/\\#?%:":
        value = value.replace(bad, "-")
    return value[:limit]


def run_label(config: Mapping[str, Any]) -> str:
    """The method variant's display name: ``label``, else the method."""
    return str(config.get("label") or config.get("method") or "run")


def run_condition(config: Mapping[str, Any]) -> str:
    """The network condition's name: ``condition``, else the trace's name, else the network's
    label."""
    network = config.get("network") or {}
    value = (config.get("condition") or config.get("trace_name")
             or (network.get("label") if isinstance(network, Mapping) else None))
    return str(value or "unknown")


def run_identity(config: Mapping[str, Any]) -> dict[str, Any]:
    """The W&B project, group, job type, name and tags of a run from its resolved config."""
    label, condition = run_label(config), run_condition(config)
    axes = {"task": config.get("task"), "method": config.get("method"), "label": label,
            "condition": condition, "workers": config.get("workers"),
            "seed": config.get("seed"), "profile": config.get("profile"),
            "backend": config.get("backend"), "suite": config.get("suite")}
    # WANDB_TAGS (comma-separated) adds tags, e.g. the side of a comparison (docs/wandb.md);
    # wandb would drop it, since init's own tags take precedence over the environment's
    tags: list[str] = [t.strip()[:_MAX_TAG] for t in os.environ.get("WANDB_TAGS", "").split(",")
                       if t.strip()]
    for axis in _TAG_AXES:
        if axes[axis] is not None:
            tag = f"{axis}:{axes[axis]}"[:_MAX_TAG]
            if tag not in tags:
                tags.append(tag)
    return {
        "project": project_name(config.get("suite")),
        "group": f"{config.get('task')}|{condition}|{label}"[:128],
        "job_type": "train",
        "name": f"{label}-{condition}-s{config.get('seed', 0)}"[:128],
        "tags": tags,
    }


def wandb_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """One metrics row as W&B keys (:data:`ROW_KEYS`); ``None`` values are left out."""
    metric_name = str(row.get("metric_name") or "metric")
    out: dict[str, Any] = {}
    for key, value in row.items():
        if value is None:
            continue
        target = ROW_KEYS[key] if key in ROW_KEYS else OTHER_PREFIX + key
        if target is None:
            continue
        out[target.format(metric_name=metric_name)] = value
    return out


def _settings() -> Any:
    """Quiet and cheap: no console capture or output, no system stats, code or git capture;
    several runs per process."""
    import wandb

    return wandb.Settings(silent=True, quiet=True, console="off", x_disable_stats=True,
                          x_disable_machine_info=True, disable_code=True, save_code=False,
                          disable_git=True, disable_job_creation=True)


def _init(mode: str, run_dir: Path, **kwargs: Any) -> Any:
    """``wandb.init`` in ``run_dir``; a failure becomes a one-line DecobenchError."""
    import wandb

    run_dir.mkdir(parents=True, exist_ok=True)  # wandb silently falls back to /tmp otherwise
    try:
        return wandb.init(dir=str(run_dir), mode=mode, reinit="create_new",
                          settings=_settings(), **kwargs)
    except Exception as exc:  # UsageError (no API key), CommError (no network), ...
        text = str(exc).strip()
        first = text.splitlines()[0].rstrip(".") if text else type(exc).__name__
        raise DecobenchError(f"could not start the W&B run (mode {mode}): {first}; "
                             f"{_HOW_TO_FIX}") from exc


def _close(run: Any, exit_code: int) -> None:
    """End ``run`` and wait until its files are written and closed.

    ``run.finish()`` returns before wandb's service process has flushed and closed the run's
    ``.wandb`` file (it only informs the service); shutting the service down waits for that.
    This is done only when no other W&B run is active in the process; the next run starts a
    new service (about 0.3 s).
    """
    import wandb

    run.finish(exit_code=exit_code)
    try:
        from wandb.sdk import wandb_setup

        busy = wandb_setup.singleton().most_recent_active_run is not None
    except Exception:  # private API moved: leave the service running
        busy = True
    if not busy:
        try:
            wandb.teardown()
        except (Exception, SystemExit) as exc:  # teardown sys.exit()s on a service error
            log.warning("W&B service did not shut down cleanly: %s", exc)


# --------------------------------------------------------------------------- one run


class WandbTracker:
    """Logs one run to W&B (:class:`RunTracker`); opening it starts the W&B run.

    ``finish`` / ``fail`` end the W&B run completely (all files written and closed), so the
    run directory may be renamed afterwards. Errors of W&B while logging are reported once as
    a warning and do not stop training.
    """

    def __init__(self, config: Mapping[str, Any], run_dir: Path, *,
                 mode: str | None = None) -> None:
        self.mode = mode or resolve_mode()
        if self.mode == "disabled":
            raise ValueError("WandbTracker in disabled mode: use NullTracker")
        self.identity = run_identity(config)
        self.run_dir = Path(run_dir)
        self._run = _init(self.mode, self.run_dir, config=dict(config), **self.identity)
        self._open = True
        self._record_run()
        self._failed_logging = False
        self._define_metrics()

    def _record_run(self) -> None:
        """``RUN_DIR/wandb.json``: the W&B run's id, project, entity, mode and URL (None
        offline), so ``decobench compare`` can link each cell's run."""
        def field(name: str) -> Any:
            try:
                value = getattr(self._run, name)
            except Exception:  # offline runs may have no URL or entity
                return None
            return str(value) if value else None

        record = {"id": field("id"), "project": field("project") or self.identity["project"],
                  "entity": field("entity"), "group": self.identity["group"],
                  "name": self.identity["name"], "mode": self.mode,
                  # offline, wandb warns "URL not available" when asked: do not ask
                  "url": field("url") if self.mode == "online" else None}
        write_text_atomic(self.run_dir / WANDB_RECORD, json.dumps(record, indent=1) + "\n")

    @property
    def run(self) -> Any:
        """The underlying ``wandb`` run."""
        return self._run

    def _define_metrics(self) -> None:
        """``sim_time_s`` is the x-axis of ``train/*``, ``eval/*``, ``comm/*`` and ``net/*``."""
        self._run.define_metric(STEP_METRIC)
        for namespace in NAMESPACES:
            self._run.define_metric(f"{namespace}/*", step_metric=STEP_METRIC)

    def log(self, row: dict[str, Any]) -> None:
        """One row → one ``run.log`` call (one W&B step)."""
        if not self._open or self._failed_logging:
            return
        try:
            self._run.log(wandb_row(row))
        except Exception as exc:  # tracking must not end a training run
            self._failed_logging = True
            log.warning("W&B logging stopped for %s: %s", self.identity["name"], exc)

    def finish(self, summary: dict[str, Any]) -> None:
        """Write the summary (every ``summary.json`` key) and end the run with exit code 0."""
        if not self._open:
            return
        self._open = False
        try:
            self._run.summary.update(dict(summary))
            # time_to_target_s is the benchmark's headline number: set it even when the
            # target was not reached (None), so the column exists for every run.
            self._run.summary["time_to_target_s"] = summary.get("time_to_target_s")
            _close(self._run, 0)
        except Exception as exc:
            log.warning("W&B could not finish %s: %s", self.identity["name"], exc)

    def fail(self, error: BaseException) -> None:
        """Mark the run failed (summary ``status: failed`` and the error) with exit code 1."""
        if not self._open:
            return
        self._open = False
        try:
            message = str(error).strip().splitlines()[0] if str(error).strip() else ""
            self._run.summary.update({
                "status": "failed",
                "error": f"{type(error).__name__}: {message}".rstrip(": ")})
            _close(self._run, 1)
        except Exception as exc:
            log.warning("W&B could not record the failure of %s: %s", self.identity["name"],
                        exc)


def wandb_tracker_factory(enabled: bool = True) -> TrackerFactory:
    """The ``tracker_factory`` for :func:`decobench.runs.runner.execute`.

    The mode is resolved now (:func:`resolve_mode`); in ``disabled`` mode the factory returns
    :class:`NullTracker` and wandb is never imported.
    """
    mode = resolve_mode(enabled)

    def factory(config: dict[str, Any], run_dir: Path) -> RunTracker:
        if mode == "disabled":
            return NullTracker()
        return WandbTracker(config, run_dir, mode=mode)

    factory.mode = mode  # type: ignore[attr-defined]
    return factory


# --------------------------------------------------------------------------- report


def _columns(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    return columns


def _table_csv(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=_columns(rows), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _artifact_name(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.name


def log_report(results_dir: Path, *, project: str, tables: dict[str, list[dict[str, Any]]],
               figures: list[Path], report_files: list[Path], enabled: bool = True) -> None:
    """Log a suite's report as one W&B run (job type ``report``, name ``report``).

    Each table becomes a ``wandb.Table`` under ``tables/<name>``, each raster figure a
    ``wandb.Image`` under ``figures/<stem>`` (other figures, e.g. PDF or SVG, go only into the
    artifact), and an artifact ``report`` (type ``report``) holds ``report_files``, the
    figures and every table as ``tables/<name>.csv``. The W&B files go under
    ``results_dir/wandb``. ``project`` is the suite's project (:func:`project_name`). Same
    mode rules as runs (:func:`resolve_mode`); does nothing when disabled.
    """
    mode = resolve_mode(enabled)
    if mode == "disabled":
        return
    import wandb

    results_dir = Path(results_dir)
    present = [Path(f) for f in figures if Path(f).is_file()]
    files = [Path(f) for f in report_files if Path(f).is_file()]
    for missing in sorted({str(f) for f in [*figures, *report_files]}
                          - {str(f) for f in [*present, *files]}):
        log.warning("W&B report: %s does not exist, not logged", missing)
    run = _init(mode, results_dir, project=project, job_type="report", name="report",
                group="report", tags=["report"],
                config={"results_dir": str(results_dir), "tables": sorted(tables),
                        "figures": [f.name for f in present],
                        "report_files": [f.name for f in files]})
    try:
        payload: dict[str, Any] = {}
        for name, rows in tables.items():
            columns = _columns(rows)
            payload[f"tables/{name}"] = wandb.Table(
                columns=columns, data=[[row.get(c) for c in columns] for row in rows],
                allow_mixed_types=True)
        for figure in present:
            if figure.suffix.lower() in _IMAGE_SUFFIXES:
                payload[f"figures/{figure.stem}"] = wandb.Image(str(figure), caption=figure.name)
        if payload:
            run.log(payload)
        artifact = wandb.Artifact("report", type="report",
                                  description=f"decobench report of {results_dir}")
        for path in files:
            artifact.add_file(str(path), name=_artifact_name(path, results_dir))
        for figure in present:
            artifact.add_file(str(figure), name=f"figures/{figure.name}")
        for name, rows in tables.items():
            with artifact.new_file(f"tables/{name}.csv", mode="w") as handle:
                handle.write(_table_csv(rows))
        run.log_artifact(artifact)
    except BaseException:
        _close(run, 1)
        raise
    _close(run, 0)
