"""This project's check of ``deco-sgd-robust`` against the per-seed oracle (issue 42 points 4,
5 and 7; the method card docs/methods/deco-sgd-robust.md; docs/reports.md "Robust planner").

For each (task, condition, workers) among the runs of role ``robust`` with static DD-EF-SGD
runs at two or more (δ, τ) pairs (:func:`decobench.reports.theory.grid_pair`):

- the oracle **per seed** (issue 42 point 4: "per condition and seed, in hindsight"): seed
  s's oracle is the grid pair with the lowest time to target among the grid runs of seed s
  that reached it (ties: fewer iterations, then smaller δ, then smaller τ); a seed where no
  pair reached has no oracle. (:mod:`decobench.reports.theory`'s oracle is instead the pair
  with the lowest *median* over seeds.)
- for every other label (deco-sgd-robust and deco-sgd first, then the static strategies,
  then the rest by name): its median TTT over its seeds, and over the seeds it shares with
  an oracle the ratio median(its TTT) / median(oracle's TTT), with a 95% interval (paired
  bootstrap over those seeds, :func:`decobench.reports.stats.ratio_interval`) and the range
  of the per-seed ratios;
- the bandwidth's coefficient of variation (CV, :func:`decobench.netem.families.coefficient_of_variation`):
  the median over seeds of each seed's trace (config.yaml ``trace_path``, resolved against
  the results folder when it was written relative to another directory), over the trace's
  period, or over the longest simulated time of the group's runs for a trace without one
  (a one-row constant link). The link is *constant* below :data:`CONSTANT_CV`, *varying*
  from it, and *strongly varying* from :data:`VARYING_CV` (issue 42 point 5);
- point 5's four targets, judged on medians over the seeds both sides ran: (a) within 5% of
  the oracle (ratio <= :data:`ORACLE_LIMIT`) on every varying link; (b) at least
  :data:`DECO_GAIN`x faster than deco-sgd where CV >= :data:`VARYING_CV`; (c) never slower than
  :data:`CONSTANT_FLOOR`x of deco-sgd on a constant link; (d) never below the paper's static
  strategy cocktail-sgd-topk (speed-up >= 1). Each is ``holds``, ``missed`` (by how much),
  ``undecided`` (a censored median bounds it on the wrong side), ``n/a`` (runs missing) or
  ``-`` (does not apply there);
- whether the condition's family is held out from tuning
  (:data:`decobench.netem.families.HELD_OUT`): the family recorded in config.yaml or in the
  sweep's manifest, else the condition's name (``gpt2-diurnal`` is a diurnal condition).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from decobench.netem.families import HELD_OUT, TUNING, coefficient_of_variation
from decobench.netem.trace import Trace, TraceError, load_trace
from decobench.reports.runs import Run
from decobench.reports.speedup import Speedup, speedup_of
from decobench.reports.stats import (
    Obs,
    interval_text,
    median,
    ratio,
    ratio_interval,
    speedup_interval,
)
from decobench.reports.tables import Table, cell_key, fmt_s, group
from decobench.reports.theory import GRID_METHOD, grid_pair, rank_value
from decobench.runs.rundir import TRACE_CSV

ROLE = "robust"
ROBUST = "deco-sgd-robust"
DECO = "deco-sgd"
STATIC = "cocktail-sgd-topk"
STATIC_MEAN = "static-mean-plan"
FIRST_LABELS = (ROBUST, DECO, STATIC, STATIC_MEAN)
"""Labels listed first, in this order; any other non-grid label follows by name."""
CONSTANT_CV = 0.01
"""Below this CV a link is constant (target c); from it a link varies (target a)."""
VARYING_CV = 0.3
"""From this CV deco-sgd-robust must be :data:`DECO_GAIN`x faster than deco-sgd (target b)."""
ORACLE_LIMIT = 1.05
DECO_GAIN = 1.2
CONSTANT_FLOOR = 0.97
STATIC_FLOOR = 1.0
HOLDS, MISSED, UNDECIDED, NO_DATA, NOT_APPLICABLE = "holds", "missed", "undecided", "n/a", "-"
PLAN_CONDITIONS = ("step-drop", "diurnal")
"""Conditions the plan figure prefers, in order; else the first varying one."""


@dataclass(frozen=True)
class SeedOracle:
    """Seed ``seed``'s best static pair in hindsight (``pair``/``run`` ``None``: none reached)."""

    seed: int
    pair: tuple[float, int] | None
    run: Run | None

    @property
    def ttt(self) -> Obs | None:
        return None if self.run is None else self.run.ttt


@dataclass(frozen=True)
class Against:
    """One label beside the per-seed oracle."""

    label: str
    method: str
    runs: tuple[Run, ...]
    ttt: Obs
    paired: tuple[int, ...]
    ratio: Obs | None
    interval: tuple[float, float] | None
    per_seed: tuple[Obs, ...]


@dataclass(frozen=True)
class Target:
    """One of issue 42 point 5's targets in one condition."""

    status: str
    text: str


@dataclass(frozen=True)
class RobustGroup:
    key: tuple[str, str, int]
    oracles: tuple[SeedOracle, ...]
    against: tuple[Against, ...]
    cv: float | None
    cv_seeds: int
    family: str
    targets: dict[str, Target]
    best_pair: Against | None = None
    """The one grid pair with the lowest median TTT over seeds, against the per-seed oracle:
    how far the per-seed minimum over the grid (a minimum over noisy runs) sits below any
    single static pair chosen for the condition."""

    @property
    def oracle_ttt(self) -> Obs | None:
        """Median over seeds of each seed's oracle TTT (``None``: no seed has one)."""
        found = [o.ttt for o in self.oracles if o.ttt is not None]
        return median(found) if found else None

    @property
    def held_out(self) -> bool:
        return self.family in HELD_OUT

    @property
    def split(self) -> str:
        """``held out``, ``tuning`` or ``not a family`` (e.g. the bundled pack trace)."""
        if self.family in HELD_OUT:
            return "held out"
        return "tuning" if self.family in TUNING else "not a family"

    @property
    def varying(self) -> bool:
        """A link whose CV is known and at least :data:`CONSTANT_CV` (target a applies)."""
        return self.cv is not None and self.cv >= CONSTANT_CV

    def of(self, label: str) -> Against | None:
        return next((a for a in self.against if a.label == label), None)

    def runs(self) -> list[Run]:
        """The runs its figures read: every compared label's and each seed's oracle."""
        return [r for a in self.against for r in a.runs] + [
            o.run for o in self.oracles if o.run is not None]


# ------------------------------------------------------------------------------ the oracle
def seed_oracle(seed: int, grid_runs: Sequence[Run]) -> SeedOracle:
    """The oracle of one seed among its grid runs (module docstring's tie rule)."""
    reached = [r for r in grid_runs if r.seed == seed and not r.ttt.censored]
    if not reached:
        return SeedOracle(seed, None, None)
    best = min(reached, key=lambda r: (r.ttt.value, rank_value(r.iters), *grid_pair(r), r.rel))
    return SeedOracle(seed, grid_pair(best), best)


def _first_by_seed(runs: Sequence[Run]) -> dict[int, Run]:
    out: dict[int, Run] = {}
    for r in sorted(runs, key=lambda r: (r.seed, r.rel)):
        out.setdefault(r.seed, r)
    return out


def against_oracle(label: str, runs: Sequence[Run],
                   oracles: Sequence[SeedOracle]) -> Against:
    """``label``'s median TTT and its ratio to the oracle's over the seeds both have."""
    by_oracle = {o.seed: o.ttt for o in oracles if o.ttt is not None}
    mine = _first_by_seed(runs)
    paired = tuple(s for s in sorted(mine) if s in by_oracle)
    ours = [mine[s].ttt for s in paired]
    theirs = [by_oracle[s] for s in paired]
    value = ratio(median(ours), median(theirs)) if paired else None
    per_seed = tuple(o for o in (ratio(a, b) for a, b in zip(ours, theirs, strict=True))
                     if o is not None)
    first = min(runs, key=lambda r: (r.seed, r.rel))
    return Against(label=label, method=first.method, runs=tuple(runs),
                   ttt=median([r.ttt for r in runs]), paired=paired, ratio=value,
                   interval=ratio_interval(ours, theirs) if paired else None,
                   per_seed=per_seed)


def _label_order(label: str) -> tuple[int, str]:
    return (FIRST_LABELS.index(label) if label in FIRST_LABELS else len(FIRST_LABELS), label)


# -------------------------------------------------------------------------------- the link
def results_root(run: Run) -> Path:
    """The results folder a run was loaded from (its path less ``rel``)."""
    parts = PurePosixPath(run.rel).parts
    path = run.path.resolve()
    if run.rel == ".":
        return path
    if parts and path.parts[-len(parts):] == parts:
        return Path(*path.parts[:-len(parts)])
    return run.path.parent


def trace_candidates(run: Run) -> list[str]:
    """Where the run's trace may be, in order: ``trace.csv`` in the run's folder; each
    recorded ``trace_path`` (an absolute one as written, then every tail of it under the
    results folder, longest first: a sweep writes paths relative to the directory it ran
    in, e.g. ``results/NAME/traces/walk-s0.csv``, found as ``DIR/traces/walk-s0.csv``;
    a relative one as written last); config.yaml's ``trace`` (a bundled trace's name)."""
    root = results_root(run)
    out = [str(run.path / TRACE_CSV)]
    for given in (run.config.get("trace_path"), run.summary.get("trace_path")):
        if not given:
            continue
        path = Path(str(given))
        parts = path.parts[1:] if path.is_absolute() else path.parts
        tails = [str(root / Path(*parts[i:])) for i in range(len(parts))]
        out += [str(path), *tails] if path.is_absolute() else [*tails, str(path)]
    if run.config.get("trace"):
        out.append(str(run.config["trace"]))
    return list(dict.fromkeys(out))


def trace_of(run: Run) -> Trace | None:
    """The run's trace (:func:`trace_candidates`), ``None`` where none can be read."""
    for candidate in trace_candidates(run):
        try:
            return load_trace(candidate, loop=bool(run.config.get("trace_loop", False)))
        except (TraceError, OSError):
            continue
    return None


def condition_cv(runs: Sequence[Run]) -> tuple[float | None, int]:
    """(median over seeds of the CV of each seed's trace, seeds whose trace was read);
    ``None`` when none could be read. Duration: the trace's period, else the longest
    simulated time of ``runs``."""
    longest = max((r.sim_time_s for r in runs), default=0.0)
    values = []
    for _seed, rs in group(runs, lambda r: r.seed).items():
        trace = next((t for t in map(trace_of, sorted(rs, key=lambda r: r.rel))
                      if t is not None), None)
        if trace is None:
            continue
        duration = trace.period_s if math.isfinite(trace.period_s) else longest
        if duration > 0:
            values.append(coefficient_of_variation(trace, duration))
    if not values:
        return None, 0
    return median([Obs(v) for v in values]).value, len(values)


def family_of(run: Run) -> str:
    """The trace family of the run's condition: config.yaml's ``family`` (a name, or a
    mapping with ``family``), else the sweep manifest's (:attr:`Run.manifest_family`), else
    the condition's name (results written before the manifest recorded it)."""
    for where in (run.config, run.config.get("network")):
        given = where.get("family") if isinstance(where, dict) else None
        if isinstance(given, dict):
            given = given.get("family")
        if isinstance(given, str) and given:
            return given
    return run.manifest_family or run.condition


# ------------------------------------------------------------------------------ the targets
def judge(value: Obs | None, limit: float, at_most: bool, shown: str,
          interval: tuple[float, float] | None) -> Target:
    """A target on a median ``value`` (censored: a lower bound) against ``limit``: at most it
    (``at_most``) or at least it. ``shown``: the value as printed, ``interval`` its 95% one."""
    if value is None:
        return Target(MISSED, f"missed: {shown} {interval_text(interval)}")
    beyond = value.value > limit if at_most else value.value < limit
    if at_most:
        status = MISSED if beyond else (UNDECIDED if value.censored else HOLDS)
    else:
        status = HOLDS if not beyond else (UNDECIDED if value.censored else MISSED)
    by = f" (by {abs(value.value - limit):.2f}x)" if status == MISSED else ""
    return Target(status, f"{status}{by}: {shown} {interval_text(interval)}")


def _paired_ttts(a: Sequence[Run], b: Sequence[Run]) -> tuple[list[Obs], list[Obs]]:
    mine, theirs = _first_by_seed(a), _first_by_seed(b)
    seeds = sorted(set(mine) & set(theirs))
    return [mine[s].ttt for s in seeds], [theirs[s].ttt for s in seeds]


def speedup_target(robust: Against, other: Against | None, limit: float) -> Target:
    """deco-sgd-robust at least ``limit`` times as fast as ``other`` (medians over the
    seeds both ran)."""
    if other is None:
        return Target(NO_DATA, "n/a (no runs of the rival)")
    ours, theirs = _paired_ttts(robust.runs, other.runs)
    if not ours:
        return Target(NO_DATA, "n/a (no seed run by both)")
    s: Speedup = speedup_of(median(ours), median(theirs))
    value = None if s.value is None else Obs(s.value, s.lower_bound)
    shown = "not reached" if s.value is None else str(s)
    return judge(value, limit, at_most=False, shown=shown,
                 interval=speedup_interval(ours, theirs))


def targets(robust: Against | None, deco: Against | None, static: Against | None,
            cv: float | None) -> dict[str, Target]:
    """Issue 42 point 5's targets (a)-(d) in one condition (module docstring)."""
    if robust is None:
        return dict.fromkeys("abcd", Target(NO_DATA, f"n/a (no {ROBUST} runs)"))
    unknown = Target(NO_DATA, "n/a (trace not readable: CV unknown)")
    skip = Target(NOT_APPLICABLE, NOT_APPLICABLE)
    if cv is None:
        a = b = c = unknown
    else:
        if cv < CONSTANT_CV:
            a = skip
        elif robust.ratio is None:
            a = Target(NO_DATA, "n/a (no seed with both an oracle and a run)")
        else:
            a = judge(robust.ratio, ORACLE_LIMIT, at_most=True,
                      shown=robust.ratio.text("{:.2f}x"), interval=robust.interval)
        b = speedup_target(robust, deco, DECO_GAIN) if cv >= VARYING_CV else skip
        c = speedup_target(robust, deco, CONSTANT_FLOOR) if cv < CONSTANT_CV else skip
    return {"a": a, "b": b, "c": c, "d": speedup_target(robust, static, STATIC_FLOOR)}


# ------------------------------------------------------------------------------ analysis
def analyse(runs: Sequence[Run]) -> list[RobustGroup]:
    """One :class:`RobustGroup` per (task, condition, workers) of role-``robust`` runs with
    a grid at two or more pairs."""
    out = []
    for key, rs in group([r for r in runs if r.role == ROLE], cell_key).items():
        grid_runs = [r for r in rs if r.method == GRID_METHOD and grid_pair(r) is not None]
        if len(group(grid_runs, grid_pair)) < 2:
            continue
        oracles = tuple(seed_oracle(s, grid_runs) for s in sorted({r.seed for r in rs}))
        in_grid = {id(r) for r in grid_runs}
        others = group([r for r in rs if id(r) not in in_grid], lambda r: r.label)
        against = tuple(against_oracle(label, others[label], oracles)
                        for label in sorted(others, key=_label_order))
        cv, cv_seeds = condition_cv(rs)
        found = {a.label: a for a in against}
        by_pair = group(grid_runs, grid_pair)
        best = min(by_pair, key=lambda p: (rank_value(median([r.ttt for r in by_pair[p]])), p))
        best_label = f"{by_pair[best][0].label} (best single pair)"
        out.append(RobustGroup(
            key=key, oracles=oracles, against=against, cv=cv, cv_seeds=cv_seeds,
            family=family_of(rs[0]),
            targets=targets(found.get(ROBUST), found.get(DECO), found.get(STATIC), cv),
            best_pair=against_oracle(best_label, by_pair[best], oracles)))
    return out


def link_text(cv: float | None) -> str:
    if cv is None:
        return "n/a (trace not readable)"
    if cv < CONSTANT_CV:
        return f"{cv:.2f}: constant"
    return f"{cv:.2f}: " + ("varies (>= 0.3)" if cv >= VARYING_CV else "varies (< 0.3)")


def plan_choice(groups: Sequence[RobustGroup]) -> tuple[RobustGroup, int] | None:
    """The condition and seed of the plan figure: step-drop, else diurnal, else the first
    varying condition; its lowest seed with both deco-sgd and deco-sgd-robust runs."""
    def seeds(g: RobustGroup) -> list[int]:
        deco, robust = g.of(DECO), g.of(ROBUST)
        if deco is None or robust is None:
            return []
        return sorted({r.seed for r in deco.runs} & {r.seed for r in robust.runs})

    usable = [g for g in groups if g.varying and seeds(g)]
    order = sorted(usable, key=lambda g: (
        PLAN_CONDITIONS.index(g.key[1]) if g.key[1] in PLAN_CONDITIONS
        else len(PLAN_CONDITIONS), g.key))
    return (order[0], seeds(order[0])[0]) if order else None


# -------------------------------------------------------------------------------- tables
def _g(value: float) -> str:
    return f"{value:.4g}"


def oracle_text(oracles: Sequence[SeedOracle]) -> str:
    """``s0: δ 0.01, τ 1 (52.10 s); s1: none reached``."""
    return "; ".join(
        f"s{o.seed}: none reached" if o.pair is None or o.ttt is None else
        f"s{o.seed}: δ {_g(o.pair[0])}, τ {o.pair[1]} ({fmt_s(o.ttt)} s)" for o in oracles)


def _range_text(values: Sequence[Obs]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values, key=Obs.sort_key)
    return f"[{ordered[0].text('{:.2f}x')}, {ordered[-1].text('{:.2f}x')}]"


def oracle_table(groups: Sequence[RobustGroup]) -> Table:
    rows = []
    for g in groups:
        task, condition, workers = g.key
        base = {"task": task, "condition": condition, "workers": str(workers)}
        o = g.oracle_ttt
        reached = [s for s in g.oracles if s.run is not None]
        rows.append(base | {
            "strategy": "oracle (each seed's best static dd-ef-sgd pair)",
            "per-seed oracle (δ, τ, TTT)": oracle_text(g.oracles),
            "seeds": f"{len(reached)} of {len(g.oracles)}",
            "median TTT (s)": "n/a (no pair reached)" if o is None else fmt_s(o),
            "TTT / oracle TTT": "1.00x" if o is not None else "n/a", "95% interval": "",
            "per-seed ratio": "", "median_ttt_s": None if o is None else o.value,
            "median_ttt_censored": None if o is None else o.censored,
            "ratio": 1.0 if o is not None else None, "ratio_lower_bound": None,
            "interval_low": None, "interval_high": None, "seeds_paired": len(reached)})
        for a in (*g.against, *([g.best_pair] if g.best_pair is not None else [])):
            rows.append(base | {
                "strategy": a.label if a.label.startswith(a.method) else f"{a.label} ({a.method})",
                "per-seed oracle (δ, τ, TTT)": "",
                "seeds": f"{len(a.paired)} of {len({r.seed for r in a.runs})} with an oracle",
                "median TTT (s)": fmt_s(a.ttt),
                "TTT / oracle TTT": "n/a (no oracle)" if a.ratio is None
                else a.ratio.text("{:.2f}x"),
                "95% interval": interval_text(a.interval) if a.ratio is not None else "",
                "per-seed ratio": _range_text(a.per_seed),
                "median_ttt_s": a.ttt.value, "median_ttt_censored": a.ttt.censored,
                "ratio": None if a.ratio is None else a.ratio.value,
                "ratio_lower_bound": None if a.ratio is None else a.ratio.censored,
                "interval_low": a.interval[0] if a.interval else None,
                "interval_high": a.interval[1] if a.interval else None,
                "seeds_paired": len(a.paired)})
    return Table("robust_oracle", "deco-sgd-robust and its rivals against the per-seed oracle",
                 ("task", "condition", "workers", "strategy", "per-seed oracle (δ, τ, TTT)",
                  "seeds", "median TTT (s)", "TTT / oracle TTT", "95% interval",
                  "per-seed ratio"), tuple(rows),
                 ("median_ttt_s", "median_ttt_censored", "ratio", "ratio_lower_bound",
                  "interval_low", "interval_high", "seeds_paired"),
                 group_by=("task", "condition", "workers"),
                 note="Ratio: median TTT over the seeds that have both the label's run and an "
                 "oracle, over the median of those seeds' oracle TTTs; '>' where the label's "
                 "median is censored (a lower bound). The last row of each condition is the "
                 "one static pair with the lowest median TTT over seeds: the per-seed oracle "
                 "is a minimum over many noisy runs, and this row shows how far below any "
                 "single pair fixed for the condition it lies.")


TARGET_COLUMNS = {
    "a": f"(a) <= {ORACLE_LIMIT:g}x the oracle (varying links)",
    "b": f"(b) >= {DECO_GAIN:g}x over {DECO} (CV >= {VARYING_CV:g})",
    "c": f"(c) >= {CONSTANT_FLOOR:g}x of {DECO} (constant links)",
    "d": f"(d) >= {STATIC_FLOOR:g}x over {STATIC}",
}


def targets_table(groups: Sequence[RobustGroup]) -> Table:
    rows = []
    for g in groups:
        task, condition, workers = g.key
        row: dict[str, Any] = {
            "task": task, "condition": condition, "workers": str(workers),
            "family": f"{g.split} ({g.family})" if g.split != "not a family" else g.split,
            "bandwidth CV": link_text(g.cv), "cv": g.cv, "cv_seeds": g.cv_seeds,
            "held_out": g.held_out}
        for k, column in TARGET_COLUMNS.items():
            row[column] = g.targets[k].text
            row[f"target_{k}"] = g.targets[k].status
        rows.append(row)
    return Table("robust_targets", "Issue 42 point 5's targets per condition",
                 ("task", "condition", "workers", "family", "bandwidth CV",
                  *TARGET_COLUMNS.values()), tuple(rows),
                 ("cv", "cv_seeds", "held_out", *(f"target_{k}" for k in TARGET_COLUMNS)),
                 note="Medians over seeds with the 95% interval beside each (paired bootstrap "
                 "over the seeds both sides ran); '-': the target does not apply to this "
                 "link; 'undecided': a censored median bounds the figure on the wrong side.")
