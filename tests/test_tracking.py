"""W&B tracking (decobench.runs.tracking): mode resolution, naming, offline runs read back from
their ``.wandb`` file (tests/wandb_records.py), failures, ``--no-wandb``, the report run,
and one run through the real runner."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from decobench.errors import DecobenchError
from decobench.runs.tracking import (
    NullTracker,
    WandbTracker,
    log_report,
    project_name,
    resolve_mode,
    run_identity,
    wandb_row,
    wandb_tracker_factory,
)

sys.path.insert(0, str(Path(__file__).parent))
from wandb_records import read_run  # noqa: E402

CONFIG = {
    "task": "cnn-fmnist", "method": "deco-sgd", "label": "deco-sgd-F25", "condition": None,
    "suite": "smoke", "workers": 4, "seed": 3, "profile": "cpu", "backend": "simulated",
    "target": 0.7, "trace_name": "constant-20mbps-100ms", "metric_name": "accuracy",
    "network": {"kind": "trace", "label": "constant-20mbps-100ms"},
    "method_options": {"deco_interval": 25}, "versions": {"decobench": "0.1.0"},
}
ROW = {"iteration": 1, "sim_time_s": 0.5, "wall_time_s": 0.01, "loss": 2.3, "delta": 0.1,
       "tau": 1, "bits": 1000, "bits_sent": 1000, "bubble_s": 0.0, "compute_s": 0.2,
       "applied_messages": 0, "bandwidth_mbps": 20.0, "latency_ms": 100.0}
SUMMARY = {"task": "cnn-fmnist", "method": "deco-sgd", "label": "deco-sgd-F25",
           "condition": "constant-20mbps-100ms", "suite": "smoke", "workers": 4, "seed": 3,
           "status": "finished", "reached": True, "time_to_target_s": 1.25,
           "iters_to_target": 2, "final_metric": 0.75, "iterations": 3, "sim_time_s": 1.5,
           "bits_sent": 3000, "bubble_fraction": 0.0, "diverged": False}


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """W&B offline, with its caches and settings inside the test's folder."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    for var in ("WANDB_PROJECT", "WANDB_DISABLED", "WANDB_API_KEY", "WANDB_ENTITY"):
        monkeypatch.delenv(var, raising=False)
    for var, sub in (("WANDB_DATA_DIR", "data"), ("WANDB_CACHE_DIR", "cache"),
                     ("WANDB_CONFIG_DIR", "config"), ("WANDB_ARTIFACT_DIR", "artifacts")):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / sub))


@pytest.mark.parametrize(("enabled", "env", "expected"), [
    (True, None, "offline"), (True, "", "offline"), (True, "offline", "offline"),
    (True, "online", "online"), (True, "ONLINE", "online"), (True, "dryrun", "offline"),
    (True, "disabled", "disabled"), (False, None, "disabled"), (False, "online", "disabled"),
])
def test_resolve_mode(monkeypatch, enabled, env, expected):
    monkeypatch.delenv("WANDB_DISABLED", raising=False)
    if env is None:
        monkeypatch.delenv("WANDB_MODE", raising=False)
    else:
        monkeypatch.setenv("WANDB_MODE", env)
    assert resolve_mode(enabled) == expected


def test_resolve_mode_rejects_unknown(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "sometimes")
    with pytest.raises(DecobenchError, match="WANDB_MODE"):
        resolve_mode()


def test_naming(monkeypatch):
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    monkeypatch.delenv("WANDB_TAGS", raising=False)
    ident = run_identity(CONFIG)
    assert ident["project"] == "decobench-smoke"
    assert ident["group"] == "cnn-fmnist|constant-20mbps-100ms|deco-sgd-F25"
    assert ident["name"] == "deco-sgd-F25-constant-20mbps-100ms-s3"
    assert ident["job_type"] == "train"
    assert ident["tags"] == ["task:cnn-fmnist", "method:deco-sgd", "label:deco-sgd-F25",
                             "condition:constant-20mbps-100ms", "workers:4", "seed:3",
                             "profile:cpu", "backend:simulated", "suite:smoke"]
    bare = run_identity({**CONFIG, "label": None, "suite": None, "trace_name": None,
                         "condition": None, "network": {"label": "S/(aT)=2, b/T=1"}})
    assert bare["project"] == "decobench" and bare["name"] == "deco-sgd-S/(aT)=2, b/T=1-s3"
    assert project_name(None) == "decobench"
    monkeypatch.setenv("WANDB_TAGS", "base, pr-12,")        # the side of a comparison
    assert run_identity(CONFIG)["tags"][:3] == ["base", "pr-12", "task:cnn-fmnist"]
    monkeypatch.setenv("WANDB_PROJECT", "mine")
    assert project_name("smoke") == "mine"


def test_row_mapping():
    row = wandb_row({**ROW, "metric": 0.5, "metric_name": "perplexity", "metric_time_s": 0.7,
                     "plan_phi": 1.5, "accordion_critical": True, "target_reached": None})
    assert row["sim_time_s"] == 0.5 and row["train/loss"] == 2.3
    assert row["eval/perplexity"] == 0.5 and row["eval/metric_time_s"] == 0.7
    assert row["comm/plan_phi"] == 1.5 and row["comm/accordion_critical"] is True
    assert row["net/latency_ms"] == 100.0 and row["comm/bits_sent"] == 1000
    assert "metric_name" not in row and "eval/target_reached" not in row
    assert all(key == "sim_time_s" or key.split("/")[0] in ("train", "eval", "comm", "net")
               for key in row)


def test_disabled_creates_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert isinstance(wandb_tracker_factory(enabled=False)(CONFIG, tmp_path), NullTracker)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    tracker = wandb_tracker_factory()(CONFIG, tmp_path)
    assert isinstance(tracker, NullTracker)
    tracker.log(ROW)
    tracker.finish(SUMMARY)
    log_report(tmp_path, project="decobench-smoke", tables={"t": [{"a": 1}]}, figures=[],
               report_files=[])
    monkeypatch.setenv("WANDB_MODE", "offline")
    log_report(tmp_path, project="decobench-smoke", tables={"t": [{"a": 1}]}, figures=[],
               report_files=[], enabled=False)
    assert list(tmp_path.iterdir()) == []


def test_init_failure_is_one_line(offline, monkeypatch, tmp_path):
    import wandb

    def refuse(**kwargs):
        raise wandb.errors.UsageError("No API key configured. Use `wandb login` to log in.")

    monkeypatch.setattr(wandb, "init", refuse)
    with pytest.raises(DecobenchError) as info:
        WandbTracker(CONFIG, tmp_path, mode="online")
    message = str(info.value)
    assert "\n" not in message and "No API key" in message
    assert "wandb login" in message and "WANDB_MODE=offline" in message
    assert "--no-wandb" in message


def test_offline_run_is_logged(offline, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    tracker = wandb_tracker_factory()(CONFIG, run_dir)
    assert isinstance(tracker, WandbTracker)
    tracker.log(ROW)
    tracker.log({**ROW, "iteration": 2, "sim_time_s": 1.0, "plan_phi": 1.5, "metric": 0.75,
                 "metric_name": "accuracy", "metric_time_s": 1.25, "target_reached": True})
    tracker.log({"iteration": 3, "loss": math.nan, "diverged": True, "sim_time_s": 1.5,
                 "wall_time_s": 0.03})
    tracker.log({**ROW, "iteration": 4, "sim_time_s": 2.0, "loss": math.inf})
    tracker.finish(SUMMARY)
    tracker.log(ROW)  # after finish: ignored
    run_dir.rename(tmp_path / "renamed")  # the sweep renames finished run folders

    rec = read_run(tmp_path / "renamed" / "wandb")
    assert rec.project == "decobench-smoke" and rec.job_type == "train"
    # wandb.json names the run for `decobench compare`'s links
    record = json.loads((tmp_path / "renamed" / "wandb.json").read_text())
    assert record["project"] == "decobench-smoke" and record["mode"] == "offline"
    assert record["id"] and (tmp_path / "renamed" / "wandb" / "latest-run").resolve(
        ).name.endswith(record["id"]) and record["url"] is None
    assert rec.group == "cnn-fmnist|constant-20mbps-100ms|deco-sgd-F25"
    assert rec.name == "deco-sgd-F25-constant-20mbps-100ms-s3"
    assert "method:deco-sgd" in rec.tags and "seed:3" in rec.tags
    config = rec.config()
    assert config["method_options"] == {"deco_interval": 25} and config["workers"] == 4
    assert config["network"]["kind"] == "trace"

    history = rec.history()
    assert len(history) == 4
    assert [h["train/iteration"] for h in history] == [1, 2, 3, 4]
    assert [h["sim_time_s"] for h in history] == [0.5, 1.0, 1.5, 2.0]
    assert history[0]["train/loss"] == 2.3 and history[0]["net/bandwidth_mbps"] == 20.0
    assert history[0]["comm/delta"] == 0.1 and history[0]["train/compute_s"] == 0.2
    assert history[1]["eval/accuracy"] == 0.75 and history[1]["eval/metric_time_s"] == 1.25
    assert history[1]["comm/plan_phi"] == 1.5 and history[1]["eval/target_reached"] is True
    assert math.isnan(history[2]["train/loss"]) and history[2]["train/diverged"] is True
    assert history[3]["train/loss"] == math.inf
    assert not any(key.startswith(("loss", "delta", "metric")) for h in history for key in h)

    metrics = rec.metrics()
    assert "sim_time_s" in metrics
    for namespace in ("train", "eval", "comm", "net"):
        assert metrics[f"{namespace}/*"]["step_metric"] == "sim_time_s"

    summary = rec.summary()
    assert summary["time_to_target_s"] == 1.25 and summary["reached"] is True
    assert summary["status"] == "finished" and summary["final_metric"] == 0.75
    assert rec.exit_code == 0


def test_failed_run(offline, tmp_path):
    tracker = wandb_tracker_factory()(CONFIG, tmp_path)
    tracker.log(ROW)
    tracker.fail(KeyboardInterrupt())
    tracker.finish(SUMMARY)  # after fail: ignored
    rec = read_run(tmp_path / "wandb")
    assert rec.exit_code == 1
    summary = rec.summary()
    assert summary["status"] == "failed" and summary["error"] == "KeyboardInterrupt"
    assert "time_to_target_s" not in summary and "reached" not in summary


def test_report_run(offline, tmp_path):
    from PIL import Image

    results = tmp_path / "results"
    (results / "figures").mkdir(parents=True)
    figure = results / "figures" / "accuracy_vs_time.png"
    Image.new("RGB", (8, 8), "white").save(figure)
    pdf = results / "figures" / "accuracy_vs_time.pdf"
    pdf.write_bytes(b"%PDF-1.4\n")
    report = results / "report.md"
    report.write_text("# report\n")
    tables = {"speedup": [{"task": "cnn-fmnist", "method": "deco-sgd", "speedup": 2.5},
                          {"task": "cnn-fmnist", "method": "d-sgd", "speedup": None,
                           "note": "not reached"}],
              "summary": [{"method": "d-sgd", "time_to_target_s": math.inf}]}
    log_report(results, project="decobench-smoke", tables=tables, figures=[figure, pdf],
               report_files=[report])
    rec = read_run(results / "wandb")
    assert rec.project == "decobench-smoke" and rec.job_type == "report"
    assert rec.name == "report" and rec.exit_code == 0
    (row,) = rec.history()
    assert row["tables/speedup"]["_type"] == "table-file"
    assert row["tables/summary"]["_type"] == "table-file"
    assert row["figures/accuracy_vs_time"]["_type"] == "image-file"
    assert "figures/accuracy_vs_time.pdf" not in row  # not an image: artifact only
    table = rec.media_json(row["tables/speedup"])
    assert table["columns"] == ["task", "method", "speedup", "note"]
    assert table["data"][0] == ["cnn-fmnist", "deco-sgd", 2.5, None]
    (artifact,) = [a for a in rec.artifacts() if a.type == "report"]
    assert artifact.name == "report"
    names = {entry.path for entry in artifact.manifest.contents}
    assert {"report.md", "figures/accuracy_vs_time.png", "figures/accuracy_vs_time.pdf",
            "tables/speedup.csv", "tables/summary.csv"} <= names


def test_runner_end_to_end(offline, tmp_path, fmnist_root):
    from decobench.runs.config import RunConfig
    from decobench.runs.runner import execute, prepare

    run = prepare(RunConfig(task="cnn-fmnist", method="deco-sgd", workers=2,
                            trace="constant-20mbps-100ms", max_iters=20, eval_every=10,
                            data_root=str(fmnist_root), out=str(tmp_path / "run"),
                            profile="cpu", batch_size=16))
    summary = execute(run, show_progress=False, tracker_factory=wandb_tracker_factory())
    rec = read_run(tmp_path / "run" / "wandb")
    history = rec.history()
    assert len([h for h in history if "train/loss" in h]) == 20
    evals = [h for h in history if "eval/accuracy" in h]
    assert [h["train/iteration"] for h in evals] == [10, 20]
    assert rec.group == "cnn-fmnist|constant-20mbps-100ms|deco-sgd"
    assert rec.name == "deco-sgd-constant-20mbps-100ms-s0" and rec.project == "decobench"
    assert rec.config()["max_iters"] == 20
    assert rec.summary()["iterations"] == summary["iterations"] == 20
    assert "time_to_target_s" in rec.summary() and rec.exit_code == 0
