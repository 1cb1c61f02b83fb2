"""The CI smoke benchmark (issue 5, item 7): a tiny end-to-end sweep (2 methods, 2 seeds, up
to 150 iterations, two worker processes) with W&B logging offline, then the report, whose
tables must agree with the run summaries."""

import csv
import json
from pathlib import Path
from statistics import median

import pytest
import yaml

from decobench.cli.main import main
from decobench.runs.rundir import read_summary

SUITE = {
    "name": "ci-smoke",
    "description": "D-SGD and DeCo-SGD, 2 seeds, CNN@FashionMNIST mini on the WAN trace",
    "conditions": {"wan": {"trace": "wan-200ms-lowbw-varying"}},
    "defaults": {"eval_every": 20},
    "experiments": [{"name": "smoke", "tasks": ["cnn-fmnist"], "conditions": ["wan"],
                     "methods": ["d-sgd", "deco-sgd"], "workers": [2], "seeds": [0, 1],
                     "target": 0.6, "max_iters": 150}],
}


@pytest.fixture(scope="module")
def swept(tmp_path_factory, fmnist_root) -> Path:
    mp = pytest.MonkeyPatch()
    mp.setenv("WANDB_MODE", "offline")
    tmp = tmp_path_factory.mktemp("ci-smoke")
    suite = tmp / "ci-smoke.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    out = tmp / "results"
    try:
        assert main(["sweep", str(suite), "--out", str(out), "--jobs", "2", "--no-progress",
                     "--data-root", f"cnn-fmnist={fmnist_root}"]) == 0
        assert main(["report", str(out), "--no-wandb"]) == 0
    finally:
        mp.undo()
    return out


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_run_finished_and_is_in_the_run_table(swept):
    summaries = [read_summary(p) for p in sorted((swept / "runs").iterdir())]
    assert len(summaries) == 4
    assert {(s["label"], s["seed"]) for s in summaries} == {
        (m, seed) for m in ("d-sgd", "deco-sgd") for seed in (0, 1)}
    rows = _csv(swept / "tables" / "runs.csv")
    assert sorted((r["label"], r["seed"], r["status_code"]) for r in rows) == sorted(
        (s["label"], str(s["seed"]), s["status"]) for s in summaries)


def test_speedup_column_matches_the_summaries(swept):
    summaries = [read_summary(p) for p in sorted((swept / "runs").iterdir())]
    assert all(s["reached"] for s in summaries), "both methods reach 0.6 within 150 iterations"
    ttt = {m: median(s["time_to_target_s"] for s in summaries if s["label"] == m)
           for m in ("d-sgd", "deco-sgd")}
    table = {r["label"]: r for r in _csv(swept / "tables" / "time_to_target.csv")}
    assert set(table) == {"d-sgd", "deco-sgd"}
    for label in table:
        assert float(table[label]["median_ttt_s"]) == pytest.approx(ttt[label])
        assert table[label]["seeds run"] == table[label]["seeds reached"] == "2"
    expected = ttt["d-sgd"] / ttt["deco-sgd"]
    assert float(table["deco-sgd"]["speedup_over_d-sgd"]) == pytest.approx(expected)
    assert table["deco-sgd"]["speed-up over d-sgd"] == f"{expected:.2f}x"
    assert expected > 1.5                 # DeCo-SGD is faster on this WAN trace (2.4x)
    report = (swept / "report.md").read_text()
    assert f"| {expected:.2f}x |" in report


def test_figures_and_html_are_written(swept):
    for name in ("tta__cnn-fmnist__wan__w2", "adaptivity__cnn-fmnist__wan__w2"):
        for ext in ("png", "svg"):
            assert (swept / "figures" / f"{name}.{ext}").stat().st_size > 1000
        assert f"figures/{name}.png" in (swept / "report.md").read_text()
    html = (swept / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 2
    assert (swept / "tables" / "time_to_target.tex").read_text().count(r"\toprule") == 1


def test_runs_were_logged_to_wandb_offline(swept):
    from wandb_records import read_run

    run_dir = next(p for p in sorted((swept / "runs").iterdir()) if "deco-sgd__n2__s1" in p.name)
    run = read_run(run_dir / "wandb")
    assert run.project == "decobench-ci-smoke" and run.job_type == "train"
    assert run.group == "cnn-fmnist|wan|deco-sgd" and run.name == "deco-sgd-wan-s1"
    assert run.summary()["time_to_target_s"] == pytest.approx(
        read_summary(run_dir)["time_to_target_s"])
    assert json.loads((swept / "manifest.json").read_text())["suite"] == "ci-smoke"
