"""The committed runs of issue 43's scale check (docs/results/gpt2-scale-check/runs, the
finished runs of suite gpt2-scale-check without their checkpoints) and the table of
docs/results/gpt2-scale-check.md: every row is what the runs' summaries say, every run has
its row and is a cell of the shipped suite."""

from __future__ import annotations

from pathlib import Path

from markdown_tables import table

from decobench.reports.runs import load_runs
from decobench.sweeps.suite import expand_cells, load_suite

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "results" / "gpt2-scale-check.md"
RUNS = ROOT / "docs" / "results" / "gpt2-scale-check"


def test_every_row_is_read_from_the_committed_runs(tmp_path):
    runs = load_runs(RUNS).runs
    assert runs, "no committed runs"
    cells = {cell.name for cell in expand_cells(load_suite("gpt2-scale-check")[0], tmp_path)}
    rows = {row["run"].strip("`"): row for row in table(DOC.read_text(encoding="utf-8"),
                                                        "label", "over D-SGD's")}
    assert sorted(rows) == sorted(r.path.name for r in runs)
    base = next((r.summary["iters_to_target"] for r in runs if r.label == "d-sgd"), None)
    for run in runs:
        summary, row = run.summary, rows[run.path.name]
        assert run.path.name in cells and not list(run.path.glob("checkpoint*"))
        assert summary["suite"] == "gpt2-scale-check" and summary["target"] == 1250
        iters = summary["iters_to_target"]
        assert row["label"] == run.label
        assert row["iterations to perplexity 1,250"] == (
            str(iters) if iters is not None else f"not reached by {summary['iterations']}")
        assert row["over D-SGD's"] == ("-" if iters is None or base is None
                                       else f"{iters / base:.2f}x")
        assert row["resolution (iterations)"] == str(summary["ttt_resolution_iters"])
        assert row["final perplexity"] == f"{summary['final_metric']:,.0f}"
        assert row["status"] == summary["status"]
        assert row["wall time"] == f"{summary['wall_time_s'] / 60:.1f} min"


def test_the_shipped_reference_is_what_the_committed_runs_measure():
    """reports/scale.py's GPT-2 entry, entered by hand from `python -m
    decobench.reports.scale`, has the ratios, target and condition the committed runs give."""
    from decobench.reports.scale import REFERENCES, measure

    shipped = REFERENCES["gpt2-wikitext"].measurement
    assert shipped is not None
    measured = measure(load_runs(RUNS).runs, "gpt2-wikitext", "mid")
    assert measured.ratios == shipped.ratios and measured.target == shipped.target
    assert (measured.condition, measured.seeds, measured.dsgd_iterations) == (
        shipped.condition, shipped.seeds, shipped.dsgd_iterations)
    assert measured.suite == shipped.suite
