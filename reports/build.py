"""``decobench report DIR``: the report of a results folder (docs/reports.md).

:func:`write_report` loads the runs (:mod:`decobench.reports.runs`), builds the tables
(:mod:`decobench.reports.tables`, :mod:`decobench.reports.theory`, :mod:`decobench.reports.stability`,
:mod:`decobench.reports.robust`) and figures (:mod:`decobench.reports.figures`), and
writes, each file atomically::

    OUT/report.md            OUT/report.html (self-contained: figures embedded)
    OUT/tables/NAME.csv      OUT/tables/NAME.tex
    OUT/figures/NAME.png     OUT/figures/NAME.svg

Every number comes from the run directories. The same runs give byte-identical files (no
dates, no wall-clock times, sorted orders, reproducible figures).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from decobench.atomicio import write_bytes_atomic, write_text_atomic
from decobench.reports import figures as figs
from decobench.reports import robust, scale, stability, theory
from decobench.reports.claims import claims_table, extreme_cells
from decobench.reports.regime_map import regime_maps, regime_table
from decobench.reports.render import (
    Block,
    Bullets,
    FigureBlock,
    Heading,
    Para,
    TableBlock,
    to_csv,
    to_html,
    to_latex,
    to_markdown,
)
from decobench.reports.runs import Run, RunSet, load_runs
from decobench.reports.speedup import REFERENCES
from decobench.reports.tables import (
    Table,
    budget_warnings,
    final_metric_table,
    group,
    has_target,
    runs_table,
    scaling_table,
    time_table,
    ttt_table,
)

TITLE = "decobench report"


@dataclass(frozen=True)
class ReportOutput:
    """What :func:`write_report` wrote; ``rows`` holds each table's rows (display strings
    under the shown columns plus machine-readable values), e.g. for W&B logging."""

    markdown: Path
    html: Path
    csv: Mapping[str, Path]
    tex: Mapping[str, Path]
    figures: Mapping[str, tuple[Path, Path]]
    rows: Mapping[str, list[dict[str, Any]]]

    @property
    def files(self) -> list[Path]:
        """Every file written, in a stable order."""
        out = [self.markdown, self.html]
        out += [p for name in sorted(self.csv) for p in (self.csv[name], self.tex[name])]
        return out + [p for name in sorted(self.figures) for p in self.figures[name]]


def _distinct(values: Iterable[Any], unit: str = "run") -> str:
    """One value, or every value with its count when the runs differ in it (e.g. the
    profiles of a tier that runs some tasks at the paper's size and others at CPU size)."""
    counts = Counter("unknown" if v is None or v == "" else str(v) for v in values)
    if len(counts) == 1:
        return next(iter(counts))
    return "by run: " + "; ".join(f"{v} ({n} {unit}{'s' if n != 1 else ''})"
                                  for v, n in sorted(counts.items()))


def _version(run: Run, key: str) -> Any:
    versions = run.config.get("versions")
    return versions.get(key) if isinstance(versions, dict) else None


def header(rs: RunSet) -> list[Block]:
    """Section 1: what was run, with which software, and how time was measured."""
    runs = rs.runs
    items = []
    if rs.suite:
        items.append(f"suite: {rs.suite}")
    items.append(f"runs: {len(runs)}" + (" (every cell of manifest.json)" if rs.manifest else
                                          " (every summary.json below the folder)"))
    for key in ("decobench", "torch", "torchvision", "python"):
        items.append(f"{key}: {_distinct(_version(r, key) for r in runs)}")
    items.append(f"git commit: {_distinct(_version(r, 'git_commit') for r in runs)}")
    items.append(f"platform: {_distinct(_version(r, 'platform') for r in runs)}")
    items.append(f"cpu capability: {_distinct(_version(r, 'cpu_capability') for r in runs)} "
                 "(the vector unit torch's CPU kernels use; another one rounds differently, so "
                 "a run repeats bit for bit only on the same one)")
    items.append(f"backend: {_distinct(r.summary.get('backend') for r in runs)}")
    items.append(f"profile: {_distinct(r.summary.get('profile') for r in runs)}")
    basis = _distinct(r.summary.get("time_basis") for r in runs)
    items.append(f"times: {basis} seconds (summary time_basis; 'simulated' = the simulated "
                 "network clock, 'measured' = emulation)")
    return [Heading(1, TITLE + (f": suite {rs.suite}" if rs.suite else "")), Bullets(tuple(items))]


def rules(runs: Sequence[Run]) -> list[Block]:
    """Section 2: the rules the numbers follow (MLPerf-style)."""
    seeds = ", ".join(str(s) for s in sorted({r.seed for r in runs}))
    cadence = "; ".join(f"{task}: E = {_distinct(r.summary.get('eval_every') for r in rs)}"
                        for task, rs in group(runs, lambda r: r.task).items())
    cells = group(runs, lambda r: (r.task, r.condition, r.workers, r.label))
    few = sum(len(rs) < 3 for rs in cells.values())
    return [Heading(2, "Rules"), Bullets((
        f"Seeds: a fixed list; the seeds found here are {seeds}.",
        f"Evaluation every E iterations ({cadence}); evaluation is not charged on the "
        "simulated clock.",
        "Time to target (TTT) = metric_time_s (the simulated time the evaluated model existed) "
        "of the first evaluation meeting the target (accuracy >= target, perplexity <= target).",
        "Over seeds: median and range [min, max], and the olympic mean (drop the single "
        "fastest and the single slowest seed, average the rest). With fewer than 3 seeds the "
        f"olympic mean is the plain mean ({few} of {len(cells)} rows here have fewer than "
        "3 seeds).",
        "Runs that did not reach the target (budget exhausted or diverged) are counted, not "
        "dropped: censored at their budget, i.e. TTT > the simulated time they ran, and slower "
        "than every seed that reached. A median or mean that involves a censored seed is "
        "printed '> X', X its lower bound (the statistic with the censored seeds at their "
        "budgets). Iterations to target are censored the same way at the iterations run.",
        "Speed-up over B = median TTT(B) / median TTT(method) within the same task, condition "
        "and workers; '>= X' when B's median is censored (a lower bound), 'n/a (not reached)' "
        "when the method's median is censored.",
    ))]


def _skip(text: str) -> Para:
    return Para(f"Skipped: {text}.")


def build(rs: RunSet) -> tuple[list[Block], list[Table], list[figs.FigureFile]]:
    """The document blocks, tables and figures of a run set (nothing written)."""
    runs = rs.runs
    palette = figs.colours([r.label for r in runs])
    tables: list[Table] = []
    figures: list[figs.FigureFile] = []
    blocks: list[Block] = header(rs)
    groups = theory.analyse(runs)
    robust_groups = robust.analyse(runs)
    blocks.append(Heading(2, "Claims"))
    if runs and all(r.role == "other" for r in runs):
        blocks.append(Para("None of these runs is evidence for the paper's claims (every "
                           "run's experiment has role `other`, e.g. `decobench versus`), so "
                           "there is no claims table; the shipped suites' reports have one "
                           "(docs/suites.md)."))
    else:
        claims = claims_table(runs, groups, robust_groups)
        tables.append(claims)
        blocks.append(TableBlock(claims))
        blocks += rules(runs)

    def add_table(table: Table) -> None:
        tables.append(table)
        blocks.append(TableBlock(table))

    def add_figures(items: list[figs.FigureFile]) -> None:
        for f in items:
            name, n = f.name, 1
            while any(g.name == name for g in figures):
                n += 1
                name = f"{f.name}-{n}"
            figures.append(replace(f, name=name))
            blocks.append(FigureBlock(figures[-1]))

    blocks.append(Heading(2, "Time to target"))
    targeted = [r for r in runs if has_target(r)]
    present = [b for b in REFERENCES if any(r.label == b for r in targeted)]
    if targeted and not present:
        blocks.append(Para(f"No {', '.join(REFERENCES)} run here: no speed-up columns."))
    if targeted:
        add_table(ttt_table(targeted))
        unequal = budget_warnings(targeted)
        if unequal:
            blocks.append(Para("**Unequal budgets.** " + " ".join(unequal)))
        scaled = scale.check(targeted)
        if scaled.notes:                # every cell, not only those a claim row reads
            blocks.append(Para("**Scale check** (docs/reports.md \"Claims\", rule 3). "
                               + " ".join(f"{note}." for note in scaled.notes)))
    untargeted = [r for r in runs if not has_target(r)]
    if untargeted:
        blocks.append(Para(f"{len(untargeted)} run(s) without a target (--target): no time "
                           "to target or speed-up is defined for them; their final metric:"
                           if targeted else "No run has a target (--target): time to target "
                           "and speed-ups need one. The final metric of each label:"))
        add_table(final_metric_table(untargeted))
    extreme = extreme_cells(runs)
    if extreme:
        blocks.append(Para("Extreme conditions (D-SGD below 1% of its compute-bound "
                           "throughput; listed, but not used for the 'up to' claims): "
                           + "; ".join(f"{t} / {c} / n={w} (d-sgd at {100 * s:.2f}%)"
                                       for (t, c, w), s in sorted(extreme.items())) + "."))

    blocks.append(Heading(2, "Time to accuracy"))
    curves = figs.time_to_accuracy(runs, palette)
    if curves:
        add_figures(curves)
    else:
        blocks.append(_skip("no evaluation rows in metrics.jsonl"))

    blocks.append(Heading(2, "Scaling"))
    scaling = scaling_table(runs)
    if scaling is None:
        blocks.append(_skip("no label was run at two or more worker counts"))
    else:
        add_table(scaling)
        add_figures(figs.scaling(scaling, palette))

    blocks.append(Heading(2, "Adaptivity"))
    adapt = figs.adaptivity(runs, palette)
    if adapt:
        blocks.append(Para("DeCo-SGD's δ and τ against the network, lowest seed of each "
                           "deco-sgd label."))
        add_figures(adapt)
    else:
        blocks.append(_skip("no deco-sgd run with δ/τ in its metrics"))

    blocks.append(Heading(2, "Regime map"))
    maps = regime_maps(runs)
    if maps:
        blocks.append(Para("DeCo-SGD's speed-up over D-SGD and over the paper's static strategy "
                           "on networks given by the two regime ratios (ρ = S/(a·T), "
                           "λ = b/T: their means, where a run's network varies like a trace "
                           "with --ratio-shape); the paper's compute time is unknown, so the "
                           "map shows where its headline figures are reached."))
        add_table(regime_table(maps))
        add_figures(figs.regime_map(maps))
    else:
        blocks.append(_skip("no regime-map runs (deco-sgd at two or more (ρ, λ) cells given "
                            "by --transmission-ratio/--latency-ratio)"))

    blocks.append(Heading(2, "Theory: Φ, the (δ, τ) grid and the oracle"))
    if groups:
        blocks.append(Para("Static DD-EF-SGD runs over a (δ, τ) grid (docs/design.md §7): "
                           "median iterations to target per cell, Spearman's ρ between Φ and "
                           "those medians (not-reached cells rank as the largest, ties share "
                           "their average rank), and the oracle, the pair with the lowest "
                           "median time to target in hindsight, against DeCo's first plan."))
        add_table(theory.grid_table(groups))
        add_table(theory.rank_table(groups))
        add_table(theory.oracle_table(groups))
        add_figures(figs.theory(groups))
    else:
        blocks.append(_skip("no static DD-EF-SGD grid in these runs (dd-ef-sgd at two or "
                            "more (δ, τ) pairs for one task, condition and workers)"))

    blocks.append(Heading(2, "Robust planner: deco-sgd-robust against the per-seed oracle"))
    if robust_groups:
        blocks.append(Para(
            "This project's check of deco-sgd-robust (issue 42; "
            "docs/methods/deco-sgd-robust.md) on the `robust` runs. The oracle is formed per "
            "seed: for each seed, the static DD-EF-SGD (δ, τ) pair of the grid with the lowest "
            "time to target among that seed's grid runs that reached it (ties: fewer "
            "iterations, smaller δ, smaller τ), in hindsight. Each label's ratio is its median "
            "TTT over the median of the oracle TTTs of the seeds both have, with a 95% "
            "interval (paired bootstrap over those seeds). The targets are issue 42's point 5 "
            f"on medians: (a) within 5% of the oracle where the bandwidth's coefficient of "
            f"variation (CV, over the trace's period) is {robust.CONSTANT_CV:g} or more; (b) "
            f"at least {robust.DECO_GAIN:g}x faster than deco-sgd where it is "
            f"{robust.VARYING_CV:g} or more; (c) never slower than {robust.CONSTANT_FLOOR:g}x "
            "of deco-sgd on constant links; (d) never below the paper's static strategy "
            "(cocktail-sgd-topk). The diurnal family is held out: no constant of the planner "
            "was tuned on it."))
        add_table(robust.oracle_table(robust_groups))
        add_table(robust.targets_table(robust_groups))
        add_figures(figs.robust_plans(robust_groups, palette))
    elif any(r.role == robust.ROLE for r in runs):
        blocks.append(_skip("no static DD-EF-SGD grid among the robust runs (dd-ef-sgd at two "
                            "or more (δ, τ) pairs for one task, condition and workers)"))
    else:
        blocks.append(_skip("no robust runs (role `robust`: the robust-planner suite, "
                            "deco-sgd-robust beside a static DD-EF-SGD grid)"))

    blocks.append(Heading(2, "Stability: the largest stable step"))
    if any(stability.is_ramp(r) for r in runs):
        blocks.append(Para(
            "Runs whose step γ rose linearly over their whole budget (a γ ramp, as in the "
            "gpt2-stability suite, issue 43): the step at which each left its trend, per "
            "update rule (docs/design.md §2.5)."))
        add_table(stability.ramp_table(runs))
        add_figures(figs.stability(runs))
    else:
        blocks.append(_skip("no γ-ramp runs (a linear warm-up over the whole budget: "
                            "schedule warmup with warmup_iters >= max_iters)"))

    blocks.append(Heading(2, "Loss curves of runs without a target"))
    if figs.untargeted(runs):
        blocks.append(Para(
            "Cells in which no run has a target (and none is a γ ramp), such as the "
            "gpu-stability check: with no time to target to compare, the training loss and "
            "the metric against iteration are the evidence."))
        add_figures(figs.loss_curves(runs))
    else:
        blocks.append(_skip("every cell has a target or a γ ramp"))

    blocks.append(Heading(2, "Where the time goes"))
    add_table(time_table(runs))

    blocks.append(Heading(2, "Every run"))
    add_table(runs_table(runs))
    return blocks, tables, figures


def write_report(results_dir: str | Path, out_dir: str | Path | None = None) -> ReportOutput:
    """Write the report of ``results_dir`` into ``out_dir`` (default: ``results_dir``).

    Raises :class:`decobench.errors.DecobenchError` when the folder has no runs or a cell of
    its manifest has no finished run.
    """
    rs = load_runs(results_dir)
    out = Path(results_dir if out_dir is None else out_dir)
    blocks, tables, figures = build(rs)
    csv_paths, tex_paths, figure_paths = {}, {}, {}
    for table in tables:
        csv_paths[table.name] = out / "tables" / f"{table.name}.csv"
        tex_paths[table.name] = out / "tables" / f"{table.name}.tex"
        write_text_atomic(csv_paths[table.name], to_csv(table))
        write_text_atomic(tex_paths[table.name], to_latex(table))
    for figure in figures:
        png, svg = out / "figures" / f"{figure.name}.png", out / "figures" / f"{figure.name}.svg"
        write_bytes_atomic(png, figure.png)
        write_bytes_atomic(svg, figure.svg)
        figure_paths[figure.name] = (png, svg)
    title = TITLE + (f": suite {rs.suite}" if rs.suite else "")
    markdown, page = out / "report.md", out / "report.html"
    write_text_atomic(markdown, to_markdown(blocks))
    write_text_atomic(page, to_html(blocks, title))
    return ReportOutput(markdown=markdown, html=page, csv=csv_paths, tex=tex_paths,
                        figures=figure_paths,
                        rows={t.name: [dict(row) for row in t.rows] for t in tables})
