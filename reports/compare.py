"""Compare two sets of results cell by cell, for CI gates (``decobench compare BASE NEW``).

Each side is a results folder (a sweep's, with ``manifest.json``, or any folder of run
directories, e.g. ``decobench run --out``'s) or a **snapshot**: the small JSON file
:func:`write_snapshot` makes of a results folder (``decobench compare --save FILE``), kept in a
repository as the golden results (``benchmark/suites/golden/``). A snapshot holds, per cell,
what the comparison reads from ``summary.json`` and ``config.yaml``, the W&B run it was logged
to, and the platform and library versions the runs were measured on.

**Cells** are matched by name: ``experiment/task/condition/label/nWORKERS/sSEED``, where the
condition is the network's name, not its numbers. A plain run (no sweep manifest: experiment
``-``) names its condition after its trace or ratios, so two plain runs that differ only in
that part are paired when the pairing is unique (:func:`_pair_plain_runs`). A cell only in BASE
is *missing* (a run that no longer finishes counts as a regression), a cell only in NEW is
*new*. Each compared cell's **configuration** is compared field by field (``config.yaml``,
nested fields dotted, :data:`BOOKKEEPING_FIELDS` left out, files by name): a cell with a field
that differs, or whose identity (:func:`decobench.runs.identity.identity`, e.g. a trace file's
content) differs, has a *changed configuration*; its metrics are still compared.

**Metrics** (:data:`METRICS`): time to target, iterations to target and bits sent (lower is
better), the final metric (accuracy: higher; perplexity and loss: lower) and the status
(target reached, better than budget exhausted, better than diverged). **Time to target and the
status decide** a cell's verdict (:data:`DECISIVE`), and the final metric where neither side
reached the target; the others are shown beside them and *flagged* when worse beyond the
tolerance, deciding only when named in ``decisive`` (``--decisive``). A target met in BASE and
not in NEW is a regression of time to target.

**Tolerance**: a decisive metric regresses when NEW is worse than BASE by more than it.

- *exact* (0) when both sides ran on the simulated clock on the same platform with the same
  versions (:data:`ENVIRONMENT_KEYS`): such runs are deterministic, so any change is real;
- otherwise *seed spread*: for each metric, the relative range (max − min) / median of BASE's
  seeds of the same cell (same name without the seed), and never less than
  :data:`DEFAULT_TOLERANCE` (5%). A cell with one seed has no spread of its own and takes the
  largest of its task's cells that have seeds (:func:`task_spread`): another torch moves a
  trajectory as another seed does. Measured 2026-11-26, the smoke suite's golden results
  (torch 2.15.0) against a fresh run with torch 2.14.1: single-seed regime-map cells moved
  by up to 21% with no code change, the main cells' 3 seeds spread by up to 28%;
- ``--tolerance X`` sets one relative tolerance for every cell (0: exact).
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from decobench.atomicio import write_text_atomic
from decobench.errors import DecobenchError
from decobench.reports.runs import summary_dirs
from decobench.runs.rundir import MANIFEST, SUMMARY, read_config, read_json, read_summary

SNAPSHOT_FORMAT = "decobench-snapshot/1"
"""The ``format`` field of a snapshot file."""

METRICS = ("time_to_target_s", "iters_to_target", "final_metric", "bits_sent", "status")
"""What :func:`compare` compares, in table order."""

DEFAULT_TOLERANCE = 0.05
"""Relative tolerance when the two sides are not known to be bit-for-bit comparable: the
floor under the seed spread, and the tolerance of a cell with one seed."""

ENVIRONMENT_KEYS = ("machine", "python", "torch", "torchvision", "numpy", "timm",
                    "transformers", "cpu_capability", "torch_threads")
"""The ``versions`` of a run's config.yaml that must match for an exact comparison
(``machine``: x86_64, arm64, ...; ``cpu_capability``: the vector unit torch uses). A run that
does not record one of them (made before it was recorded) is never compared exactly."""

LOWER_IS_BETTER = frozenset({"perplexity", "loss"})
"""Metric names whose smaller values are better (others, e.g. accuracy: larger)."""

BOOKKEEPING_FIELDS = frozenset({
    "out", "data_root", "data_source", "trace_path",            # where files lie
    "checkpoint_every_s",                                       # when to save: no effect
    "versions",                                  # the environment: it sets the tolerance
    "trajectory", "gradients",          # how it was computed: trajectory reused, engine
    "emulation.namespaces", "emulation.addresses", "emulation.shaper",   # hosts, addresses
    "emulation.device", "emulation.torch_threads_per_rank",     # the machine's resources
})
"""config.yaml fields that are bookkeeping (dotted: nested): they differ between runs of one
configuration (paths, the run directory, the machine, provenance) and change no result, so a
snapshot leaves them out and a configuration change never counts them. config.yaml records
no timestamps or host names; a file named in a value (a trace) counts by its name, not its
folder (:func:`_file_names`)."""

DECISIVE = ("time_to_target_s", "status")
"""The metrics that always decide a cell's verdict; ``final_metric`` too where neither side
reached the target. Others decide only when named in ``compare(decisive=...)``."""

STATUS_RANK = {"reached": 0, "finished": 1, "budget_exhausted": 1, "diverged": 2, "failed": 3}


@dataclass(frozen=True)
class Cell:
    """One cell of a results set: its name, identity, values and where it was logged."""

    name: str
    identity: str | None
    values: dict[str, Any]
    metric_name: str | None = None
    time_basis: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    wandb: dict[str, Any] | None = None

    @property
    def group(self) -> str:
        """The name without the seed: the cells whose spread sets the tolerance."""
        return self.name.rsplit("/", 1)[0]


@dataclass
class Snapshot:
    """A results set: its suite, cells by name, the environment its runs were measured in
    (None when its runs disagree or do not say) and where it came from."""

    suite: str | None
    cells: dict[str, Cell]
    environment: dict[str, Any] | None
    source: str

    def to_json(self) -> dict[str, Any]:
        """The snapshot file's content. What changes from one run of the same code to the
        next is left out of the cells, so a refreshed file's diff is what moved: the commit
        and the platform string (``measured_at`` and ``platforms`` hold them once; the cells
        keep the versions of :data:`ENVIRONMENT_KEYS`) and offline W&B runs (a random id,
        and no link to follow)."""
        cells = {}
        for name, cell in sorted(self.cells.items()):
            value = {k: v for k, v in asdict(cell).items() if k != "name"}
            versions = cell.config.get("_versions", {})
            value["config"] = {**cell.config, "_versions": {
                k: versions.get(k) for k in ENVIRONMENT_KEYS}}
            if not (cell.wandb or {}).get("url"):
                value["wandb"] = None
            cells[name] = value
        def each(key: str) -> list[str]:
            return sorted({str(c.config.get("_versions", {}).get(key))
                           for c in self.cells.values()})

        return {"format": SNAPSHOT_FORMAT, "suite": self.suite,
                "environment": self.environment, "measured_at": each("git_commit"),
                "platforms": each("platform"), "cells": cells}


def cell_name(cell: dict[str, Any]) -> str:
    """``experiment/task/condition/label/nWORKERS/sSEED`` (``-`` for an unknown part)."""
    parts = [cell.get(k) for k in ("experiment", "task", "condition", "label")]
    name = "/".join(str(p) if p not in (None, "") else "-" for p in parts)
    return f"{name}/n{cell.get('workers', '-')}/s{cell.get('seed', '-')}"


def _wandb_of(run_dir: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The W&B run a run directory was logged to: ``wandb.json`` (written by the tracker),
    else the id in the name of its ``wandb/offline-run-*`` or ``wandb/run-*`` folder."""
    from decobench.runs.rundir import WANDB_RECORD
    from decobench.runs.tracking import project_name

    record = run_dir / WANDB_RECORD
    if record.is_file():
        found = read_json(record)
        return found if isinstance(found, dict) else None
    folders = sorted((run_dir / "wandb").glob("*run-*")) if (run_dir / "wandb").is_dir() else []
    folders = [f for f in folders if f.is_dir() and f.name != "latest-run"]
    if not folders:
        return None
    offline = folders[-1].name.startswith("offline-")
    return {"id": folders[-1].name.rsplit("-", 1)[-1], "project": project_name(config.get("suite")),
            "url": None, "mode": "offline" if offline else "online"}


def _cell_of(run_dir: Path, entry: dict[str, Any]) -> Cell:
    summary = read_summary(run_dir)
    config = read_config(run_dir)
    status = summary.get("status")
    if status == "finished" and summary.get("reached"):
        status = "reached"
    values = {"time_to_target_s": summary.get("time_to_target_s"),
              "iters_to_target": summary.get("iters_to_target"),
              "final_metric": summary.get("final_metric"),
              "bits_sent": summary.get("bits_sent"), "status": status}
    name_fields = {**{k: summary.get(k) for k in ("task", "label", "condition", "workers",
                                                 "seed")}, **entry}
    name_fields["label"] = name_fields.get("label") or summary.get("method")
    kept = _without_bookkeeping(config)
    kept["_versions"] = config.get("versions") or {}
    return Cell(cell_name(name_fields), entry.get("identity") or config.get("identity"),
                values, summary.get("metric_name"), summary.get("time_basis"), kept,
                _wandb_of(run_dir, config))


def _bookkeeping(field: str) -> bool:
    return any(field == b or field.startswith(b + ".") for b in BOOKKEEPING_FIELDS)


def _without_bookkeeping(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``config`` without :data:`BOOKKEEPING_FIELDS` (nested ones too)."""
    return {k: _without_bookkeeping(v, f"{prefix}{k}.") if isinstance(v, dict) else v
            for k, v in config.items() if not _bookkeeping(f"{prefix}{k}")}


def _environment(cells: Iterable[Cell]) -> dict[str, Any] | None:
    """The versions every cell shares (:data:`ENVIRONMENT_KEYS`), or None if they differ."""
    seen = {json.dumps({k: c.config.get("_versions", {}).get(k) for k in ENVIRONMENT_KEYS},
                       sort_keys=True) for c in cells}
    return json.loads(seen.pop()) if len(seen) == 1 else None


def load_results(path: str | Path) -> tuple[Snapshot, list[str]]:
    """A results folder or snapshot file as a :class:`Snapshot`, and the names of its
    manifest's cells that have no finished run (a failed or unfinished cell)."""
    path = Path(path)
    if path.is_file():
        data = read_json(path)
        if not isinstance(data, dict) or data.get("format") != SNAPSHOT_FORMAT:
            raise DecobenchError(f"{path}: not a decobench snapshot (format "
                                 f"{SNAPSHOT_FORMAT}); give a results folder or a file "
                                 "written by `decobench compare --save`")
        try:
            cells = {name: Cell(name=name, **value) for name, value in data["cells"].items()}
        except (TypeError, AttributeError) as exc:
            raise DecobenchError(f"{path}: a cell of this snapshot is malformed ({exc})") from None
        return Snapshot(data.get("suite"), cells, data.get("environment"), str(path)), []
    if not path.is_dir():
        raise DecobenchError(f"{path}: no such results folder or snapshot file")
    manifest_path = path / MANIFEST
    entries: list[tuple[Path, dict[str, Any]]] = []
    unfinished: list[str] = []
    suite = None
    if manifest_path.is_file():
        manifest = read_json(manifest_path)
        suite = manifest.get("suite")
        for entry in manifest.get("cells", []):
            run_dir = path / str(entry.get("run_dir", ""))
            if (run_dir / SUMMARY).is_file():
                entries.append((run_dir, entry))
            else:
                unfinished.append(cell_name(entry))
    else:
        entries = [(run_dir, {}) for run_dir in summary_dirs(path)]
    if not entries and not unfinished:
        raise DecobenchError(f"{path}: no finished runs (no {SUMMARY} below it)")
    cells: dict[str, Cell] = {}
    for run_dir, entry in entries:
        cell = _cell_of(run_dir, entry)
        if cell.name in cells:
            raise DecobenchError(f"{path}: two runs are cell {cell.name} ({run_dir}); "
                                 "compare results folders of one sweep each")
        cells[cell.name] = cell
        suite = suite or cell.config.get("suite")
    return Snapshot(suite, cells, _environment(cells.values()), str(path)), unfinished


def write_snapshot(snapshot: Snapshot, path: str | Path) -> Path:
    """Write ``snapshot`` as sorted, indented JSON (atomically): one cell per block, so a
    refreshed golden file's diff shows what moved."""
    text = json.dumps(snapshot.to_json(), indent=1, sort_keys=True, default=str) + "\n"
    write_text_atomic(path, text)
    return Path(path)


# --------------------------------------------------------------------------- comparing


@dataclass(frozen=True)
class Change:
    """One metric of one cell: BASE's and NEW's value, the tolerance, whether it decides the
    cell's verdict, and its verdict (``same``, ``better``, ``within`` tolerance, beyond it:
    ``regressed`` if decisive, else ``flagged``)."""

    metric: str
    base: Any
    new: Any
    tolerance: float | None
    verdict: str
    relative: float | None = None
    decisive: bool = True


@dataclass(frozen=True)
class CellComparison:
    name: str
    changes: tuple[Change, ...]
    identity_changed: bool = False
    config_diff: tuple[str, ...] = ()
    base_wandb: dict[str, Any] | None = None
    new_wandb: dict[str, Any] | None = None
    new_name: str | None = None
    """NEW's name where it differs (a plain run paired by :func:`_pair_plain_runs`)."""

    @property
    def regressed(self) -> bool:
        return any(c.verdict == "regressed" for c in self.changes)

    @property
    def config_changed(self) -> bool:
        return bool(self.config_diff) or self.identity_changed

    @property
    def flags(self) -> list[Change]:
        return [c for c in self.changes if c.verdict == "flagged"]

    @property
    def verdict(self) -> str:
        """From the decisive metrics: ``regressed`` if one regressed; else ``within
        tolerance`` if one is worse (but within it), even when another is better; else
        ``better`` or ``same``. Flagged metrics do not change it."""
        decisive = [c.verdict for c in self.changes if c.decisive]
        if "regressed" in decisive:
            return "regressed"
        if "within" in decisive:
            return "within tolerance"
        return "better" if "better" in decisive else "same"


@dataclass(frozen=True)
class Comparison:
    base: str
    new: str
    mode: str
    """How the tolerance was chosen (module docstring), in words."""
    metrics: tuple[str, ...]
    cells: tuple[CellComparison, ...]
    missing: tuple[str, ...]
    added: tuple[str, ...]
    decisive: tuple[str, ...] = DECISIVE
    """The metrics that decide every cell's verdict (the final metric also decides where
    neither side reached the target)."""

    @property
    def regressed(self) -> list[CellComparison]:
        return [c for c in self.cells if c.regressed]

    @property
    def failed(self) -> bool:
        """What the exit status says: a regressed or a missing cell."""
        return bool(self.regressed or self.missing)

    def headline(self) -> str:
        changed = sum(c.config_changed for c in self.cells)
        flagged = sum(bool(c.flags) for c in self.cells)
        same = sum(c.verdict == "same" for c in self.cells)
        better = sum(c.verdict == "better" for c in self.cells)
        within = sum(c.verdict == "within tolerance" for c in self.cells)
        verdict = "REGRESSION" if self.failed else "OK"
        return (f"{verdict}: {len(self.regressed)} regressed, {len(self.missing)} missing, "
                f"{len(self.added)} new, {changed} with a changed configuration, {flagged} "
                f"with a flagged metric; {same} same, {better} better, {within} within "
                f"tolerance ({len(self.cells)} cells compared; decided by "
                f"{', '.join(self.decisive)}; tolerance: {self.mode})")

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base, "new": self.new, "tolerance": self.mode,
                "metrics": list(self.metrics), "decisive": list(self.decisive),
                "regressed": self.failed, "headline": self.headline(),
                "missing": list(self.missing), "new_cells": list(self.added),
                "cells": [{"name": c.name, "new_name": c.new_name, "verdict": c.verdict,
                           "flagged": [ch.metric for ch in c.flags],
                           "config_changed": c.config_changed,
                           "identity_changed": c.identity_changed,
                           "config_diff": list(c.config_diff),
                           "base_wandb": c.base_wandb, "new_wandb": c.new_wandb,
                           "metrics": [asdict(ch) for ch in c.changes]} for c in self.cells]}


def _lower_is_better(metric: str, cell: Cell) -> bool:
    if metric == "final_metric":
        return (cell.metric_name or "") in LOWER_IS_BETTER
    return True


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def seed_spread(cells: Iterable[Cell], metric: str) -> dict[str, float]:
    """Per cell group: the relative range (max − min) / |median| of ``metric`` over its
    seeds (groups with fewer than two values, or a zero median, are left out)."""
    values: dict[str, list[float]] = defaultdict(list)
    for cell in cells:
        number = _number(cell.values.get(metric))
        if number is not None:
            values[cell.group].append(number)
    spread = {}
    for group, numbers in values.items():
        middle = abs(statistics.median(numbers))
        if len(numbers) > 1 and middle > 0:
            spread[group] = (max(numbers) - min(numbers)) / middle
    return spread


def _task(group: str) -> str:
    """The task of a cell group (``experiment/task/condition/label/nN``)."""
    parts = group.split("/")
    return parts[1] if len(parts) > 1 else group


def task_spread(spread: dict[str, float]) -> dict[str, float]:
    """Per task: the largest seed spread of its cell groups (:func:`seed_spread`), the
    tolerance of its cells that have one seed."""
    largest: dict[str, float] = {}
    for group, value in spread.items():
        largest[_task(group)] = max(value, largest.get(_task(group), 0.0))
    return largest


def _compare_metric(metric: str, base: Cell, new: Cell, tolerance: float,
                    decisive: bool) -> Change:
    b, n = base.values.get(metric), new.values.get(metric)
    if metric == "status":
        rb, rn = STATUS_RANK.get(str(b), 4), STATUS_RANK.get(str(n), 4)
        verdict = "same" if rb == rn else ("better" if rn < rb else "regressed")
        return Change(metric, b, n, None, verdict)
    worse = "regressed" if decisive else "flagged"
    bn, nn = _number(b), _number(n)
    if bn is None or nn is None:
        if bn is None and nn is None:
            return Change(metric, b, n, tolerance, "same", None, decisive)
        # a value on one side only: for time and iterations to target, a target met or lost
        lost = nn is None
        if metric in ("time_to_target_s", "iters_to_target"):
            return Change(metric, b, n, tolerance, worse if lost else "better", None, decisive)
        return Change(metric, b, n, tolerance, worse if lost else "same", None, decisive)
    if bn == nn:
        return Change(metric, b, n, tolerance, "same", 0.0, decisive)
    by = (nn - bn) if _lower_is_better(metric, base) else (bn - nn)
    relative = (nn - bn) / abs(bn) if bn else math.inf
    if by < 0:
        return Change(metric, b, n, tolerance, "better", relative, decisive)
    within = bn != 0 and by / abs(bn) <= tolerance
    return Change(metric, b, n, tolerance, "within" if within else worse, relative, decisive)


_FOLDERS = re.compile(r"[^\s:'\"(]*/(?=[^\s/]+\.[A-Za-z]{2,5}\b)")


def _file_names(value: Any) -> Any:
    """A string with the folders of the files it names dropped (``/x/traces/a.csv`` and
    ``paper:/y/a.csv``: ``a.csv``, ``paper:a.csv``): a sweep's per-seed trace lies in its
    own results folder, and a file's content shows in the run's ``network``."""
    return _FOLDERS.sub("", value) if isinstance(value, str) else value


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested fields as dotted keys, without :data:`BOOKKEEPING_FIELDS`."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        field = f"{prefix}{key}"
        if _bookkeeping(field):
            continue
        if isinstance(value, dict) and value:
            flat.update(_flat(value, field + "."))
        else:
            flat[field] = _file_names(value)
    return flat


def _short(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 1] + "…"


def config_diff(base: dict[str, Any], new: dict[str, Any]) -> tuple[str, ...]:
    """The fields of two configurations (``config.yaml``) that differ, as ``field: old ->
    new`` (nested fields dotted; :data:`BOOKKEEPING_FIELDS`, the identity and the versions
    left out; files by name, :func:`_file_names`)."""
    left = {k: v for k, v in base.items() if k not in ("_versions", "identity")}
    right = {k: v for k, v in new.items() if k not in ("_versions", "identity")}
    fb, fn = _flat(left), _flat(right)
    return tuple(f"{k}: {_short(fb.get(k))} -> {_short(fn.get(k))}"
                 for k in sorted(set(fb) | set(fn)) if fb.get(k) != fn.get(k))


def _selected(name: str, only: Sequence[str]) -> bool:
    """``--only``: glob patterns on the cell name (any may match)."""
    return not only or any(fnmatch.fnmatchcase(name, pattern) for pattern in only)


def _without_condition(name: str) -> str | None:
    """A plain run's name (experiment ``-``) without its condition, else None."""
    parts = name.split("/")
    return "/".join(parts[:2] + parts[3:]) if len(parts) == 6 and parts[0] == "-" else None


def _pair_plain_runs(only_base: set[str], only_new: set[str]) -> dict[str, str]:
    """BASE's unmatched plain runs paired with NEW's whose names differ only in the condition
    (a plain run's condition is named after its network), where the pairing is unique."""
    def by_rest(names: set[str]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = defaultdict(list)
        for name in names:
            rest = _without_condition(name)
            if rest is not None:
                found[rest].append(name)
        return found

    left, right = by_rest(only_base), by_rest(only_new)
    return {left[rest][0]: right[rest][0] for rest in left
            if len(left[rest]) == 1 and len(right.get(rest, ())) == 1}


def _exact(base: Snapshot, new: Snapshot) -> tuple[bool, str]:
    if base.environment is None or new.environment is None:
        return False, "the runs of one side were measured on several platforms"
    unrecorded = [k for k in ENVIRONMENT_KEYS
                  if base.environment.get(k) is None or new.environment.get(k) is None]
    if unrecorded:
        return False, "the runs do not record " + ", ".join(unrecorded)
    if base.environment != new.environment:
        differ = [k for k in ENVIRONMENT_KEYS
                  if base.environment.get(k) != new.environment.get(k)]
        return False, "platform or versions differ (" + ", ".join(differ) + ")"
    bases = {c.time_basis for c in [*base.cells.values(), *new.cells.values()]}
    if bases != {"simulated"}:
        return False, "not every run is on the simulated clock"
    return True, ("exact: same platform and versions on the simulated clock (deterministic "
                  "runs)")


def _decisive(metrics: Sequence[str], decisive: Sequence[str]) -> tuple[str, ...]:
    unknown = sorted(set(metrics) - set(METRICS))
    if unknown:
        raise DecobenchError(f"unknown metric {', '.join(unknown)}; choose from "
                             f"{', '.join(METRICS)}")
    unknown = sorted(set(decisive) - set(METRICS))
    if unknown:
        raise DecobenchError(f"--decisive {', '.join(unknown)}: not a metric; choose from "
                             f"{', '.join(METRICS)}")
    uncompared = sorted(set(decisive) - set(metrics))
    if uncompared:
        raise DecobenchError(f"--decisive {', '.join(uncompared)}: not compared; add "
                             f"--metric {' --metric '.join(uncompared)}")
    return tuple(m for m in METRICS if m in metrics and (m in DECISIVE or m in decisive))


def compare(base: Snapshot, new: Snapshot, *, metrics: Sequence[str] = METRICS,
            tolerance: float | None = None, only: Sequence[str] = (),
            unfinished: Sequence[str] = (), decisive: Sequence[str] = ()) -> Comparison:
    """Compare ``new`` with ``base`` (module docstring); ``unfinished``: NEW's cells with no
    finished run, reported as missing; ``decisive``: metrics that decide besides
    :data:`DECISIVE`."""
    deciding = _decisive(metrics, decisive)
    if tolerance is not None and (not math.isfinite(tolerance) or tolerance < 0):
        raise DecobenchError(f"--tolerance {tolerance}: give a relative tolerance >= 0, "
                             "e.g. 0.05 for 5%")
    exact, why = _exact(base, new)
    spreads = {m: seed_spread(base.cells.values(), m) for m in metrics}
    by_task = {m: task_spread(spreads[m]) for m in metrics}
    if tolerance is not None:
        mode = "exact (--tolerance 0)" if tolerance == 0 else f"{tolerance:.3g} (--tolerance)"
    elif exact:
        mode = why
    else:
        mode = (f"seed spread, at least {DEFAULT_TOLERANCE:.0%}; one seed: its task's largest "
                f"({why})")
    names_base = {n for n in base.cells if _selected(n, only)}
    names_new = {n for n in new.cells if _selected(n, only)}
    pairs = {n: n for n in names_base & names_new}
    pairs.update(_pair_plain_runs(names_base - names_new, names_new - names_base))
    rows = []
    for name, new_name in sorted(pairs.items()):
        b, n = base.cells[name], new.cells[new_name]
        neither = _number(b.values.get("time_to_target_s")) is None and _number(
            n.values.get("time_to_target_s")) is None
        changes = []
        for metric in metrics:
            if tolerance is not None:
                tol = tolerance
            elif exact:
                tol = 0.0
            else:
                own = spreads[metric].get(b.group)
                tol = max(DEFAULT_TOLERANCE, own if own is not None
                          else by_task[metric].get(_task(b.group), 0.0))
            decides = metric in deciding or (metric == "final_metric" and neither)
            changes.append(_compare_metric(metric, b, n, tol, decides))
        changed = b.identity is not None and n.identity is not None and b.identity != n.identity
        rows.append(CellComparison(name, tuple(changes), changed, config_diff(b.config, n.config),
                                   b.wandb, n.wandb, None if new_name == name else new_name))
    missing = sorted((names_base - set(pairs))
                     | {u for u in unfinished if _selected(u, only) and u in names_base})
    return Comparison(base.source, new.source, mode, tuple(metrics), tuple(rows),
                      tuple(missing), tuple(sorted(names_new - set(pairs.values()))), deciding)


# --------------------------------------------------------------------------- rendering


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _wandb_link(record: dict[str, Any] | None, text: str) -> str:
    if not record:
        return ""
    if record.get("url"):
        return f"[{text}]({record['url']})"
    return f"{text}: {record.get('mode', 'offline')} {record.get('project', '')}/{record.get('id', '?')}"


def _change_text(change: Change) -> str:
    if change.verdict == "same":
        return _fmt(change.new)
    arrow = f"{_fmt(change.base)} → {_fmt(change.new)}"
    if change.relative is not None and math.isfinite(change.relative):
        arrow += f" ({change.relative:+.1%})"
    mark = {"regressed": " **REGRESSED**", "better": " (better)", "flagged": " (flag)",
            "within": " (worse, within tolerance)"}[change.verdict]
    return arrow + mark


def _cell_text(cell: CellComparison) -> str:
    return cell.name + (f" (NEW: {cell.new_name})" if cell.new_name else "")


def _diff_text(cell: CellComparison) -> list[str]:
    """The changed configuration fields, or why the identity differs without one."""
    return list(cell.config_diff) or ["identity differs, no recorded field does (e.g. a "
                                      "trace file's content)"]


def to_markdown(comparison: Comparison) -> str:
    """The comparison as Markdown: the headline, missing and new cells, then one row per
    compared cell (regressed first) with each metric and the cells' W&B runs."""
    lines = ["# decobench compare", "", f"BASE `{comparison.base}`, NEW `{comparison.new}`",
             "", f"**{comparison.headline()}**", ""]
    if comparison.missing:
        lines += ["Missing in NEW (no finished run): " + ", ".join(f"`{m}`" for m in
                                                                 comparison.missing), ""]
    if comparison.added:
        lines += ["New in NEW: " + ", ".join(f"`{m}`" for m in comparison.added), ""]
    header = ["cell", "verdict", *comparison.metrics, "W&B"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    order = sorted(comparison.cells, key=lambda c: (not c.regressed, c.name))
    for cell in order:
        name = f"`{_cell_text(cell)}`" + (" (configuration changed)" if cell.config_changed
                                           else "")
        links = " ".join(x for x in (_wandb_link(cell.base_wandb, "base"),
                                     _wandb_link(cell.new_wandb, "new")) if x)
        lines.append("| " + " | ".join([name, cell.verdict,
                                        *(_change_text(c) for c in cell.changes), links]) + " |")
    changed = [c for c in comparison.cells if c.config_changed]
    if changed:
        lines += ["", "Changed configurations (field: BASE -> NEW):"]
        for cell in changed:
            lines.append(f"- `{_cell_text(cell)}`: " + "; ".join(
                f"`{line}`" for line in _diff_text(cell)))
    return "\n".join(lines) + "\n"


def print_table(comparison: Comparison) -> None:
    """The comparison as a terminal table (rich), regressed cells first."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=comparison.headline(), title_justify="left", show_lines=False)
    for column in ("cell", "verdict", *comparison.metrics):
        table.add_column(column, overflow="fold")
    for cell in sorted(comparison.cells, key=lambda c: (not c.regressed, c.name)):
        style = "bold red" if cell.regressed else None
        table.add_row(_cell_text(cell) + (" *" if cell.config_changed else ""), cell.verdict,
                      *(_change_text(c).replace("**", "") for c in cell.changes), style=style)
    console = Console(width=200)
    console.print(table)
    for name in comparison.missing:
        console.print(f"missing in NEW: {name}", style="bold red")
    for name in comparison.added:
        console.print(f"new in NEW: {name}")
    for cell in comparison.cells:
        if cell.config_changed:
            console.print(f"* {_cell_text(cell)}: configuration changed (field: BASE -> NEW)",
                          highlight=False)
            for line in _diff_text(cell):
                console.print(f"    {line}", highlight=False, markup=False)


def write_comparison(comparison: Comparison, out: str | Path) -> tuple[Path, Path]:
    """``OUT/compare.md`` and ``OUT/compare.json`` (atomically)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    markdown, data = out / "compare.md", out / "compare.json"
    write_text_atomic(markdown, to_markdown(comparison))
    write_text_atomic(data, json.dumps(comparison.to_json(), indent=1, default=str) + "\n")
    return markdown, data


__all__ = ["BOOKKEEPING_FIELDS", "DECISIVE", "DEFAULT_TOLERANCE", "ENVIRONMENT_KEYS",
           "METRICS", "SNAPSHOT_FORMAT", "Cell", "CellComparison", "Change", "Comparison",
           "Snapshot", "cell_name", "compare", "config_diff",
           "load_results", "print_table", "seed_spread", "task_spread", "to_markdown",
           "write_comparison",
           "write_snapshot"]
