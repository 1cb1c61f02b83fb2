"""The report's tables as data: time to target (Table 1 analogue), scaling, per run.

A :class:`Table` holds display strings under its ``columns`` (what markdown, HTML and LaTeX
show) and machine-readable values under its ``extra`` keys (written to the CSV too, and given
to callers such as W&B logging). Rules implemented here (docs/reports.md):

- one Table 1 row per (task, condition, workers, label); seeds that did not reach the target
  are censored at their simulated time (:mod:`decobench.reports.stats`);
- speed-up over B = median TTT(B) / median TTT(method) (:func:`decobench.reports.speedup.speedup_of`),
  for B in :data:`decobench.reports.speedup.REFERENCES` present in the same (task, condition, workers);
- scaling: speed-up over d-sgd against the number of workers, for each (task, condition,
  label) run with at least two worker counts;
- every run is listed with its status; nothing is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from decobench.reports.runs import Run, as_float
from decobench.reports.speedup import REFERENCES, speedup_of
from decobench.reports.stats import Obs, median, olympic_mean, range_text, value_range

K = TypeVar("K", bound=Hashable)

D_SGD = "d-sgd"


@dataclass(frozen=True)
class Table:
    """A table: ``columns`` are shown, ``extra`` keys only go to CSV and to callers.

    ``group_by`` columns split the markdown/HTML rendering into one sub-table per group
    (columns empty throughout a group are left out there).
    """

    name: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[dict[str, Any], ...]
    extra: tuple[str, ...] = ()
    group_by: tuple[str, ...] = ()
    note: str = ""

    @property
    def csv_columns(self) -> tuple[str, ...]:
        return self.columns + self.extra


def group(runs: Iterable[Run], key: Callable[[Run], K]) -> dict[K, list[Run]]:
    """Runs by ``key``, keys sorted, runs in their given order."""
    out: dict[K, list[Run]] = {}
    for run in runs:
        out.setdefault(key(run), []).append(run)
    return {k: out[k] for k in sorted(out, key=_sortable)}


def _sortable(key: Any) -> Any:
    if isinstance(key, tuple):
        return tuple(_sortable(k) for k in key)
    return (0, key, "") if isinstance(key, (int, float)) else (1, 0, str(key))


def cell_key(run: Run) -> tuple[str, str, int]:
    """(task, condition, workers): the runs whose times can be compared."""
    return (run.task, run.condition, run.workers)


def fmt_s(obs: Obs) -> str:
    return obs.text("{:.2f}")


def fmt_iters(obs: Obs) -> str:
    return obs.text("{:.0f}" if float(obs.value).is_integer() else "{:.1f}")


def target_text(run: Run) -> str:
    target = run.summary.get("target")
    if target is None:
        return "none"
    sign = "<=" if run.metric_name == "perplexity" else ">="
    return f"{run.metric_name} {sign} {target:g}"


def status_text(run: Run) -> str:
    """``finished``, ``budget_exhausted`` or ``diverged at iteration N``."""
    if run.status == "diverged" or run.summary.get("diverged"):
        at = run.summary.get("diverged_at_iteration")
        return f"diverged at iteration {at}" if at is not None else "diverged"
    return run.status


def _joined(values: Iterable[Any]) -> str:
    return ", ".join(dict.fromkeys(str(v) for v in values))


def _misses(runs: Sequence[Run]) -> str:
    missed = [f"seed {r.seed}: {status_text(r)} (ran {r.sim_time_s:.2f} s)"
              for r in runs if not r.reached]
    return "; ".join(missed) if missed else "-"


def ttt_stats(runs: Sequence[Run]) -> dict[str, Obs]:
    """Median, olympic mean, min and max of the runs' times, median iterations."""
    times = [r.ttt for r in runs]
    low, high = value_range(times)
    return {"median": median(times), "olympic": olympic_mean(times), "min": low, "max": high,
            "iters": median([r.iters for r in runs])}


def max_resolution(runs: Sequence[Run]) -> float | None:
    """The widest time-to-target bracket among the runs that reached (seconds)."""
    widths = [w for w in (r.ttt_resolution_s for r in runs) if w is not None]
    return max(widths) if widths else None


def resolution_cell(runs: Sequence[Run], med: Obs) -> str:
    """``"0.44 s (0.6%)"``: the widest bracket and its share of the median TTT."""
    width = max_resolution(runs)
    if width is None:
        return "n/a"
    share = f" ({100 * width / med.value:.1f}%)" if med.value > 0 and not med.censored else ""
    return f"{width:.2f} s{share}"


def median_compute_share(runs: Sequence[Run]) -> float | None:
    """Median of 1 − bubble fraction: the share of compute-bound throughput a label keeps."""
    shares = [1.0 - b for b in (as_float(r.summary.get("bubble_fraction")) for r in runs)
              if b is not None]
    return median([Obs(s) for s in shares]).value if shares else None


def _share_text(share: float | None) -> str:
    if share is None:
        return "n/a"
    return f"{100 * share:.1f}%" + (" (extreme)" if share < 0.01 else "")


def ttt_table(runs: Sequence[Run]) -> Table:
    """Table 1 analogue: time to target per (task, condition, workers, label)."""
    by_label = group(runs, lambda r: (*cell_key(r), r.label))
    medians = {key: median([r.ttt for r in rs]) for key, rs in by_label.items()}
    present = [b for b in REFERENCES if any(key[3] == b for key in by_label)]
    columns = ("task", "condition", "workers", "label", "data", "target", "seeds run",
               "seeds reached",
               "median TTT (s)", "range (s)", "TTT resolution", "olympic mean (s)",
               "median iterations", "compute share", "not reached"
               ) + tuple(f"speed-up over {b}" for b in present)
    extra = ("method", "seeds", "eval_every", "median_ttt_s", "median_ttt_censored",
             "olympic_ttt_s", "olympic_ttt_censored", "min_ttt_s", "min_ttt_censored",
             "max_ttt_s", "max_ttt_censored", "median_iters", "median_iters_censored",
             "max_ttt_resolution_s", "median_compute_share")
    extra += tuple(f"speedup_over_{b}{suffix}" for b in present for suffix in ("", "_kind"))
    rows = []
    for key, rs in by_label.items():
        task, condition, workers, label = key
        st = ttt_stats(rs)
        share = median_compute_share(rs)
        row: dict[str, Any] = {
            "task": task, "condition": condition, "workers": str(workers), "label": label,
            "data": _joined(r.data_kind for r in rs),
            "target": _joined(target_text(r) for r in rs), "seeds run": str(len(rs)),
            "seeds reached": str(sum(r.reached for r in rs)),
            "median TTT (s)": fmt_s(st["median"]),
            "range (s)": range_text([r.ttt for r in rs]),
            "olympic mean (s)": fmt_s(st["olympic"]), "median iterations": fmt_iters(st["iters"]),
            "TTT resolution": resolution_cell(rs, st["median"]),
            "compute share": _share_text(share),
            "not reached": _misses(rs),
            "max_ttt_resolution_s": max_resolution(rs), "median_compute_share": share,
            "method": _joined(r.method for r in rs), "seeds": _joined(r.seed for r in rs),
            "eval_every": _joined(r.summary.get("eval_every") for r in rs),
        }
        for name in ("median", "olympic", "min", "max", "iters"):
            prefix = "median_iters" if name == "iters" else f"{name}_ttt_s"
            row[prefix] = st[name].value
            row[prefix.removesuffix("_s") + "_censored"] = st[name].censored
        for b in present:
            base = medians.get((task, condition, workers, b))
            if base is None:
                row[f"speed-up over {b}"] = ""
                row[f"speedup_over_{b}"] = row[f"speedup_over_{b}_kind"] = None
                continue
            s = speedup_of(st["median"], base)
            low = s.lower_bound and s.value is not None and s.value < 1
            row[f"speed-up over {b}"] = str(s) + (" †" if low else "")
            row[f"speedup_over_{b}"], row[f"speedup_over_{b}_kind"] = s.value, s.kind
        rows.append(row)
    footnote = ("† A lower bound below 1x: the reference never reached the target, so its "
                "time to target is only known to exceed the time it ran; the bound says this "
                "label needed longer than the reference ran, not that it is slower. ")
    note = footnote if any("†" in str(v) for row in rows for v in row.values()) else ""
    return Table("time_to_target", "Time to target", columns, tuple(rows), extra,
                 group_by=("task", "condition", "workers"), note=note.strip())


def has_target(run: Run) -> bool:
    return run.summary.get("target") is not None


def final_metric_table(runs: Sequence[Run]) -> Table:
    """Runs without a target: their final metric per (task, condition, workers, label)
    (no time-to-target columns, which would all say "not reached")."""
    rows = []
    for (task, condition, workers, label), rs in group(
            runs, lambda r: (*cell_key(r), r.label)).items():
        finals = [Obs(v) for v in (as_float(r.summary.get("final_metric")) for r in rs)
                  if v is not None]
        final = median(finals).value if finals else None
        share = median_compute_share(rs)
        rows.append({
            "task": task, "condition": condition, "workers": str(workers), "label": label,
            "seeds run": str(len(rs)), "metric": _joined(r.metric_name for r in rs),
            "median final metric": "n/a" if final is None else f"{final:.4f}",
            "range": range_text(finals) if finals else "n/a",
            "median time (s)": f"{median([Obs(r.sim_time_s) for r in rs]).value:.2f}",
            "median iterations": f"{median([Obs(float(r.summary.get('iterations') or 0)) for r in rs]).value:g}",
            "compute share": _share_text(share),
            "status": _joined(status_text(r) for r in rs),
            "method": _joined(r.method for r in rs), "median_final_metric": final,
            "median_compute_share": share})
    return Table("final_metric", "Final metric (runs without a target)",
                 ("task", "condition", "workers", "label", "seeds run", "metric",
                  "median final metric", "range", "median time (s)", "median iterations",
                  "compute share", "status"), tuple(rows),
                 ("method", "median_final_metric", "median_compute_share"),
                 group_by=("task", "condition", "workers"))


def scaling_table(runs: Sequence[Run]) -> Table | None:
    """Speed-up over d-sgd against workers; ``None`` when no label ran at 2+ worker counts."""
    by_label = group(runs, lambda r: (r.task, r.condition, r.label))
    cells = group(runs, lambda r: (*cell_key(r), r.label))
    rows = []
    for (task, condition, label), rs in by_label.items():
        workers = sorted({r.workers for r in rs})
        if len(workers) < 2:
            continue
        for w in workers:
            mine = median([r.ttt for r in cells[(task, condition, w, label)]])
            base_runs = cells.get((task, condition, w, D_SGD))
            base = median([r.ttt for r in base_runs]) if base_runs else None
            s = speedup_of(mine, base) if base else None
            rows.append({
                "task": task, "condition": condition, "label": label, "workers": str(w),
                "seeds": str(len(cells[(task, condition, w, label)])),
                "median TTT (s)": fmt_s(mine),
                "d-sgd median TTT (s)": fmt_s(base) if base else "no d-sgd run",
                "speed-up over d-sgd": str(s) if s else "",
                "workers_n": w, "median_ttt_s": mine.value, "median_ttt_censored": mine.censored,
                "speedup": s.value if s else None, "speedup_kind": s.kind if s else None})
    if not rows:
        return None
    return Table("scaling", "Scaling with the number of workers",
                 ("task", "condition", "label", "workers", "seeds", "median TTT (s)",
                  "d-sgd median TTT (s)", "speed-up over d-sgd"), tuple(rows),
                 ("workers_n", "median_ttt_s", "median_ttt_censored", "speedup",
                  "speedup_kind"), group_by=("task", "condition", "label"))


def _num(value: Any, fmt: str) -> str:
    number = as_float(value)
    return "n/a" if number is None else fmt.format(number)


def runs_table(runs: Sequence[Run]) -> Table:
    """Every run, with its status (divergence and budget exhaustion shown, never hidden);
    the target columns only when some run has a target ("no target" in a row without)."""
    rows = []
    for r in runs:
        ttt = as_float(r.summary.get("time_to_target_s"))
        if not has_target(r):
            reached = shown_ttt = to_target = "no target"
        else:
            reached = "yes" if r.reached else "no"
            shown_ttt = (f"{ttt:.2f}" if r.reached and ttt is not None
                         else f"> {r.sim_time_s:.2f} (not reached)")
            to_target = str(r.summary.get("iters_to_target") or "-")
        rows.append({
            "task": r.task, "condition": r.condition, "workers": str(r.workers),
            "label": r.label, "seed": str(r.seed), "data": r.data_kind,
            "status": status_text(r),
            "reached": reached, "TTT (s)": shown_ttt,
            "iterations": str(r.summary.get("iterations")),
            "iterations to target": to_target,
            "final metric": _num(r.summary.get("final_metric"), "{:.4f}"),
            "bits sent / worker": _num(r.summary.get("bits_sent"), "{:.4g}"),
            "bubble fraction": _num(r.summary.get("bubble_fraction"), "{:.3f}"),
            "run dir": r.rel,
            "method": r.method, "status_code": r.status,
            "diverged_at_iteration": r.summary.get("diverged_at_iteration"),
            "time_to_target_s": ttt, "sim_time_s": r.sim_time_s,
            "final_metric": as_float(r.summary.get("final_metric")),
            "bits_sent": r.summary.get("bits_sent"),
            "bubble_fraction": as_float(r.summary.get("bubble_fraction"))})
    target_columns = (("reached", "TTT (s)") if any(has_target(r) for r in runs) else ())
    return Table("runs", "Every run",
                 ("task", "condition", "workers", "label", "seed", "data", "status",
                  *target_columns,
                  "iterations", *(("iterations to target",) if target_columns else ()),
                  "final metric", "bits sent / worker", "bubble fraction", "run dir"),
                 tuple(rows),
                 ("method", "status_code", "diverged_at_iteration", "time_to_target_s",
                  "sim_time_s", "final_metric", "bits_sent", "bubble_fraction"))


def time_table(runs: Sequence[Run]) -> Table:
    """Where the time goes: per (task, label), the runs, how many trained and how many were
    re-timed from another run's trajectory, and their recorded wall time (``wall_time_s``
    of each summary; a resumed run counts its last invocation), with its share of the
    folder's total."""
    total = sum(as_float(r.summary.get("wall_time_s")) or 0.0 for r in runs)
    rows = []
    for (task, label), rs in group(runs, lambda r: (r.task, r.label)).items():
        wall = sum(as_float(r.summary.get("wall_time_s")) or 0.0 for r in rs)
        retimed = sum(bool(r.summary.get("retimed_from")) for r in rs)
        rows.append({"task": task, "label": label, "runs": str(len(rs)),
                     "trained": str(len(rs) - retimed), "re-timed": str(retimed),
                     "wall time (s)": f"{wall:.0f}",
                     "share": f"{100 * wall / total:.1f}%" if total else "-",
                     "wall_time_s": wall})
    return Table("time", "Where the time goes", ("task", "label", "runs", "trained",
                                                 "re-timed", "wall time (s)", "share"),
                 tuple(rows), ("wall_time_s",),
                 note=f"{len(runs)} runs, {total:.0f} s of recorded run wall time in all "
                 "(the runs' own clocks: parallel jobs overlap, so the sweep's elapsed time "
                 "is shorter; setup and the report are not counted).")


UNEQUAL_BUDGET_RATIO = 2.0
"""An iteration budget is flagged when it ended a method in less than 1/this of the simulated
time another method ran in the same cell (docs/suites.md "Budgets")."""


def _iteration_ended(run: Run) -> bool:
    """The run stopped at its iteration budget: out of budget, and not by a simulated-time
    budget it had reached."""
    if run.status != "budget_exhausted":
        return False
    limit = as_float(run.config.get("max_sim_time"))
    return limit is None or run.sim_time_s < limit


def budget_warnings(runs: Sequence[Run]) -> list[str]:
    """One line per (task, condition, workers, label) whose iteration budget ended it in
    less than 1/:data:`UNEQUAL_BUDGET_RATIO` of the simulated time another label ran there:
    its methods were not given the same time, so its times to target do not compare."""
    lines = []
    for (task, condition, workers), rs in group(runs, cell_key).items():
        for label, own in group(rs, lambda r: r.label).items():
            ended = [r for r in own if _iteration_ended(r)]
            others = [r for r in rs if r.label != label]
            if not ended or not others:
                continue
            short = min(ended, key=lambda r: r.sim_time_s)
            long = max(others, key=lambda r: r.sim_time_s)
            if long.sim_time_s <= UNEQUAL_BUDGET_RATIO * short.sim_time_s:
                continue
            lines.append(
                f"{task} on {condition} (n={workers}): {label}'s iteration budget ended it "
                f"after {int(short.summary.get('iterations') or 0)} iterations and "
                f"{short.sim_time_s:.2f} simulated s (seed {short.seed}), while {long.label} "
                f"ran {long.sim_time_s:.2f} s (seed {long.seed}): the methods did not get the "
                "same time. Give a simulated-time budget (--max-sim-time; max_sim_time in a "
                "suite), or compare with `decobench versus`, whose default budget is one.")
    return lines
