"""The report's figures, as reproducible PNG and SVG bytes (docs/reports.md "Figures").

Figures are :class:`matplotlib.figure.Figure` objects (no pyplot state, nothing to close),
drawn under a fixed ``rc_context`` with ``svg.hashsalt`` set; PNGs are saved without the
``Software`` tag and SVGs without a date, so the same runs give byte-identical files.

- time to accuracy: per (task, condition, workers), metric against ``metric_time_s`` of the
  evaluation rows; per label the median across seeds (:func:`decobench.reports.stats.step_band`), a
  min–max band, the target as a dashed line;
- scaling: median time to target and speed-up over d-sgd against workers;
- adaptivity: the trace's bandwidth with DeCo's δ (log) and τ (steps) on one time axis;
- theory: heat map of median iterations over the (δ, τ) grid and Φ against iterations;
- robust plans: one varying condition's bandwidth with deco-sgd's and deco-sgd-robust's δ
  (log) and τ, and the seed's oracle pair dashed (:mod:`decobench.reports.robust`);
- regime map: DeCo-SGD's speed-up over the (ρ, λ) grid with the paper's figures as contours;
- stability: per cell with γ-ramp runs, the training loss of the runs beside them against
  iteration, and of the ramps against γ (:mod:`decobench.reports.stability`);
- loss curves: per cell whose runs have no target and no ramp (a time-to-target figure has
  nothing to show there), the training loss and the metric against iteration.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from decobench.netem.trace import TraceError, load_trace
from decobench.reports import robust as rb
from decobench.reports import stability as st
from decobench.reports.regime_map import BASELINES, PAPER_FIGURES, RegimeMap
from decobench.reports.runs import Run, as_float
from decobench.reports.stats import step_band
from decobench.reports.tables import D_SGD, Table, cell_key, group
from decobench.reports.theory import TheoryGroup
from decobench.runs.rundir import TRACE_CSV

RC = {"svg.hashsalt": "decobench-report", "svg.fonttype": "path", "font.size": 8.0,
      "axes.titlesize": 9.0, "axes.grid": True, "grid.alpha": 0.3, "figure.dpi": 100,
      "savefig.dpi": 100, "path.simplify": False, "legend.fontsize": 7.0}
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")


@dataclass(frozen=True)
class FigureFile:
    """One figure: ``name`` is the file stem under ``figures/``."""

    name: str
    title: str
    caption: str
    png: bytes
    svg: bytes


def _plan_axes(dl: Axes, ta: Axes) -> None:
    """Label a figure's δ panel (log scale) and τ panel (integer ticks, simulated time)."""
    dl.set_yscale("log")
    dl.set_ylabel("δ (compression ratio)")
    ta.set_ylabel("τ (staleness, iterations)")
    ta.yaxis.set_major_locator(MaxNLocator(integer=True))
    ta.set_xlabel("simulated time (s)")
    dl.legend(loc="best")


def slug(*parts: object) -> str:
    return "__".join(re.sub(r"[^A-Za-z0-9._-]+", "-", str(p)).strip("-") or "x" for p in parts)


def render(name: str, title: str, caption: str, size: tuple[float, float],
           draw: Callable[[Figure], None]) -> FigureFile:
    """Draw on a fresh Figure under :data:`RC` and save it as PNG and SVG bytes."""
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=size)
        draw(fig)
        fig.tight_layout()
        png, svg = io.BytesIO(), io.BytesIO()
        fig.savefig(png, format="png", metadata={"Software": None})
        fig.savefig(svg, format="svg", metadata={"Date": None})
    return FigureFile(name, title, caption, png.getvalue(), svg.getvalue())


def colours(labels: Sequence[str]) -> dict[str, str]:
    """A fixed colour per label (sorted), the same in every figure of a report."""
    return {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(sorted(set(labels)))}


LINE_STYLES = ("-", "--", "-.")
"""Solid, then dashed, then dash-dotted for labels beyond the palette's colours (dotted
lines mark values, e.g. a ramp's largest stable γ)."""


def line_styles(labels: Sequence[str]) -> dict[str, tuple[str, str]]:
    """A fixed (colour, line style) per label (sorted): the palette's colours solid, and
    once they run out the same colours dashed, so no two labels draw alike (up to 30)."""
    ordered = sorted(set(labels))
    palette = colours(ordered)
    return {label: (palette[label], LINE_STYLES[i // len(PALETTE) % len(LINE_STYLES)])
            for i, label in enumerate(ordered)}


# ------------------------------------------------------------------------- time to accuracy
def time_to_accuracy(runs: Sequence[Run], palette: dict[str, str]) -> list[FigureFile]:
    out = []
    for (task, condition, workers), rs in group(runs, lambda r: (r.task, r.condition,
                                                                 r.workers)).items():
        by_label = group(rs, lambda r: r.label)
        if not any(r.evaluations() for r in rs):
            continue
        targets = sorted({float(t) for r in rs if (t := as_float(r.summary.get("target")))
                          is not None})
        metric = rs[0].metric_name

        def draw(fig: Figure, by_label=by_label, targets=targets, metric=metric) -> None:
            ax = fig.add_subplot()
            for label, lr in by_label.items():
                series = [r.evaluations() for r in lr]
                series = [s for s in series if s]
                if not series:
                    continue
                band = step_band(series)
                ax.step(band.times, band.median, where="post", color=palette[label],
                        label=f"{label} (median of {len(series)})")
                ax.fill_between(band.times, band.low, band.high, step="post", alpha=0.2,
                                color=palette[label], linewidth=0)
            for t in targets:
                ax.axhline(t, linestyle="--", color="black", linewidth=0.8,
                           label=f"target {t:g}")
            if metric == "perplexity":
                ax.set_yscale("log")
            ax.set_xlabel("simulated time of the evaluated model (s)")
            ax.set_ylabel(metric)
            ax.legend(loc="best")

        title = f"Time to {metric}: {task}, {condition}, {workers} workers"
        out.append(render(slug("tta", task, condition, f"w{workers}"), title,
                          "Median across seeds (step-wise hold of each seed's last evaluation, "
                          "within its own span); band: min-max across seeds; dashed: target.",
                          (6.4, 4.0), draw))
    return out


# -------------------------------------------------------------------------------- scaling
def scaling(table: Table, palette: dict[str, str]) -> list[FigureFile]:
    out = []
    rows_by = group(table.rows, lambda row: (row["task"], row["condition"]))
    for (task, condition), rows in rows_by.items():
        def draw(fig: Figure, rows=rows) -> None:
            left, right = fig.subplots(1, 2)
            for label, lr in group(rows, lambda row: row["label"]).items():
                lr = sorted(lr, key=lambda row: row["workers_n"])
                xs = [row["workers_n"] for row in lr]
                left.plot(xs, [row["median_ttt_s"] for row in lr], "-", color=palette[label],
                          label=label)
                for row in lr:
                    left.plot(row["workers_n"], row["median_ttt_s"],
                              "^" if row["median_ttt_censored"] else "o",
                              color=palette[label], fillstyle=(
                                  "none" if row["median_ttt_censored"] else "full"))
                if label == D_SGD:
                    continue
                pts = [row for row in lr if row["speedup"] is not None]
                if pts:
                    right.plot([row["workers_n"] for row in pts], [row["speedup"] for row in pts],
                               "-", color=palette[label], label=label)
                    for row in pts:
                        bound = row["speedup_kind"] == "lower_bound"
                        right.plot(row["workers_n"], row["speedup"], "^" if bound else "o",
                                   color=palette[label], fillstyle="none" if bound else "full")
            ticks = sorted({row["workers_n"] for row in rows})
            for ax in (left, right):
                ax.set_xticks(ticks, [str(t) for t in ticks])
            left.set_xlabel("workers")
            left.set_ylabel("median time to target (s)")
            left.legend(loc="best")
            right.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
            right.set_xlabel("workers")
            right.set_ylabel("speed-up over d-sgd")
            if right.get_legend_handles_labels()[0]:
                right.legend(loc="best")

        out.append(render(slug("scaling", task, condition),
                          f"Scaling: {task}, {condition}", "Open triangles: lower bounds "
                          "(a median not reached, or d-sgd not reached).", (8.0, 3.4), draw))
    return out


# ----------------------------------------------------------------------------- adaptivity
def _trace_steps(run: Run, end_s: float) -> tuple[list[float], list[float], str]:
    """Bandwidth steps (s, Mbit/s) of the run's network and where they came from."""
    sources = []
    if (run.path / TRACE_CSV).is_file():
        sources.append((run.path / TRACE_CSV, f"{run.rel}/{TRACE_CSV}"))
    if run.summary.get("trace_path"):
        sources.append((run.summary["trace_path"], f"trace {run.summary.get('trace')}"))
    for path, where in sources:
        try:
            trace = load_trace(path, loop=bool(run.config.get("trace_loop", False)))
        except (TraceError, OSError):
            continue
        rows = trace.rows_until(end_s) if end_s > 0 else trace.rows_until(1.0)
        xs = [t for t, _, _ in rows] + [max(end_s, rows[-1][0])]
        ys = [a / 1e6 for _, a, _ in rows]
        return xs, ys + ys[-1:], where
    pts = [(float(r["sim_time_s"]), float(r["bandwidth_mbps"])) for r in run.metrics
           if as_float(r.get("bandwidth_mbps")) is not None
           and as_float(r.get("sim_time_s")) is not None]
    return ([t for t, _ in pts], [b for _, b in pts],
            f"the bandwidth logged in {run.rel}/metrics.jsonl (trace file not readable)")


def adaptivity(runs: Sequence[Run], palette: dict[str, str]) -> list[FigureFile]:
    out = []
    for (task, condition, workers), rs in group(runs, lambda r: (r.task, r.condition,
                                                                 r.workers)).items():
        deco = [min(lr, key=lambda r: (r.seed, r.rel)) for lr in
                group([r for r in rs if r.method == "deco-sgd"], lambda r: r.label).values()]
        deco = [r for r in deco if any("delta" in row for row in r.metrics)]
        if not deco:
            continue
        end_s = max(r.sim_time_s for r in deco)
        xs, ys, where = _trace_steps(deco[0], end_s)

        def draw(fig: Figure, deco=deco, xs=xs, ys=ys) -> None:
            bw, dl, ta = fig.subplots(3, 1, sharex=True)
            bw.step(xs, ys, where="post", color="black")
            bw.set_ylabel("bandwidth (Mbit/s)")
            for r in deco:
                rows = [row for row in r.metrics if as_float(row.get("delta")) is not None
                        and as_float(row.get("sim_time_s")) is not None]
                t = [float(row["sim_time_s"]) for row in rows]
                name = f"{r.label} (seed {r.seed})"
                dl.step(t, [float(row["delta"]) for row in rows], where="post",
                        color=palette[r.label], label=name)
                ta.step(t, [float(row["tau"]) for row in rows], where="post",
                        color=palette[r.label], label=name)
            _plan_axes(dl, ta)

        caption = (f"Bandwidth from {where}; δ and τ from metrics.jsonl of "
                   + ", ".join(f"{r.rel} (seed {r.seed})" for r in deco) + ".")
        out.append(render(slug("adaptivity", task, condition, f"w{workers}"),
                          f"Adaptivity: {task}, {condition}, {workers} workers", caption,
                          (6.4, 5.6), draw))
    return out


# --------------------------------------------------------------------------------- theory
def theory(groups: Sequence[TheoryGroup]) -> list[FigureFile]:
    out = []
    for g in groups:
        task, condition, workers = g.key
        deltas = sorted({c.delta for c in g.cells})
        taus = sorted({c.tau for c in g.cells})
        phi_name = g.phi_names[0]

        def draw(fig: Figure, g=g, deltas=deltas, taus=taus, phi_name=phi_name) -> None:
            heat, scatter = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.3, 1.0]})
            reached = [c.iters.value for c in g.cells if not c.iters.censored]
            lo, hi = (min(reached), max(reached)) if reached else (0.0, 1.0)
            grid = [[math.nan] * len(deltas) for _ in taus]
            for c in g.cells:
                if not c.iters.censored:
                    grid[taus.index(c.tau)][deltas.index(c.delta)] = c.iters.value
            image = heat.imshow(grid, origin="lower", cmap="viridis", aspect="auto",
                                vmin=lo, vmax=hi if hi > lo else lo + 1)
            for c in g.cells:
                x, y = deltas.index(c.delta), taus.index(c.tau)
                if c.iters.censored:
                    heat.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, facecolor="lightgrey",
                                             hatch="//", edgecolor="grey"))
                text = ("> " if c.iters.censored else "") + f"{c.iters.value:.0f}"
                heat.text(x, y, text, ha="center", va="center", fontsize=7, color="black",
                          bbox={"facecolor": "white", "alpha": 0.7, "linewidth": 0})
                if c is g.oracle:
                    heat.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False,
                                             edgecolor="red", linewidth=2))
            heat.set_xticks(range(len(deltas)), [f"{d:.3g}" for d in deltas])
            heat.set_yticks(range(len(taus)), [str(t) for t in taus])
            heat.set_xlabel("δ")
            heat.set_ylabel("τ")
            heat.grid(False)
            fig.colorbar(image, ax=heat, label="median iterations to target")
            for c in g.cells:
                phi = c.phi[phi_name]
                if math.isfinite(phi):
                    scatter.plot(phi, c.iters.value, "^" if c.iters.censored else "o",
                                 color="grey" if c.iters.censored else "#1f77b4",
                                 fillstyle="none" if c.iters.censored else "full")
            scatter.set_xscale("log")
            scatter.set_xlabel(f"Φ({phi_name})(δ, τ)")
            scatter.set_ylabel("median iterations to target")

        rho = g.rho[phi_name]
        caption = ("Median iterations to target over the static DD-EF-SGD grid; hatched "
                   "grey: not reached (\"> N\": lower bound); red frame: the oracle (lowest "
                   f"median time to target). Right: Φ({phi_name}) against the same medians "
                   "(triangles: lower bounds); Spearman ρ = "
                   + ("n/a" if rho is None else f"{rho:.3f}") + ".")
        out.append(render(slug("theory", task, condition, f"w{workers}"),
                          f"Φ check: {task}, {condition}, {workers} workers", caption,
                          (8.0, 3.6), draw))
    return out


# ---------------------------------------------------------------------------- robust plans
def _plan_rows(run: Run, key: str) -> tuple[list[float], list[float]]:
    rows = [row for row in run.metrics if as_float(row.get(key)) is not None
            and as_float(row.get("sim_time_s")) is not None]
    return [float(row["sim_time_s"]) for row in rows], [float(row[key]) for row in rows]


def robust_plans(groups: Sequence[rb.RobustGroup], palette: dict[str, str]) -> list[FigureFile]:
    """``robust_plans``: for the condition and seed of :func:`decobench.reports.robust.plan_choice`,
    the bandwidth deco-sgd-robust's run logged (``bandwidth_mbps``), then δ (log) and τ of
    deco-sgd and deco-sgd-robust against simulated time, the seed's oracle pair dashed."""
    choice = rb.plan_choice(groups)
    if choice is None:
        return []
    g, seed = choice
    runs = [min((r for r in a.runs if r.seed == seed), key=lambda r: r.rel)
            for a in (g.of(rb.DECO), g.of(rb.ROBUST)) if a is not None]
    robust = runs[1]                           # plan_choice: both labels ran this seed
    oracle = next(o for o in g.oracles if o.seed == seed)

    def draw(fig: Figure) -> None:
        bw, dl, ta = fig.subplots(3, 1, sharex=True)
        xs, ys = _plan_rows(robust, "bandwidth_mbps")
        bw.step(xs, ys, where="post", color="black")
        bw.set_ylabel("bandwidth (Mbit/s)")
        for r in runs:
            for ax, key in ((dl, "delta"), (ta, "tau")):
                t, v = _plan_rows(r, key)
                ax.step(t, v, where="post", color=palette[r.label], label=r.label)
        if oracle.pair is not None:
            name = f"oracle of seed {seed} (δ {oracle.pair[0]:g}, τ {oracle.pair[1]})"
            dl.axhline(oracle.pair[0], color="black", linestyle="--", linewidth=0.8,
                       label=name)
            ta.axhline(oracle.pair[1], color="black", linestyle="--", linewidth=0.8,
                       label=name)
        _plan_axes(dl, ta)

    task, condition, workers = g.key
    caption = (f"{condition} (bandwidth CV {rb.link_text(g.cv)}), seed {seed}: bandwidth as "
               f"{robust.rel} logged it per iteration; δ and τ from metrics.jsonl of "
               + ", ".join(f"{r.rel}" for r in runs) + "; dashed: "
               + ("no static pair reached the target on this seed" if oracle.pair is None
                  else f"the seed's oracle pair (δ {oracle.pair[0]:g}, τ {oracle.pair[1]})")
               + ".")
    return [render("robust_plans", f"Plans against the link: {task}, {condition}, {workers} "
                   f"workers, seed {seed}", caption, (6.4, 5.6), draw)]


# -------------------------------------------------------------------------------- stability
def _rule_name(run: Run) -> str:
    """A label without its ``@...`` suffix (``deco-sgd+ef-update@ramp``: ``deco-sgd+ef-update``),
    so a rule's constant-step and ramp runs share a colour."""
    return run.label.split("@")[0]


def _loss_rows(run: Run) -> tuple[list[int], list[float]]:
    """Iterations and training loss (trailing median, :func:`decobench.reports.stability.smoothed`)."""
    iterations, losses = st.loss_rows(run)
    return iterations, st.smoothed(losses)


def stability(runs: Sequence[Run]) -> list[FigureFile]:
    """Per (task, condition, workers) with γ-ramp runs: left, the training loss (trailing
    median of 5) of the other runs of that cell against iteration; right, the ramps' against
    the step γ, each ramp's largest stable γ dotted. One colour and line style per
    update-rule label (:func:`line_styles`)."""
    out = []
    for key, ramps in group([r for r in runs if st.is_ramp(r)], cell_key).items():
        beside = [r for r in runs if cell_key(r) == key and not st.is_ramp(r)]
        styles = line_styles([_rule_name(r) for r in [*ramps, *beside]])

        def draw(fig: Figure, ramps: list[Run] = ramps, beside: list[Run] = beside,
                 styles: dict[str, tuple[str, str]] = styles) -> None:
            axes = fig.subplots(1, 2 if beside else 1, squeeze=False)[0]
            finite: list[float] = []
            for r in beside:
                its, loss = _loss_rows(r)
                colour, style = styles[_rule_name(r)]
                axes[0].plot(its, loss, color=colour, linestyle=style, label=r.label,
                             linewidth=1.0)
                finite += [v for v in loss if math.isfinite(v)]
            if beside:
                axes[0].set_xlabel("iteration")
                axes[0].set_ylabel("training loss (median of 5)")
                axes[0].legend(loc="best")
            ax = axes[-1]
            for r in ramps:
                its, loss = _loss_rows(r)
                colour, style = styles[_rule_name(r)]
                ax.plot(st.ramp_steps(r, its), loss, color=colour, linestyle=style,
                        label=r.label, linewidth=1.0)
                found = st.run_stable_step(r)
                if not found.censored:
                    ax.axvline(found.gamma, color=colour, linestyle=":", linewidth=0.8)
                finite += [v for v in loss if math.isfinite(v)]
            ax.set_xlabel("step γ of the ramp")
            ax.set_ylabel("training loss (median of 5)")
            ax.legend(loc="best")
            if finite:                    # a diverged run's 1e10 would flatten the rest
                low = min(finite)
                for a in axes:
                    a.set_ylim(low - 0.2, max(finite[0], low + 1.0) + 3.0)

        task, condition, workers = key
        caption = ("Training loss from metrics.jsonl, smoothed by a trailing median of "
                   f"{st.WINDOW} iterations; dotted: each ramp's largest stable γ (the step "
                   "before its loss left its trend for good, reports/stability.py); runs "
                   + ", ".join(r.rel for r in [*beside, *ramps]) + ".")
        out.append(render(slug("stability", task, condition, f"w{workers}"), f"Loss curves and γ ramps: {task}, "
                          f"{condition}, {workers} workers", caption, (9.6, 4.2), draw))
    return out


def _curve_label(run: Run, runs: Sequence[Run]) -> str:
    """The run's label, with its step γ (and warm-up) where another run has the same label,
    and its seed where such a run has another seed (its directory's name where config.yaml
    gives no step)."""
    same = [r for r in runs if r.label == run.label]
    if len(same) < 2:
        return run.label
    c = run.config
    lr = as_float(c.get("lr"))
    if lr is None:
        return f"{run.label} ({run.path.name})"
    warm = f", warm-up {c.get('warmup_iters')}" if c.get("schedule") == "warmup" else ""
    seed = f", seed {run.seed}" if any(r.seed != run.seed for r in same) else ""
    return f"{run.label} (γ {lr:g}{warm}{seed})"


def untargeted(runs: Sequence[Run]) -> dict[tuple[str, str, int], list[Run]]:
    """The cells in which no run has a target and none is a γ ramp."""
    return {key: rs for key, rs in group(runs, cell_key).items()
            if all(r.summary.get("target") is None and not st.is_ramp(r) for r in rs)}


def loss_curves(runs: Sequence[Run]) -> list[FigureFile]:
    """Per cell of :func:`untargeted`: left, each run's training loss (trailing median of
    5) against iteration; right, its metric at each evaluation."""
    out = []
    for key, rs in untargeted(runs).items():
        names = {r.rel: _curve_label(r, rs) for r in rs}
        palette = colours(list(names.values()))
        metric = rs[0].summary.get("metric_name", "metric")

        def draw(fig: Figure, rs: list[Run] = rs, names: dict[str, str] = names,
                 palette: dict[str, str] = palette, metric: str = metric) -> None:
            loss_ax, metric_ax = fig.subplots(1, 2)
            for r in rs:
                colour = palette[names[r.rel]]
                its, loss = _loss_rows(r)
                loss_ax.plot(its, loss, color=colour, label=names[r.rel], linewidth=1.0)
                points = [(int(m["iteration"]), v) for m in r.metrics
                          if (v := as_float(m.get("metric"))) is not None]
                if points:
                    metric_ax.plot(*zip(*points, strict=True), color=colour, marker="o",
                                   markersize=3, label=names[r.rel], linewidth=1.0)
            loss_ax.set_xlabel("iteration")
            loss_ax.set_ylabel("training loss (median of 5)")
            loss_ax.legend(loc="best")
            metric_ax.set_xlabel("iteration")
            metric_ax.set_ylabel(metric)
            if metric == "perplexity":
                metric_ax.set_yscale("log")

        task, condition, workers = key
        caption = ("Training loss from metrics.jsonl, smoothed by a trailing median of "
                   f"{st.WINDOW} iterations, and the {metric} of each evaluation; runs "
                   + ", ".join(r.rel for r in rs) + ".")
        out.append(render(slug("loss", task, condition, f"w{workers}"), f"Loss curves: {task}, "
                          f"{condition}, {workers} workers", caption, (9.6, 4.2), draw))
    return out


# ------------------------------------------------------------------------------- regime map
def regime_map(maps: Sequence[RegimeMap]) -> list[FigureFile]:
    """Per (task, workers): heat maps of DeCo-SGD's speed-up over each baseline on the
    (ρ, λ) grid, with the paper's headline figure as a contour."""
    out = []
    for m in maps:
        rhos, lams = m.rhos, m.lams
        baselines = [b for b in BASELINES if any(b in c.speedups for c in m.cells)]
        if not baselines:
            continue

        def draw(fig: Figure, m=m, rhos=rhos, lams=lams, baselines=baselines) -> None:
            axes = fig.subplots(1, len(baselines), squeeze=False)[0]
            for ax, base in zip(axes, baselines, strict=True):
                grid = [[math.nan] * len(rhos) for _ in lams]
                for c in m.cells:
                    s = c.speedups.get(base)
                    if s is not None and s.value is not None:
                        grid[lams.index(c.lam)][rhos.index(c.rho)] = s.value
                logs = [[math.log10(v) if v > 0 else math.nan for v in row] for row in grid]
                image = ax.imshow(logs, origin="lower", cmap="RdBu", aspect="auto",
                                  vmin=-1.0, vmax=1.0)
                for c in m.cells:
                    s = c.speedups.get(base)
                    x, y = rhos.index(c.rho), lams.index(c.lam)
                    if s is None or s.value is None:
                        ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, facecolor="lightgrey",
                                               hatch="//", edgecolor="grey"))
                    ax.text(x, y, "not run" if s is None else str(s), ha="center",
                            va="center", fontsize=7,
                            bbox={"facecolor": "white", "alpha": 0.7, "linewidth": 0})
                level = PAPER_FIGURES[base]
                values = [v for row in grid for v in row if math.isfinite(v)]
                title = f"over {base}"
                if (len(rhos) >= 2 and len(lams) >= 2 and values
                        and min(values) < level < max(values)):
                    ax.contour(range(len(rhos)), range(len(lams)), grid,
                               levels=[level], colors="black", linewidths=1.5)
                    # named in the title: a label on the line can cover a cell's figure
                    title += f"\nblack line: the paper's {level:g}x"
                ax.set_xticks(range(len(rhos)), [f"{r:g}" for r in rhos])
                ax.set_yticks(range(len(lams)), [f"{v:g}" for v in lams])
                ax.set_xlabel("ρ = S/(a·T)")
                ax.set_ylabel("λ = b/T")
                ax.set_title(title, fontsize=9)
                ax.grid(False)
                fig.colorbar(image, ax=ax, label="log10 speed-up")

        caption = ("DeCo-SGD's median time to target against each baseline's, per cell of "
                   "the transmission ratio ρ (x) and latency ratio λ (y); blue: DeCo faster. "
                   "Black line: where the paper's headline figure (5.07x over d-sgd, 1.37x over "
                   "cocktail-sgd-topk) is reached, when the map spans it; '>=': lower bound "
                   "(the baseline missed the target); hatched: DeCo-SGD did not reach it.")
        out.append(render(slug("regime-map", m.task, f"w{m.workers}"),
                          f"Regime map: {m.task}, {m.workers} workers", caption,
                          (4.2 * len(baselines) + 0.6, 3.4), draw))
    return out
