"""The report from a real (tiny) run written by `decobench run`: deco-sgd, read back through
summary.json, config.yaml, metrics.jsonl and the bundled trace it names. One run only: the
contract between the runner and the report is what is checked here; the statistics are
checked on synthetic runs (test_report_build.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from decobench.cli.main import main
from decobench.reports.build import write_report


@pytest.fixture(scope="module")
def results(fmnist_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("results")
    code = main(["run", "--task", "cnn-fmnist", "--method", "deco-sgd", "--workers", "2",
                 "--trace", "constant-20mbps-100ms", "--target", "0.5", "--max-iters", "6",
                 "--eval-every", "3", "--data-root", str(fmnist_root), "--out",
                 str(root / "runs" / "deco-sgd"), "--no-progress"])
    assert code == 0
    return root


def test_report_of_real_runs(results: Path) -> None:
    out = write_report(results)
    (row,) = out.rows["time_to_target"]
    assert (row["label"], row["condition"], row["workers"], row["seeds run"]) == (
        "deco-sgd", "constant-20mbps-100ms", "2", "1")
    (run,) = out.rows["runs"]
    assert run["run dir"] == "runs/deco-sgd" and run["iterations"] == "6"
    assert "adaptivity__cnn-fmnist__constant-20mbps-100ms__w2" in out.figures
    assert "tta__cnn-fmnist__constant-20mbps-100ms__w2" in out.figures
    text = out.markdown.read_text()
    assert "Bandwidth from trace constant-20mbps-100ms" in text
    assert "- times: simulated seconds" in text and "- backend: simulated" in text
    assert out.html.read_text().count("data:image/png;base64,") == len(out.figures)
