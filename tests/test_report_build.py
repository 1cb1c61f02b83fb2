"""The report from synthetic run directories: Table 1 with censoring, the manifest rule,
figures, the theory section and byte-for-byte determinism (reports/build.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from decobench.errors import DecobenchError
from decobench.reports.build import write_report
from decobench.reports.runs import load_runs
from decobench.reports.theory import analyse

EVAL_EVERY = 10


def write_run(root: Path, name: str, *, method: str = "d-sgd", label: str | None = None,
              ttt: float | None = None, sim: float = 100.0, iterations: int = 40,
              seed: int = 0, workers: int = 4, condition: str = "wan", task: str = "cnn-fmnist",
              diverged_at: int | None = None, method_options: dict | None = None,
              target: float | None = 0.5, first_plan: tuple[float, int] | None = None) -> Path:
    """A run that reaches ``target`` at its last iteration at time ``ttt`` (None: it runs to
    ``sim`` seconds without reaching it, or diverges at ``diverged_at``)."""
    path = root / name
    path.mkdir(parents=True)
    end = ttt if ttt is not None else sim
    dt = end / iterations
    rows = []
    for k in range(1, iterations + 1):
        row = {"iteration": k, "sim_time_s": k * dt, "wall_time_s": 0.01 * k, "loss": 1.0,
               "delta": 0.01 if k == 1 else 0.2, "tau": 0 if k == 1 else 2,
               "bits_sent": 1000 * k, "bubble_s": 0.1 * k, "bandwidth_mbps": 20.0,
               "latency_ms": 100.0}
        if k == 2 and first_plan:
            row |= {"delta": first_plan[0], "tau": first_plan[1], "plan_phi": 7.0}
        if k % EVAL_EVERY == 0:
            share = k / iterations
            goal = 0.5 if target is None else target      # target None: a run without one
            metric = goal * share if ttt is not None else 0.9 * goal * share
            row |= {"metric": metric, "metric_name": "accuracy", "metric_time_s": k * dt + 0.5}
            if ttt is not None and k == iterations:
                row |= {"metric_time_s": ttt, "target_reached": True}
        rows.append(row)
    status = "finished" if ttt is not None else "budget_exhausted"
    if diverged_at is not None:
        status = "diverged"
        rows = rows[:diverged_at - 1] + [{"iteration": diverged_at, "loss": "inf",
                                          "diverged": True, "sim_time_s": sim}]
    summary = {
        "task": task, "method": method, "label": label or method, "condition": condition,
        "trace": "wan-trace", "trace_path": "/nonexistent/wan-trace.csv", "workers": workers,
        "seed": seed, "target": target, "metric_name": "accuracy", "reached": ttt is not None,
        "time_to_target_s": ttt, "iters_to_target": iterations if ttt is not None else None,
        "final_metric": rows[-1].get("metric", 0.3), "iterations": len(rows),
        "sim_time_s": end, "bits_sent": 1000 * len(rows), "diverged": status == "diverged",
        "diverged_at_iteration": diverged_at, "backend": "simulated", "status": status,
        "eval_every": EVAL_EVERY, "profile": "cpu", "bubble_fraction": 0.25,
        "time_basis": "simulated", "suite": None}
    config = {"task": task, "method": method, "label": label or method, "seed": seed,
              "workers": workers, "eval_every": EVAL_EVERY, "target": target,
              "method_options": method_options or {}, "trace_loop": False,
              "versions": {"decobench": "0.1.0", "python": "3.11.7", "torch": "2.2.0",
                           "torchvision": "0.17.0", "git_commit": "abc123", "platform": "x",
                           "cpu_capability": "AVX2"}}
    (path / "summary.json").write_text(json.dumps(summary))
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def three_labels(root: Path) -> Path:
    """3 labels x 3 seeds: d-sgd with one seed out of budget, cocktail-sgd not reached on two
    seeds (a censored median), deco-sgd with one diverged seed."""
    runs = root / "runs"
    for seed, ttt in enumerate((320.0, None, 400.0)):
        write_run(runs, f"d-sgd-{seed}", seed=seed, ttt=ttt, sim=500.0)
    for seed, (ttt, sim) in enumerate(((100.0, 100.0), (None, 240.0), (None, 260.0))):
        write_run(runs, f"cocktail-{seed}", method="cocktail-sgd", seed=seed, ttt=ttt, sim=sim,
                  first_plan=(0.05, 1))
    write_run(runs, "deco-0", method="deco-sgd", seed=0, ttt=80.0, first_plan=(0.1, 2))
    write_run(runs, "deco-1", method="deco-sgd", seed=1, ttt=100.0, first_plan=(0.1, 2))
    write_run(runs, "deco-2", method="deco-sgd", seed=2, sim=50.0, diverged_at=30)
    # a trace file in the deco run's folder: the adaptivity figure reads it
    (runs / "deco-0" / "trace.csv").write_text(
        "time_s,bandwidth_mbps,latency_ms\n0,20,100\n30,5,100\n60,40,100\n")
    return root


def _row(table_rows, label):
    return next(r for r in table_rows if r["label"] == label)


def test_time_to_target_table(tmp_path):
    out = write_report(three_labels(tmp_path))
    rows = out.rows["time_to_target"]
    d, c, deco = (_row(rows, name) for name in ("d-sgd", "cocktail-sgd", "deco-sgd"))
    assert (d["seeds run"], d["seeds reached"]) == ("3", "2")
    assert (d["median TTT (s)"], d["range (s)"], d["olympic mean (s)"]) == (
        "400.00", "[320.00, not reached]", "400.00")
    assert d["not reached"] == "seed 1: budget_exhausted (ran 500.00 s)"
    assert (c["median TTT (s)"], c["olympic mean (s)"], c["range (s)"]) == (
        "> 240.00", "> 240.00", "[100.00, not reached]")
    assert c["median iterations"] == "> 40"
    assert (deco["median TTT (s)"], deco["range (s)"], deco["median iterations"]) == (
        "100.00", "[80.00, not reached]", "40")
    assert deco["not reached"] == "seed 2: diverged at iteration 30 (ran 50.00 s)"
    # speed-ups: 400 / 100; the cocktail median is censored: >= 240 / 100; a censored
    # method median gives no speed-up
    assert deco["speed-up over d-sgd"] == "4.00x"
    assert deco["speed-up over cocktail-sgd"] == ">= 2.40x"
    assert d["speed-up over cocktail-sgd"] == ">= 0.60x †"       # a bound below 1x: footnoted
    assert "† A lower bound below 1x: the reference never reached" in \
        out.markdown.read_text()
    assert c["speed-up over d-sgd"] == "n/a (not reached)"
    assert (deco["speedup_over_cocktail-sgd"], deco["speedup_over_cocktail-sgd_kind"]) == (
        2.4, "lower_bound")
    runs = {r["run dir"]: r for r in out.rows["runs"]}
    assert runs["runs/deco-2"]["status"] == "diverged at iteration 30"
    assert runs["runs/d-sgd-1"]["status"] == "budget_exhausted"
    assert runs["runs/d-sgd-1"]["TTT (s)"] == "> 500.00 (not reached)"
    text = out.markdown.read_text()
    assert "diverged at iteration 30" in text and "| >= 2.40x |" in text
    assert "Skipped: no static DD-EF-SGD grid in these runs" in text
    assert "Skipped: no label was run at two or more worker counts" in text
    csv_text = out.csv["time_to_target"].read_text()
    assert csv_text.splitlines()[0].startswith("task,condition,workers,label,data,target")
    assert d["data"] == "not recorded"                  # runs written before data_kind
    tex = out.tex["time_to_target"].read_text()
    assert "\\toprule" in tex and "\\textgreater{} 240.00" in tex and "$\\geq$ 2.40x" in tex
    assert "cocktail-sgd" in tex and "d-sgd" in tex


def test_figures_written_and_embedded(tmp_path):
    out = write_report(three_labels(tmp_path), tmp_path / "report")
    names = sorted(out.figures)
    assert names == ["adaptivity__cnn-fmnist__wan__w4", "tta__cnn-fmnist__wan__w4"]
    for png, svg in out.figures.values():
        assert png.read_bytes().startswith(b"\x89PNG") and svg.stat().st_size > 1000
    page = out.html.read_text()
    assert page.count("data:image/png;base64,") == 2 and "<script" not in page
    assert "<table>" in page
    md = out.markdown.read_text()
    assert "](figures/tta__cnn-fmnist__wan__w4.png)" in md
    assert "Bandwidth from runs/deco-0/trace.csv" in md


def test_report_is_deterministic(tmp_path):
    root = three_labels(tmp_path / "results")
    first = write_report(root, tmp_path / "a")
    second = write_report(root, tmp_path / "b")
    rel = [p.relative_to(tmp_path / "a") for p in first.files]
    assert rel == [p.relative_to(tmp_path / "b") for p in second.files]
    for a, b in zip(first.files, second.files, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_manifest_missing_cell_fails_loudly(tmp_path):
    root = three_labels(tmp_path)
    cells = [{"id": "aaa111", "run_dir": "runs/deco-0", "label": "deco-sgd", "seed": 0},
             {"id": "bbb222", "run_dir": "runs/deco-9", "label": "deco-sgd", "seed": 9}]
    (root / "manifest.json").write_text(json.dumps({"suite": "smoke", "cells": cells}))
    with pytest.raises(DecobenchError) as info:
        write_report(root)
    message = str(info.value)
    assert "runs/deco-9" in message and "bbb222" in message and "runs/deco-0 " not in message
    assert f"decobench sweep {root / 'suite.yaml'} --out {root}" in message
    assert "\n" not in message
    (root / "manifest.json").write_text(json.dumps({"suite": "smoke", "cells": cells[:1]}))
    assert [r.rel for r in load_runs(root).runs] == ["runs/deco-0"]


def test_manifest_names_ten_then_counts(tmp_path):
    cells = [{"id": f"c{i}", "run_dir": f"runs/missing-{i:02d}"} for i in range(13)]
    (tmp_path / "manifest.json").write_text(json.dumps({"suite": "big", "cells": cells}))
    with pytest.raises(DecobenchError, match="13 of 13 cells") as info:
        load_runs(tmp_path)
    assert "missing-09" in str(info.value) and "missing-10" not in str(info.value)
    assert "and 3 more" in str(info.value)


def test_no_runs_and_staging_folders(tmp_path):
    with pytest.raises(DecobenchError, match="no finished runs"):
        load_runs(tmp_path)
    write_run(tmp_path / "runs" / ".staging", "x", ttt=10.0)
    with pytest.raises(DecobenchError, match="no finished runs"):
        load_runs(tmp_path)


def grid(root: Path) -> Path:
    """A 2x2 static grid over delta in {0.1, 0.5}, tau in {0, 2}, plus one deco-sgd run.

    Phi_paper: (0.5, 0) = 1, (0.5, 2) = 2 + 0.5/(0.5 * 0.25) = 6, (0.1, 0) = 0.9/0.1 = 9,
    (0.1, 2) = 2 + 0.9/(0.1 * 0.81) = 13.1. Measured iterations: 20, 30, not reached, 40,
    ranks 1, 2, 4, 3 against Phi's 1, 2, 3, 4: rho = 1 - 6 * 2 / (4 * 15) = 0.8.
    Times: the oracle is (0.5, 2) at 50 s.
    """
    runs = root / "runs"
    cells = {(0.5, 0): (20, 80.0), (0.5, 2): (30, 50.0), (0.1, 0): (None, 300.0),
             (0.1, 2): (40, 90.0)}
    for (delta, tau), (iters, time) in cells.items():
        write_run(runs, f"dd-{delta}-{tau}", method="dd-ef-sgd", label=f"dd-{delta}-{tau}",
                  method_options={"delta": delta, "tau": tau},
                  ttt=time if iters else None, sim=time, iterations=iters or 60)
    write_run(runs, "deco", method="deco-sgd", ttt=75.0, first_plan=(0.25, 3),
              method_options={"phi": "paper", "deco_interval": 100})
    return root


def test_theory_grid_spearman_and_oracle(tmp_path):
    root = grid(tmp_path)
    (group,) = analyse(load_runs(root).runs)
    assert group.rho["paper"] == pytest.approx(0.8)
    assert (group.oracle.delta, group.oracle.tau) == (0.5, 2)
    (deco,) = group.compared
    assert deco.first_plan == (0.25, 3) and deco.ratio.value == pytest.approx(1.5)
    out = write_report(root)
    assert out.rows["theory_rank"][0]["Spearman ρ (Φ, median iterations)"] == "0.800"
    oracle = out.rows["oracle"]
    assert (oracle[0]["δ"], oracle[0]["τ"], oracle[0]["median TTT (s)"]) == ("0.5", "2", "50.00")
    assert (oracle[1]["TTT / oracle TTT"], oracle[1]["δ"], oracle[1]["τ"]) == ("1.50x", "0.25", "3")
    missed = next(r for r in out.rows["theory_grid"] if r["δ"] == "0.1" and r["τ"] == "0")
    assert missed["median iterations"] == "> 60" and missed["Φ (paper)"] == "9"
    assert "theory__cnn-fmnist__wan__w4" in out.figures


def test_scaling_table(tmp_path):
    runs = tmp_path / "runs"
    for workers, (d_time, deco_time) in {2: (200.0, 100.0), 8: (400.0, None)}.items():
        write_run(runs, f"d-{workers}", workers=workers, ttt=d_time)
        write_run(runs, f"deco-{workers}", method="deco-sgd", workers=workers, ttt=deco_time,
                  sim=300.0)
    out = write_report(tmp_path)
    rows = [r for r in out.rows["scaling"] if r["label"] == "deco-sgd"]
    assert [(r["workers"], r["speed-up over d-sgd"]) for r in rows] == [
        ("2", "2.00x"), ("8", "n/a (not reached)")]
    assert "scaling__cnn-fmnist__wan" in out.figures


def test_header_lists_disagreeing_versions(tmp_path):
    write_run(tmp_path, "a", ttt=10.0)
    write_run(tmp_path, "b", ttt=20.0, seed=1)
    config = yaml.safe_load((tmp_path / "b" / "config.yaml").read_text())
    config["versions"]["git_commit"] = "def456"
    config["versions"]["cpu_capability"] = "AVX512"
    (tmp_path / "b" / "config.yaml").write_text(yaml.safe_dump(config))
    text = write_report(tmp_path).markdown.read_text()
    assert "- git commit: by run: abc123 (1 run); def456 (1 run)" in text
    # the vector unit moves a CPU run's rounding: a reader comparing runs must see it
    assert "- cpu capability: by run: AVX2 (1 run); AVX512 (1 run) (the vector unit" in text
    assert "disagree" not in text                    # different values are not an error
    assert "- torch: 2.2.0\n" in text and "seeds found here are 0, 1." in text


def test_latex_escapes():
    from decobench.reports.render import latex_escape

    assert latex_escape("a_b & 50% >= 2 [x]") == (
        r"a\_b \& 50\% $\geq$ 2 {[}x{]}")
    assert latex_escape("δ τ > 1") == r"$\delta$ $\tau$ \textgreater{} 1"


def test_runs_without_a_target_get_their_final_metric_not_empty_target_columns(tmp_path):
    """No target: no time-to-target table and no target columns, never 'None' cells; a mix
    keeps the targeted runs' table and lists the others by their final metric."""
    for seed in (0, 1):
        write_run(tmp_path / "none", f"d-{seed}", seed=seed, target=None, sim=80.0 + seed)
        write_run(tmp_path / "none", f"deco-{seed}", method="deco-sgd", seed=seed, target=None)
    out = write_report(tmp_path / "none")
    text = out.markdown.read_text()
    assert "time_to_target" not in out.rows and "final_metric" in out.rows
    section = text.split("## Time to target")[1].split("## Time to accuracy")[0]
    assert "None" not in text and "not reached" not in section
    assert "No run has a target (--target)" in text
    d = _row(out.rows["final_metric"], "d-sgd")
    assert (d["seeds run"], d["median time (s)"], d["median iterations"]) == ("2", "80.50", "40")
    runs_columns = out.csv["runs"].read_text().splitlines()[0].split(",")
    assert "reached" not in runs_columns and "TTT (s)" not in runs_columns

    write_run(tmp_path / "mixed", "d", ttt=50.0)
    write_run(tmp_path / "mixed", "free", method="deco-sgd", target=None)
    mixed = write_report(tmp_path / "mixed")
    assert [r["label"] for r in mixed.rows["time_to_target"]] == ["d-sgd"]
    assert [r["label"] for r in mixed.rows["final_metric"]] == ["deco-sgd"]
    runs = {r["run dir"]: r for r in mixed.rows["runs"]}
    assert runs["free"]["TTT (s)"] == runs["free"]["reached"] == "no target"


def test_a_summary_without_the_run_fields_is_named(tmp_path):
    path = write_run(tmp_path, "broken")
    (path / "summary.json").write_text("{}")
    with pytest.raises(DecobenchError, match=r"broken/summary.json is not a run's summary: it "
                                             r"lacks task, method"):
        write_report(tmp_path)


def test_data_column_and_where_the_time_goes(tmp_path):
    """Each Table-1 row and every run name their data (full / slice / stand-in); the time
    section sums the runs' recorded wall times per (task, label) with trained and re-timed
    counts."""
    runs = tmp_path / "runs"
    for seed, wall in enumerate((30.0, 50.0)):
        path = write_run(runs, f"d-sgd-{seed}", seed=seed, ttt=100.0)
        summary = json.loads((path / "summary.json").read_text())
        summary["wall_time_s"] = wall
        (path / "summary.json").write_text(json.dumps(summary))
        config = yaml.safe_load((path / "config.yaml").read_text())
        config["data_kind"] = "slice"
        (path / "config.yaml").write_text(yaml.safe_dump(config))
    path = write_run(runs, "deco-0", method="deco-sgd", ttt=50.0)
    summary = json.loads((path / "summary.json").read_text())
    summary |= {"wall_time_s": 20.0, "retimed_from": "runs/elsewhere"}
    (path / "summary.json").write_text(json.dumps(summary))
    config = yaml.safe_load((path / "config.yaml").read_text())
    config["data_source"] = "x; STAND-IN: built from CIFAR-10"
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    out = write_report(tmp_path)
    assert _row(out.rows["time_to_target"], "d-sgd")["data"] == "slice"
    assert _row(out.rows["time_to_target"], "deco-sgd")["data"] == "stand-in"
    assert {r["run dir"]: r["data"] for r in out.rows["runs"]}["runs/deco-0"] == "stand-in"
    time = {r["label"]: r for r in out.rows["time"]}
    assert (time["d-sgd"]["runs"], time["d-sgd"]["trained"], time["d-sgd"]["re-timed"]) == (
        "2", "2", "0")
    assert time["d-sgd"]["wall time (s)"] == "80" and time["d-sgd"]["share"] == "80.0%"
    assert (time["deco-sgd"]["trained"], time["deco-sgd"]["re-timed"]) == ("0", "1")
    assert "## Where the time goes" in out.markdown.read_text()
