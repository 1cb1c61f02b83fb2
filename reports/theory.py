"""Checks the theory must face (docs/design.md §7 and §8.7).

For each (task, condition, workers) with static DD-EF-SGD runs at two or more distinct
(δ, τ) pairs (``method_options.delta`` / ``method_options.tau`` of ``config.yaml``):

- the grid of median iterations to target (censored cells: not reached, "> N");
- Spearman's rank correlation between Φ(δ, τ) (:func:`decobench.planning.phi.get_phi`; the model named
  by ``method_options.phi`` of the deco-sgd configs there, else "paper") and the measured
  median iterations, a cell that did not reach the target ranking as the largest (ties among
  such cells share their average rank);
- the oracle: the pair with the lowest median time to target in hindsight (ties: fewer
  iterations, then smaller δ, then smaller τ), against each deco-sgd, cocktail-sgd-topk and
  cocktail-sgd label of
  the same (task, condition, workers): its median time, the ratio to the oracle's, and its
  first planned (δ, τ) (the first metrics row that records a plan, ``plan_phi``; else the
  first row).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from decobench.errors import DecobenchError
from decobench.planning.phi import get_phi
from decobench.reports.runs import Run, as_float
from decobench.reports.stats import Obs, median, ratio, spearman
from decobench.reports.tables import Table, cell_key, fmt_iters, fmt_s, group

GRID_METHOD = "dd-ef-sgd"
COMPARED_METHODS = ("deco-sgd", "cocktail-sgd-topk", "cocktail-sgd")
DEFAULT_PHI = "paper"


@dataclass(frozen=True)
class GridCell:
    delta: float
    tau: int
    runs: tuple[Run, ...]
    iters: Obs
    ttt: Obs
    phi: dict[str, float]

    @property
    def reached(self) -> int:
        return sum(r.reached for r in self.runs)


@dataclass(frozen=True)
class Compared:
    """A deco-sgd or cocktail-sgd label set beside the oracle."""

    label: str
    method: str
    ttt: Obs
    iters: Obs
    ratio: Obs | None
    first_plan: tuple[float, int] | None
    seeds: int


@dataclass(frozen=True)
class TheoryGroup:
    key: tuple[str, str, int]
    cells: tuple[GridCell, ...]
    phi_names: tuple[str, ...]
    rho: dict[str, float | None]
    oracle: GridCell | None
    compared: tuple[Compared, ...]


def grid_pair(run: Run) -> tuple[float, int] | None:
    """(δ, τ) of a static DD-EF-SGD run, or ``None`` if its config does not say."""
    delta = as_float(run.method_options.get("delta"))
    tau = as_float(run.method_options.get("tau"))
    if delta is None or tau is None or not tau.is_integer():
        return None
    return delta, int(tau)


def first_plan(run: Run) -> tuple[float, int] | None:
    """(δ, τ) of the first metrics row recording a plan (``plan_phi``), else of the first row."""
    rows = [r for r in run.metrics if "delta" in r and "tau" in r]
    if not rows:
        return None
    row = next((r for r in rows if "plan_phi" in r), rows[0])
    delta, tau = as_float(row["delta"]), as_float(row["tau"])
    if delta is None or tau is None:
        return None
    return delta, int(tau)


def phi_value(name: str, delta: float, tau: int) -> float:
    try:
        return float(get_phi(name)(delta, tau))
    except DecobenchError:
        return math.nan


def rank_value(obs: Obs) -> float:
    """An observation's place in a ranking: its value, a censored one (not reached) last."""
    return math.inf if obs.censored else obs.value


def _oracle(cells: Sequence[GridCell]) -> GridCell | None:
    reached = [c for c in cells if not c.ttt.censored]
    if not reached:
        return None
    return min(reached, key=lambda c: (c.ttt.value, rank_value(c.iters), c.delta, c.tau))


def analyse(runs: Sequence[Run]) -> list[TheoryGroup]:
    """One :class:`TheoryGroup` per (task, condition, workers) with a 2+ pair grid."""
    out = []
    for key, rs in group(runs, cell_key).items():
        grid_runs = [r for r in rs if r.method == GRID_METHOD and grid_pair(r) is not None]
        by_pair = group(grid_runs, grid_pair)
        if len(by_pair) < 2:
            continue
        compared_runs = [r for r in rs if r.method in COMPARED_METHODS]
        names = sorted({str(r.method_options["phi"]) for r in compared_runs
                        if r.method == "deco-sgd" and r.method_options.get("phi")})
        phi_names = tuple(names) or (DEFAULT_PHI,)
        cells = tuple(
            GridCell(delta=d, tau=t, runs=tuple(cr), iters=median([r.iters for r in cr]),
                     ttt=median([r.ttt for r in cr]),
                     phi={n: phi_value(n, d, t) for n in phi_names})
            for (d, t), cr in by_pair.items())
        rho = {}
        for n in phi_names:
            usable = [c for c in cells if not math.isnan(c.phi[n])]
            rho[n] = spearman([c.phi[n] for c in usable], [rank_value(c.iters) for c in usable])
        oracle = _oracle(cells)
        compared = []
        for label, lr in group(compared_runs, lambda r: r.label).items():
            ttt = median([r.ttt for r in lr])
            first = min(lr, key=lambda r: (r.seed, r.rel))
            compared.append(Compared(
                label=label, method=first.method, ttt=ttt, iters=median([r.iters for r in lr]),
                ratio=ratio(ttt, oracle.ttt) if oracle else None,
                first_plan=first_plan(first), seeds=len(lr)))
        out.append(TheoryGroup(key=key, cells=cells, phi_names=phi_names, rho=rho,
                               oracle=oracle, compared=tuple(compared)))
    return out


def _g(value: float) -> str:
    return f"{value:.4g}"


def _phi_text(value: float) -> str:
    return "n/a" if math.isnan(value) else ("inf" if math.isinf(value) else f"{value:.4g}")


def grid_table(groups: Sequence[TheoryGroup]) -> Table:
    rows = []
    for g in groups:
        task, condition, workers = g.key
        for c in g.cells:
            row: dict[str, Any] = {
                "task": task, "condition": condition, "workers": str(workers),
                "δ": _g(c.delta), "τ": str(c.tau)}
            for n in g.phi_names:
                row[f"Φ ({n})"] = _phi_text(c.phi[n])
            row.update({"seeds run": str(len(c.runs)), "seeds reached": str(c.reached),
                        "median iterations": fmt_iters(c.iters), "median TTT (s)": fmt_s(c.ttt),
                        "oracle": "yes" if c is g.oracle else "",
                        "delta": c.delta, "tau": c.tau, "median_iters": c.iters.value,
                        "median_iters_censored": c.iters.censored, "median_ttt_s": c.ttt.value,
                        "median_ttt_censored": c.ttt.censored})
            rows.append(row)
    phis = tuple(dict.fromkeys(f"Φ ({n})" for g in groups for n in g.phi_names))
    return Table("theory_grid", "Static DD-EF-SGD grid",
                 ("task", "condition", "workers", "δ", "τ") + phis
                 + ("seeds run", "seeds reached", "median iterations", "median TTT (s)", "oracle"),
                 tuple(rows),
                 ("delta", "tau", "median_iters", "median_iters_censored", "median_ttt_s",
                  "median_ttt_censored"), group_by=("task", "condition", "workers"))


def rank_table(groups: Sequence[TheoryGroup]) -> Table:
    rows = []
    for g in groups:
        task, condition, workers = g.key
        for n in g.phi_names:
            rho = g.rho[n]
            rows.append({"task": task, "condition": condition, "workers": str(workers),
                         "Φ model": n, "grid cells": str(len(g.cells)),
                         "cells not reached": str(sum(c.iters.censored for c in g.cells)),
                         "Spearman ρ (Φ, median iterations)":
                             "n/a (constant)" if rho is None else f"{rho:.3f}",
                         "spearman_rho": rho})
    return Table("theory_rank", "Rank correlation of Φ with measured iterations",
                 ("task", "condition", "workers", "Φ model", "grid cells", "cells not reached",
                  "Spearman ρ (Φ, median iterations)"), tuple(rows), ("spearman_rho",))


def _ratio_text(value: Obs | None) -> str:
    if value is None:
        return "n/a (no oracle)"
    return ("> " if value.censored else "") + f"{value.value:.2f}x"


def oracle_table(groups: Sequence[TheoryGroup]) -> Table:
    rows = []
    for g in groups:
        task, condition, workers = g.key
        base = {"task": task, "condition": condition, "workers": str(workers)}
        o = g.oracle
        if o is None:
            rows.append(base | {"strategy": "oracle: no grid cell reached the target",
                                "δ": "", "τ": "", "seeds": "", "median TTT (s)": "",
                                "median iterations": "", "TTT / oracle TTT": "",
                                "delta": None, "tau": None, "median_ttt_s": None,
                                "median_ttt_censored": None, "ratio": None,
                                "ratio_lower_bound": None})
        else:
            rows.append(base | {"strategy": "oracle (best static dd-ef-sgd pair)",
                                "δ": _g(o.delta), "τ": str(o.tau), "seeds": str(len(o.runs)),
                                "median TTT (s)": fmt_s(o.ttt),
                                "median iterations": fmt_iters(o.iters),
                                "TTT / oracle TTT": "1.00x", "delta": o.delta, "tau": o.tau,
                                "median_ttt_s": o.ttt.value, "median_ttt_censored": False,
                                "ratio": 1.0, "ratio_lower_bound": False})
        for c in g.compared:
            plan = c.first_plan
            rows.append(base | {
                "strategy": (c.label if c.label == c.method else f"{c.label} ({c.method})")
                + ": δ, τ of its first plan", "δ": _g(plan[0]) if plan
                else "n/a", "τ": str(plan[1]) if plan else "n/a", "seeds": str(c.seeds),
                "median TTT (s)": fmt_s(c.ttt), "median iterations": fmt_iters(c.iters),
                "TTT / oracle TTT": _ratio_text(c.ratio),
                "delta": plan[0] if plan else None, "tau": plan[1] if plan else None,
                "median_ttt_s": c.ttt.value, "median_ttt_censored": c.ttt.censored,
                "ratio": c.ratio.value if c.ratio else None,
                "ratio_lower_bound": c.ratio.censored if c.ratio else None})
    return Table("oracle", "Oracle gap: best static pair in hindsight vs DeCo",
                 ("task", "condition", "workers", "strategy", "δ", "τ", "seeds",
                  "median TTT (s)", "median iterations", "TTT / oracle TTT"), tuple(rows),
                 ("delta", "tau", "median_ttt_s", "median_ttt_censored", "ratio",
                  "ratio_lower_bound"), group_by=("task", "condition", "workers"))
