"""The committed runs of issue 43's ablation (docs/results/gpt2-stability/runs, the finished
runs of suite gpt2-stability without their checkpoints) and the ramp table of
docs/results/gpt2-stability.md: every row is what reports/stability.py reads from those
runs today, and every committed ramp has its row."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from markdown_tables import table

from decobench.reports import stability
from decobench.reports.runs import load_runs
from decobench.sweeps.suite import expand_cells, load_suite

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "results" / "gpt2-stability.md"
RUNS = ROOT / "docs" / "results" / "gpt2-stability"


def test_every_ramp_row_is_read_from_the_committed_runs():
    ramps = [r for r in load_runs(RUNS).runs if stability.is_ramp(r)]
    assert ramps, "no committed ramp runs"
    rows = table(DOC.read_text(encoding="utf-8"), "label", "largest stable γ")
    by_run = {row["run"].strip("`"): row for row in rows}
    assert sorted(by_run) == sorted(r.path.name for r in ramps)
    for run in ramps:
        found = stability.run_stable_step(run)
        row = by_run[run.path.name]
        assert row["label"] == run.label
        assert row["largest stable γ"] == f"{'≥ ' if found.censored else ''}{found.gamma:.4g}"
        assert row["left its trend at"] == ("-" if found.left_at is None else str(found.left_at))
        assert row["status"].split(" ")[0] == run.summary["status"]


def test_committed_runs_belong_to_the_shipped_suite(tmp_path):
    """Each committed run is one of the suite's cells as shipped (its directory name ends in
    the cell's identity), or the doc names it as a run of an earlier version of the suite;
    no checkpoint is committed."""
    suite, _ = load_suite("gpt2-stability")
    cells = {cell.name: cell for cell in expand_cells(suite, tmp_path)}
    text = DOC.read_text(encoding="utf-8")
    runs = load_runs(RUNS).runs
    assert runs
    for run in runs:
        assert run.summary["suite"] == "gpt2-stability"
        assert not list(run.path.glob("checkpoint*"))
        if run.path.name not in cells:
            assert f"`{run.path.name}`" in text, f"{run.path.name}: not a cell of the suite"


def _perplexity(value: float) -> str:
    """A perplexity as the curve table writes it: 1,234 below a million, 6.2e7 above, inf."""
    if not math.isfinite(value):
        return "inf"
    if value < 1e6:
        return f"{value:,.0f}"
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def test_every_curve_row_is_read_from_the_committed_runs():
    """The table of curves at γ 0.01: each committed run that is not a ramp has its row,
    with the perplexities of its evaluations and its wall time."""
    curves = [r for r in load_runs(RUNS).runs if not stability.is_ramp(r)]
    assert curves, "no committed curve runs"
    rows = {row["run"].strip("`"): row
            for row in table(DOC.read_text(encoding="utf-8"), "label",
                             "perplexity at iteration 50 / 100 / 150 / 200 / 250 / 300")}
    assert sorted(rows) == sorted(r.path.name for r in curves)
    for run in curves:
        row = rows[run.path.name]
        ppl = dict(stability.evaluations(run))
        assert row["label"] == run.label
        assert row["perplexity at iteration 50 / 100 / 150 / 200 / 250 / 300"] == " / ".join(
            _perplexity(ppl[i]) if i in ppl else "-" for i in (50, 100, 150, 200, 250, 300))
        assert row["wall time"] == f"{run.summary['wall_time_s'] / 60:.1f} min"


def test_the_iteration_ratios_the_doc_quotes_are_read_from_the_curves():
    """The log-linear readings docs/results/gpt2-stability.md quotes ("about 275 against
    225: about 1.2x", ...) are what reports/stability.py's iterations_to reads."""
    curves = {r.label: stability.evaluations(r) for r in load_runs(RUNS).runs
              if not stability.is_ramp(r)}
    text = " ".join(DOC.read_text(encoding="utf-8").split())

    def to(label: str, perplexity: float) -> float:
        found = stability.iterations_to(curves[label], perplexity)
        assert found is not None
        return found

    # clipped DeCo-SGD against clipped D-SGD, to perplexity 1,250
    assert round(to("d-sgd+clip1", 1250)) == 225 and round(to("deco-sgd+clip1", 1250)) == 274
    assert "it needs about 275 iterations" in text and "against D-SGD's 225: about 1.2x" in text
    assert round(to("deco-sgd+clip1", 1250) / to("d-sgd+clip1", 1250), 1) == 1.2
    # the paper pipeline and per-tensor Top-k against unclipped D-SGD
    dsgd = dict(curves["d-sgd"])
    assert round(to("deco-sgd", dsgd[100]), -1) == 230 and "about 230 iterations" in text
    assert [round(to("deco-sgd+topk-layer", dsgd[i]) / i, 2) for i in (100, 150, 200)] == [
        1.70, 1.49, 1.35]
    assert "170, 224 and 270 iterations" in text and "1.70x, 1.49x and 1.35x" in text
    # clipping with per-tensor Top-k against clipping with global Top-k
    assert round(to("deco-sgd+clip1+topk-layer", 1250)) == 268
    assert "about 268 iterations" in text and "against 274 with global Top-k" in text
    clipped = dict(curves["d-sgd+clip1"])
    assert [round(to(label, clipped[i]) / i, 2) for label in (
        "deco-sgd+clip1+topk-layer", "deco-sgd+clip1") for i in (100, 150, 200)] == [
        1.24, 1.17, 1.19, 1.22, 1.26, 1.24]
    assert "1.24x, 1.17x and 1.19x (global Top-k: 1.22x, 1.26x and 1.24x)" in text


def test_the_curve_reader_prints_each_curves_ratio(capsys):
    assert stability.main([str(RUNS), "--reference", "d-sgd", "--at", "100"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("d-sgd at iteration 100: perplexity 1,040.1")
    assert "  deco-sgd+topk-layer: at iteration 170.1 (1.70x)" in lines
    assert "  d-sgd+momentum: by iteration 50 (0.50x)" in lines
    assert "  deco-sgd+clip1: not reached by iteration 300 (over 3.00x)" in lines


@pytest.mark.parametrize("args, says", [
    (["--reference", "adam", "--at", "100"], "--reference adam: 0 curve runs"),
    (["--reference", "d-sgd", "--at", "75"], "--at 75: d-sgd has no finite evaluation"),
])
def test_the_curve_reader_says_what_is_wrong_in_one_line(capsys, args, says):
    with pytest.raises(SystemExit) as exit_:
        stability.main([str(RUNS), *args])
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err.splitlines()[-1]


GPU_DOC = ROOT / "docs" / "results" / "gpu-stability.md"
GPU_RUNS = ROOT / "docs" / "results" / "gpu-stability"


def _largest_rise(run) -> str:
    """The largest rise of the smoothed training loss above its running minimum, and where."""
    iterations, losses = stability.loss_rows(run)
    best, top = float("inf"), (0.0, 0)
    for i, v in zip(iterations, stability.smoothed(losses), strict=True):
        if v - best > top[0]:
            top = (v - best, i)
        best = min(best, v)
    return f"{top[0]:.2f} at {top[1]}"


def test_every_gpu_row_is_read_from_the_committed_runs(tmp_path):
    """docs/results/gpu-stability.md's run table: losses, perplexities, the largest rise and
    the time per iteration are those of the committed runs and their step_times.json, and
    every run is a cell of the shipped gpu-stability suite."""
    import json

    runs = load_runs(GPU_RUNS).runs
    times = json.loads((GPU_RUNS / "step_times.json").read_text())
    cells = {cell.name for cell in expand_cells(load_suite("gpu-stability")[0], tmp_path)}
    rows = {row["run"].strip("`"): row
            for row in table(GPU_DOC.read_text(encoding="utf-8"), "label", "| step γ |")}
    assert sorted(rows) == sorted(r.path.name for r in runs) == sorted(cells)
    for run in runs:
        row = rows[run.path.name]
        loss = {int(m["iteration"]): m["loss"] for m in run.metrics if "loss" in m}
        ppl = {int(m["iteration"]): m["metric"] for m in run.metrics
               if m.get("metric") is not None}
        assert row["label"] == run.label and not list(run.path.glob("checkpoint*"))
        assert row["step γ"].split(",")[0] == f"{float(run.config['lr']):g}"
        assert row["loss at 30 / 60 / 100 / 200 / 300"] == " / ".join(
            f"{loss[i]:.2f}" if i in loss else "-" for i in (30, 60, 100, 200, 300))
        assert row["perplexity at 50 / 100 / 150 / 200 / 250 / 300"] == " / ".join(
            f"{ppl[i]:.0f}" if i in ppl else "-" for i in (50, 100, 150, 200, 250, 300))
        assert row["largest rise above its running minimum (median of 5)"] == _largest_rise(run)
        assert row["s per iteration"] == f"{times[run.path.name]['iteration_s']:.3f}"
