"""The regime map: DeCo-SGD's speed-up over D-SGD and over the paper's static strategy on a
grid of the two regime ratios (docs/reports.md "Regime map").

A run's network may be given by the ratios themselves (``--transmission-ratio ρ
--latency-ratio λ``: ρ = S/(a·T), S = 32·d bits, λ = b/T). Runs so given, of the role
``regime-map``, are grouped per (task, workers) and cell (ρ, λ); each cell's speed-up is
median TTT(baseline) / median TTT(deco-sgd) (:func:`decobench.reports.speedup.speedup_of`), a lower
bound where the baseline missed the target. Since the paper's compute time T is unknown,
the map shows where in (ρ, λ) the paper's headline figures (5.07x over D-SGD, 1.37x over
the static strategy) are reached, whatever T was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from decobench.reports.claims import DECO, STATIC, compare
from decobench.reports.runs import Run, as_float
from decobench.reports.speedup import Speedup
from decobench.reports.tables import D_SGD, Table, group

BASELINES = (D_SGD, STATIC)
PAPER_FIGURES = {D_SGD: 5.07, STATIC: 1.37}
"""The paper's headline speed-ups, drawn as contours."""


def ratios(run: Run) -> tuple[float, float] | None:
    """(ρ, λ) of a run whose network was given by the ratios, else ``None``."""
    rho = as_float(run.config.get("transmission_ratio"))
    lam = as_float(run.config.get("latency_ratio"))
    return None if rho is None or lam is None else (rho, lam)


@dataclass(frozen=True)
class MapCell:
    rho: float
    lam: float
    speedups: dict[str, Speedup]
    seeds: int


@dataclass(frozen=True)
class RegimeMap:
    task: str
    workers: int
    cells: tuple[MapCell, ...]

    @property
    def rhos(self) -> list[float]:
        return sorted({c.rho for c in self.cells})

    @property
    def lams(self) -> list[float]:
        return sorted({c.lam for c in self.cells})


def regime_maps(runs: Sequence[Run]) -> list[RegimeMap]:
    """One map per (task, workers) with regime-map runs of deco-sgd at two or more cells."""
    chosen = [r for r in runs if r.role == "regime-map" and ratios(r) is not None]
    out = []
    for (task, workers), rs in group(chosen, lambda r: (r.task, r.workers)).items():
        cells = []
        for (rho, lam), cr in group(rs, ratios).items():  # type: ignore[arg-type]
            by = group(cr, lambda r: r.label)
            if DECO not in by:
                continue
            speedups = {b: compare(by[DECO], by[b], (task, f"{rho}-{lam}", workers)).speedup
                        for b in BASELINES if b in by}
            cells.append(MapCell(rho, lam, speedups, len(by[DECO])))
        if len(cells) >= 2:
            out.append(RegimeMap(task, workers, tuple(cells)))
    return out


def regime_table(maps: Sequence[RegimeMap]) -> Table:
    rows: list[dict[str, Any]] = []
    for m in maps:
        for c in sorted(m.cells, key=lambda c: (c.rho, c.lam)):
            row: dict[str, Any] = {"task": m.task, "workers": str(m.workers),
                                   "ρ = S/(aT)": f"{c.rho:g}", "λ = b/T": f"{c.lam:g}",
                                   "seeds": str(c.seeds), "rho": c.rho, "lambda": c.lam}
            for b in BASELINES:
                s = c.speedups.get(b)
                row[f"speed-up over {b}"] = str(s) if s else "not run"
                row[f"speedup_over_{b}"] = s.value if s else None
                row[f"speedup_over_{b}_kind"] = s.kind if s else None
            rows.append(row)
    shown = tuple(f"speed-up over {b}" for b in BASELINES)
    extra = ("rho", "lambda") + tuple(f"speedup_over_{b}{k}" for b in BASELINES
                                      for k in ("", "_kind"))
    return Table("regime_map", "Regime map: DeCo-SGD's speed-up by (ρ, λ)",
                 ("task", "workers", "ρ = S/(aT)", "λ = b/T", "seeds") + shown, tuple(rows),
                 extra, group_by=("task", "workers"))
