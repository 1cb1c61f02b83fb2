"""Suites: YAML files naming a grid of runs (tasks × methods × network conditions × workers ×
seeds, with budgets and targets), validated before anything runs.

A suite file::

    name: smoke
    description: ...
    cost: about 12 minutes on 2 CPU cores
    defaults: {profile: cpu}                  # any `decobench run` option, for every cell
    conditions:                               # named network conditions
      wan: {trace: wan-200ms-lowbw-varying}
      table1-100mbps-200ms: {constant: {bandwidth_mbps: 100, latency_ms: 200}}
      paper-wan: {regime: paper-wan}
      rho4-lambda1: {transmission_ratio: 4, latency_ratio: 1}
    experiments:                              # each one is a cartesian product
      - name: main
        tasks: [cnn-fmnist]
        conditions: [wan]
        methods: [d-sgd, {method: deco-sgd, label: deco-sgd-F25, options: {deco_interval: 25}}]
        workers: [4]
        seeds: [0, 1, 2]
        target: 0.75                          # or per task: {cnn-fmnist: 0.75, gpt2-wikitext: 400}
        max_iters: 3000                       # budgets, scalar or per task
        max_sim_time: null
        options: {eval_every: 20}             # more run options for this experiment

A method entry may also be a grid of static options, ``{method: dd-ef-sgd, grid: {delta:
[0.01, 0.1], tau: [0, 2]}}``, which expands to one labelled variant per combination
(``dd-ef-sgd-delta0.01-tau0``, ...).

:func:`load_suite` parses and validates the file (unknown keys, unknown tasks or methods,
missing traces and non-positive budgets are errors that name the field);
:func:`expand_cells` turns it into :class:`Cell` s, each a validated :class:`RunConfig`.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from decobench.errors import DecobenchError
from decobench.runs.config import RunConfig, build_run_config
from decobench.runs.identity import identity

SUITES_DIR = Path(__file__).parents[1] / "suites"
"""Suites shipped with decobench, addressable by name (file stem)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ConstantNetwork(_Strict):
    bandwidth_mbps: float = Field(gt=0, description="bandwidth a in Mbit/s")
    latency_ms: float = Field(ge=0, description="one-way latency b in ms")


class FamilyNetwork(_Strict):
    """A trace family (:mod:`decobench.netem.families`): seed s of a cell runs on the
    family's realisation s, written into the results folder."""

    family: str = Field(description="constant, walk, step-drop, diurnal or high-latency")
    mean_mbps: float = Field(gt=0, description="the family's mean bandwidth in Mbit/s")
    latency_ms: float = Field(ge=0, description="its one-way latency in ms")
    duration_s: float = Field(gt=0, description="the realisation's length (its period)")
    regime_profile: str | None = Field(None, description="run it as this task profile's "
                                       "model sees it (a regime, e.g. paper), not as is")

    @field_validator("family")
    @classmethod
    def _known(cls, family: str) -> str:
        from decobench.netem.families import FAMILIES

        if family not in FAMILIES:
            raise ValueError(f"unknown trace family {family!r}; choose one of: "
                             f"{', '.join(FAMILIES)}")
        return family


class ConditionSpec(_Strict):
    """One named network condition: exactly one of a trace, a regime, the two ratios, a
    constant link (written as a one-row trace into the results folder) or a trace family (one
    realisation per seed, written there too)."""

    trace: str | None = None
    regime: str | None = None
    transmission_ratio: float | None = Field(None, gt=0)
    latency_ratio: float | None = Field(None, ge=0)
    ratio_shape: str | None = None
    constant: ConstantNetwork | None = None
    family: FamilyNetwork | None = None
    trace_loop: bool = False
    per_seed_trace: bool = False
    """Each seed s of a cell runs on realisation s of the condition's generated pack trace
    (:func:`decobench.netem.pack.realisation`; seed 0: the bundled file), so the spread over
    seeds covers the network's variation too (docs/traces.md "Realisations")."""

    @property
    def pack_trace(self) -> str | None:
        """The trace name that ``per_seed_trace`` draws realisations of: the trace, the
        regime's trace or the ratio shape."""
        if self.regime is not None:
            from decobench.clock.regime import parse_regime

            return parse_regime(self.regime)[1]
        return self.trace or self.ratio_shape

    @model_validator(mode="after")
    def _one_kind(self) -> ConditionSpec:
        if (self.transmission_ratio is None) != (self.latency_ratio is None):
            raise ValueError("give transmission_ratio and latency_ratio together")
        if self.ratio_shape is not None and self.transmission_ratio is None:
            raise ValueError("ratio_shape needs transmission_ratio and latency_ratio")
        kinds = [k for k in ("trace", "regime", "transmission_ratio", "constant", "family")
                 if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("give exactly one of trace, regime, transmission_ratio + "
                             f"latency_ratio, constant or family (got "
                             f"{', '.join(kinds) or 'none'})")
        if self.family is not None and self.per_seed_trace:
            raise ValueError("a family already draws one realisation per seed: leave out "
                             "per_seed_trace")
        if self.per_seed_trace:
            from decobench.netem.pack import PACK

            name = self.pack_trace
            generated = sorted(n for n, t in PACK.items() if t.varies)
            if name is None or name not in PACK or not PACK[name].varies:
                raise ValueError(f"per_seed_trace draws realisations of a generated pack "
                                 f"trace, and {name or 'this condition'!s} is not one; give "
                                 f"one of {', '.join(generated)}")
        return self


class MethodEntry(_Strict):
    """A method variant: a method, its display label and options; or a grid of options."""

    method: str
    label: str | None = Field(None, min_length=1)
    options: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any]] | None = None

    @field_validator("grid")
    @classmethod
    def _grid_not_empty(cls, grid: dict[str, list[Any]] | None) -> dict[str, list[Any]] | None:
        if grid is not None and (not grid or any(len(v) == 0 for v in grid.values())):
            raise ValueError("a grid needs at least one option with at least one value")
        return grid

    def variants(self) -> list[tuple[str, dict[str, Any]]]:
        """(label, options) of each variant this entry stands for."""
        if self.grid is None:
            return [(self.label or self.method, dict(self.options))]
        names = list(self.grid)
        out = []
        for values in itertools.product(*(self.grid[n] for n in names)):
            suffix = "-".join(f"{n}{v:g}" if isinstance(v, float) else f"{n}{v}"
                              for n, v in zip(names, values, strict=True))
            out.append((f"{self.label or self.method}-{suffix}",
                        dict(self.options) | dict(zip(names, values, strict=True))))
        return out


PerTask = float | dict[str, float] | None


Role = Literal["main", "table1", "scaling", "regime-map", "theory", "robust", "other"]
"""What an experiment's runs are evidence for in the report's claims table (docs/reports.md
"Claims"): the main comparison (the paper's section-5.2 condition), the Table-1 grid of
measured links, the scaling study, the regime map, the static (δ, τ) grid, this project's
robust-planner check (a planner against the per-seed oracle of a static grid on trace
families, docs/methods/deco-sgd-robust.md), or none."""


class Resources(_Strict):
    """What one run needs on a cluster (``decobench sweep --executor slurm`` or ``ray``): the
    Slurm job's or Ray task's CPUs (also the run's torch threads), GPUs, memory and time
    limit. The local executor ignores them (it gives each run cores / jobs threads)."""

    cpus: int = Field(1, ge=1, description="CPU cores per run (and its torch threads)")
    gpus: int = Field(0, ge=0, description="GPUs per run")
    mem_gb: float | None = Field(None, gt=0, description="memory per run in GB (default: "
                                 "the cluster's)")
    timeout_min: int = Field(120, ge=1, description="time limit of one run's job (Slurm)")


class Experiment(_Strict):
    """A cartesian product of tasks × conditions × methods × workers × seeds."""

    name: str = Field(min_length=1)
    role: Role | None = Field(
        None, description="what the runs are evidence for in the claims table (Role); unset: "
        "regime-map for conditions given by ratios, else main")
    tasks: list[str] = Field(min_length=1)
    conditions: list[str] = Field(min_length=1)
    methods: list[str | MethodEntry] = Field(min_length=1)
    workers: list[int] = Field(default_factory=lambda: [4], min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    target: PerTask = None
    max_iters: int | dict[str, int] | None = None
    max_sim_time: PerTask = None
    options: dict[str, Any] = Field(default_factory=dict)
    resources: Resources | None = Field(None, description="per-run resources on a cluster "
                                        "(default: the suite's)")

    @field_validator("workers")
    @classmethod
    def _workers_positive(cls, workers: list[int]) -> list[int]:
        if any(w < 1 for w in workers):
            raise ValueError("workers must be >= 1")
        return workers

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, seeds: list[int]) -> list[int]:
        if any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
            raise ValueError("seeds must be distinct integers >= 0")
        return seeds

    @field_validator("max_iters", "max_sim_time")
    @classmethod
    def _budget_positive(cls, value: Any) -> Any:
        values = value.values() if isinstance(value, dict) else [value]
        if any(v is not None and v <= 0 for v in values):
            raise ValueError("a budget must be > 0")
        return value

    def method_entries(self) -> list[MethodEntry]:
        return [MethodEntry(method=m) if isinstance(m, str) else m for m in self.methods]


class Suite(_Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    cost: str = Field("", description="what running it costs (time, hardware)")
    defaults: dict[str, Any] = Field(default_factory=dict)
    resources: Resources = Field(default_factory=Resources, description="per-run resources "
                                 "on a cluster, for every experiment that gives none")
    conditions: dict[str, ConditionSpec] = Field(min_length=1)
    experiments: list[Experiment] = Field(min_length=1)

    @model_validator(mode="after")
    def _references(self) -> Suite:
        labels: dict[str, str] = {}
        for i, experiment in enumerate(self.experiments):
            for name in experiment.conditions:
                if name not in self.conditions:
                    raise ValueError(f"experiments[{i}].conditions: unknown condition {name!r} "
                                     f"(defined: {', '.join(self.conditions)})")
            for entry in experiment.method_entries():
                for label, _ in entry.variants():
                    if labels.setdefault(label, entry.method) != entry.method:
                        raise ValueError(f"experiments[{i}].methods: label {label!r} names "
                                         f"both {labels[label]} and {entry.method}")
        return self


@dataclass(frozen=True)
class Cell:
    """One run of a suite: its validated config, identity and run-directory name."""

    experiment: str
    config: RunConfig
    identity: str
    role: str | None = None
    resources: Resources = dataclasses.field(default_factory=Resources)
    family: str | None = None
    """The trace family of a ``family`` condition (recorded in the manifest, where the
    report reads it: a condition may be named anything)."""

    @property
    def name(self) -> str:
        c = self.config
        return (f"{c.task}__{c.condition}__{c.label}__n{c.workers}__s{c.seed}__"
                f"{self.identity[:12]}")

    def manifest_entry(self) -> dict[str, Any]:
        c = self.config
        return {"id": self.identity[:12], "identity": self.identity,
                "run_dir": f"runs/{self.name}", "experiment": self.experiment,
                "role": self.role,
                "task": c.task, "method": c.method, "label": c.label,
                "condition": c.condition, "workers": c.workers, "seed": c.seed,
                "profile": c.profile} | ({"family": self.family} if self.family else {})


def resolve_suite_path(name_or_path: str) -> Path:
    """A suite file path, or the shipped suite of that name (``smoke``, ``paper``, ...)."""
    path = Path(name_or_path)
    if path.suffix in {".yaml", ".yml"} or path.exists():
        if not path.is_file():
            raise DecobenchError(f"suite file {path} does not exist")
        return path
    shipped = SUITES_DIR / f"{name_or_path}.yaml"
    if not shipped.is_file():
        raise DecobenchError(f"unknown suite {name_or_path!r}: not a file, and not one of the "
                             f"shipped suites ({', '.join(shipped_suites())})")
    return shipped


def shipped_suites() -> list[str]:
    return sorted(p.stem for p in SUITES_DIR.glob("*.yaml"))


def _field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def parse_suite(data: Any, source: str) -> Suite:
    if not isinstance(data, dict):
        raise DecobenchError(f"suite {source}: expected a mapping at the top level")
    try:
        return Suite(**data)
    except ValidationError as exc:
        problems = []
        for item in exc.errors():
            loc = tuple(p for p in item["loc"] if not (isinstance(p, str) and p in
                                                       {"str", "MethodEntry", "float", "int",
                                                        "dict[str,float]", "dict[str,int]"}))
            value = item.get("input")
            shown = (f" (got {value!r})" if value is not None and not isinstance(value, dict)
                     else "")
            message = item["msg"].removeprefix("Value error, ")
            problems.append(f"{_field_path(loc) or 'suite'}: {message}{shown}")
        raise DecobenchError(f"suite {source}: " + "; ".join(dict.fromkeys(problems))) from exc


def load_suite(name_or_path: str) -> tuple[Suite, Path]:
    path = resolve_suite_path(name_or_path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise DecobenchError(f"suite {path}: not valid YAML ({exc})") from exc
    return parse_suite(data, str(path)), path


def _per_task(value: Any, task: str, field: str, where: str) -> Any:
    if not isinstance(value, dict):
        return value
    if task not in value:
        raise DecobenchError(f"{where}.{field}: no value for task {task!r} "
                             f"(given for {', '.join(value)})")
    return value[task]


def constant_trace_path(traces_dir: Path, name: str) -> Path:
    """Where the one-row trace of the ``constant`` condition ``name`` is written."""
    return traces_dir / f"{name}.csv"


def realised_trace_path(traces_dir: Path, trace: str, seed: int) -> Path:
    """Where realisation ``seed`` of pack trace ``trace`` is written for a ``per_seed_trace``
    condition (seed 0 reads the bundled file itself)."""
    return traces_dir / f"{trace}-r{seed}.csv"


def family_trace_path(traces_dir: Path, name: str, seed: int) -> Path:
    """Where seed ``seed``'s realisation of the ``family`` condition ``name`` is written."""
    return traces_dir / f"{name}-s{seed}.csv"


def _condition_values(name: str, spec: ConditionSpec, traces_dir: Path,
                      seed: int = 0) -> dict[str, Any]:
    if spec.family is not None:
        path = family_trace_path(traces_dir, name, seed)
        if not path.is_file():
            raise DecobenchError(f"condition {name}: {path} is missing: family realisations "
                                 "are written by write_realised_traces (decobench sweep does "
                                 "this first)")
        network = ({"regime": f"{spec.family.regime_profile}:{path}"}
                   if spec.family.regime_profile else {"trace": str(path)})
        return network | {"trace_loop": spec.trace_loop}
    if spec.constant is not None:
        return {"trace": str(constant_trace_path(traces_dir, name)),
                "trace_loop": spec.trace_loop}
    out = {k: getattr(spec, k) for k in ("trace", "regime", "transmission_ratio",
                                         "latency_ratio", "ratio_shape")
           if getattr(spec, k) is not None}
    if spec.per_seed_trace and seed > 0:
        pack_trace = spec.pack_trace
        assert pack_trace is not None
        realised = realised_trace_path(traces_dir, pack_trace, seed)
        if not realised.is_file():
            raise DecobenchError(f"condition {name}: {realised} is missing: realisations of "
                                 "per_seed_trace conditions are written by "
                                 "write_realised_traces (decobench sweep does this first)")
        path = str(realised)
        if spec.regime is not None:
            from decobench.clock.regime import parse_regime

            out["regime"] = f"{parse_regime(spec.regime)[0]}:{path}"
        else:
            out["ratio_shape" if spec.ratio_shape is not None else "trace"] = path
    return out | {"trace_loop": spec.trace_loop}


def write_realised_traces(suite: Suite, traces_dir: Path) -> None:
    """Write realisation s (s > 0) of each ``per_seed_trace`` condition's pack trace, and
    realisation s (every s) of each ``family`` condition, for every seed an experiment runs it
    with (:func:`realised_trace_path`, :func:`family_trace_path`; unchanged files are left
    alone, so a resumed sweep does not rewrite them)."""
    from decobench.netem.families import family_trace
    from decobench.netem.pack import realisation

    packs: set[tuple[str, int]] = set()
    families: set[tuple[str, int]] = set()
    for experiment in suite.experiments:
        for condition in experiment.conditions:
            spec = suite.conditions[condition]
            if spec.per_seed_trace and spec.pack_trace is not None:
                packs.update((spec.pack_trace, s) for s in experiment.seeds if s > 0)
            if spec.family is not None:
                families.update((condition, s) for s in experiment.seeds)
    for trace_name, seed in sorted(packs):
        trace, header = realisation(trace_name, seed)
        _write_if_changed(realised_trace_path(traces_dir, trace_name, seed), trace.to_csv(
            "\n".join([*header, f"suite {suite.name}: seed {seed} of per_seed_trace "
                       "conditions"])))
    for condition, seed in sorted(families):
        family = suite.conditions[condition].family
        assert family is not None
        trace = family_trace(family.family, family.mean_mbps, family.latency_ms,
                             family.duration_s, seed)
        _write_if_changed(family_trace_path(traces_dir, condition, seed),
                          trace.to_csv(f"suite {suite.name}: condition {condition}, seed {seed}"))


def _write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` atomically unless ``path`` already holds it (a resumed sweep's files
    keep their times)."""
    from decobench.atomicio import write_text_atomic

    if not (path.is_file() and path.read_text(encoding="utf-8") == text):
        write_text_atomic(path, text)


def write_constant_traces(suite: Suite, traces_dir: Path) -> None:
    """Write each ``constant`` condition as a one-row trace CSV (``traces_dir/NAME.csv``)."""
    from decobench.netem.generators import constant
    from decobench.netem.trace import write_trace

    for name, spec in suite.conditions.items():
        if spec.constant is not None:
            trace = constant(spec.constant.bandwidth_mbps, spec.constant.latency_ms, name=name)
            write_trace(trace, constant_trace_path(traces_dir, name),
                        comment=f"suite {suite.name}: condition {name}")



def expand_cells(suite: Suite, traces_dir: Path, data_roots: dict[str, str] | None = None,
                 backend: str | None = None) -> list[Cell]:
    """Every run of the suite as a validated :class:`RunConfig` (in file order), on
    ``backend`` when given (else the suite's own, by default simulated). Traces of
    ``constant`` conditions must already be written to ``traces_dir``."""
    from decobench.methods import get_method_spec
    from decobench.netem.trace import load_trace, resolve_trace_path
    from decobench.tasks import get_task

    data_roots = data_roots or {}
    for name, spec in suite.conditions.items():
        for field in ("trace", "ratio_shape"):
            if getattr(spec, field) is not None:
                try:
                    load_trace(resolve_trace_path(getattr(spec, field)))
                except DecobenchError as exc:
                    raise DecobenchError(f"suite {suite.name}: conditions.{name}.{field}: "
                                         f"{exc}") from exc
    cells: list[Cell] = []
    seen: dict[str, str] = {}
    for i, experiment in enumerate(suite.experiments):
        where = f"experiments[{i}] ({experiment.name})"
        for t, task in enumerate(experiment.tasks):
            try:
                get_task(task)
            except DecobenchError as exc:
                raise DecobenchError(f"suite {suite.name}: experiments[{i}].tasks[{t}]: "
                                     f"{exc}") from exc
        entries = experiment.method_entries()
        for m, entry in enumerate(entries):
            try:
                get_method_spec(entry.method)
            except DecobenchError as exc:
                raise DecobenchError(f"suite {suite.name}: experiments[{i}].methods[{m}]: "
                                     f"{exc}") from exc
        for task, condition, entry, workers, seed in itertools.product(
                experiment.tasks, experiment.conditions, entries, experiment.workers,
                experiment.seeds):
            for label, options in entry.variants():
                values = (dict(suite.defaults) | dict(experiment.options)
                          | _condition_values(condition, suite.conditions[condition],
                                              traces_dir, seed)
                          | {"task": task, "method": entry.method, "label": label,
                             "condition": condition, "suite": suite.name, "workers": workers,
                             "seed": seed, "method_options": options})
                for field in ("target", "max_iters", "max_sim_time"):
                    value = _per_task(getattr(experiment, field), task, field, where)
                    if value is not None:
                        values[field] = value
                if task in data_roots:
                    values["data_root"] = data_roots[task]
                if backend is not None:
                    values["backend"] = backend
                try:
                    config = build_run_config(values)
                except DecobenchError as exc:
                    raise DecobenchError(f"suite {suite.name}: {where}, task {task}, condition "
                                         f"{condition}, method {label}: {exc}") from exc
                family = suite.conditions[condition].family
                cell = Cell(experiment.name, config, identity(config), experiment.role,
                            experiment.resources or suite.resources,
                            family.family if family is not None else None)
                if cell.identity in seen:
                    raise DecobenchError(f"suite {suite.name}: {where} repeats the run "
                                         f"{seen[cell.identity]} (same configuration and seed)")
                seen[cell.identity] = cell.name
                cells.append(cell)
    return cells
