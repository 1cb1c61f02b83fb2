"""End-to-end runs on the offline Fashion-MNIST slice: run-directory contract, determinism,
divergence and budgets, and clear errors for bad input before training starts."""

import json
from pathlib import Path

import pytest
import yaml

from decobench.cli.main import main
from decobench.methods import method_specs
from decobench.runs.rundir import read_metrics, read_summary

SMALL = ["--task", "cnn-fmnist", "--workers", "2", "--batch-size", "16", "--max-iters", "12",
         "--eval-every", "6", "--no-progress", "--trace", "wan-200ms-lowbw-varying"]


def _run(tmp_path: Path, fmnist_root: Path, name: str, *extra: str) -> Path:
    out = tmp_path / name
    assert main(["run", *SMALL, "--data-root", str(fmnist_root), "--out", str(out), *extra]) == 0
    return out


@pytest.mark.parametrize("method", sorted(method_specs()))
def test_run_directory_contract(tmp_path, fmnist_root, method):
    out = _run(tmp_path, fmnist_root, method, "--method", method, "--deco-interval", "3"
               ) if method == "deco-sgd" else _run(tmp_path, fmnist_root, method, "--method",
                                                   method)
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "metrics.jsonl",
                                                     "summary.json"]
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["method"] == method and config["versions"]["torch"]
    assert config["compute_time_s"] == 0.2 and config["eval_every"] == 6
    rows = read_metrics(out)
    assert [r["iteration"] for r in rows] == list(range(1, 13))
    for key in ("iteration", "sim_time_s", "wall_time_s", "loss", "delta", "tau", "bits_sent",
                "bubble_s"):
        assert all(key in r for r in rows)
    evals = [r for r in rows if "metric" in r]
    assert [r["iteration"] for r in evals] == [6, 12]
    assert all(r["metric_name"] == "accuracy" for r in evals)
    assert all(a["sim_time_s"] < b["sim_time_s"] for a, b in zip(rows, rows[1:], strict=False))
    summary = read_summary(out)
    assert summary["status"] == "finished" and summary["iterations"] == 12
    assert summary["bits_sent"] == rows[-1]["bits_sent"]
    # the run's time is when its last model exists: the last evaluation's time, which is
    # after the last compute when that model waited for its updates
    assert summary["sim_time_s"] == rows[-1]["metric_time_s"] >= rows[-1]["sim_time_s"]
    assert summary["backend"] == "simulated" and summary["diverged"] is False
    if method == "d-sgd":
        assert {r["delta"] for r in rows} == {1.0} and {r["tau"] for r in rows} == {0}
        # D-SGD: every iteration is T + 32d/a + b at least (the trace is ≤ 60 Mbit/s, b ≈ 200 ms)
        assert summary["sim_time_s"] > 12 * (0.2 + 32 * summary["parameters"] / 60e6 + 0.18)
    if method == "deco-sgd":
        assert any("plan_bandwidth_mbps" in r for r in rows)


def _metrics_without_wall_time(path):
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        r.pop("wall_time_s", None)
    return json.dumps(rows)


@pytest.mark.parametrize("method", sorted(set(method_specs()) - {"d-sgd", "dd-ef-sgd"}))
def test_same_seed_gives_byte_identical_metrics(tmp_path, fmnist_root, method):
    # 6 iterations (the last flags win): DeCo-SGD re-plans at 4, and both evaluations at 3
    # and 6 are compared; another seed's first 3 losses differ
    flags = ["--method", method, *(["--deco-interval", "4"] if method == "deco-sgd" else []),
             "--max-iters", "6", "--eval-every", "3"]
    a = _run(tmp_path, fmnist_root, "a", *flags)
    b = _run(tmp_path, fmnist_root, "b", *flags)
    assert len(read_metrics(a)) == 6
    assert _metrics_without_wall_time(a) == _metrics_without_wall_time(b)
    c = _run(tmp_path, fmnist_root, "c", *flags, "--seed", "1", "--max-iters", "3")
    assert [r["loss"] for r in read_metrics(a)[:3]] != [r["loss"] for r in read_metrics(c)]


def test_target_stops_run_and_is_timed_when_model_exists(tmp_path, fmnist_root):
    out = _run(tmp_path, fmnist_root, "t", "--method", "d-sgd", "--target", "0.05")
    summary = read_summary(out)
    assert summary["reached"] and summary["status"] == "finished"
    assert summary["iters_to_target"] == 6 and summary["iterations"] == 6
    row = read_metrics(out)[-1]
    # x_{k+1} exists once the all-reduce of iteration k arrived: after end_k
    assert summary["time_to_target_s"] == row["metric_time_s"] > row["sim_time_s"]


def test_budget_exhausted(tmp_path, fmnist_root):
    out = _run(tmp_path, fmnist_root, "b", "--method", "d-sgd", "--target", "0.99",
               "--max-sim-time", "3")
    summary = read_summary(out)
    assert summary["status"] == "budget_exhausted" and not summary["reached"]
    assert summary["time_to_target_s"] is None and summary["sim_time_s"] >= 3
    assert summary["iterations"] < 12


def test_diverging_run_is_recorded_not_crashed(tmp_path, fmnist_root):
    out = _run(tmp_path, fmnist_root, "div", "--method", "d-sgd", "--lr", "1e6")
    summary = read_summary(out)
    assert summary["status"] == "diverged" and summary["diverged"] is True
    assert summary["diverged_at_iteration"] is not None and summary["reached"] is False
    assert read_metrics(out)[-1]["diverged"] is True


def test_divergence_loss_stops_a_finite_run(tmp_path, fmnist_root):
    """--divergence-loss: a finite loss above L counts as diverged (design §6.4). The untrained
    CNN's loss on 10 classes is about ln 10 = 2.30, so a ceiling of 2.0 stops iteration 1 and
    one of 100 stops nothing."""
    out = _run(tmp_path, fmnist_root, "ceil", "--method", "d-sgd", "--divergence-loss", "2.0")
    summary, last = read_summary(out), read_metrics(out)[-1]
    assert summary["status"] == "diverged" and summary["diverged_at_iteration"] == 1
    assert last["diverged"] is True and 2.0 < last["loss"] < 3.0
    assert yaml.safe_load((out / "config.yaml").read_text())["divergence_loss"] == 2.0
    high = _run(tmp_path, fmnist_root, "high", "--method", "d-sgd", "--divergence-loss", "100")
    assert read_summary(high)["status"] != "diverged" and read_summary(high)["iterations"] == 12
    # with a window of 5 the ceiling judges the median of the last 5 losses, once 5 exist
    windowed = _run(tmp_path, fmnist_root, "win", "--method", "d-sgd", "--divergence-loss",
                    "2.0", "--divergence-window", "5")
    assert read_summary(windowed)["diverged_at_iteration"] == 5


def test_an_evaluation_that_is_not_finite_ends_the_run_as_diverged(tmp_path, fmnist_root,
                                                                   monkeypatch):
    """design §6.4: a metric that overflowed (GPT-2's perplexity past 1e308 while the
    training losses were finite) ends the run as diverged at the iteration it was evaluated,
    its row keeping the metric; an evaluation that is finite changes nothing."""
    from decobench.training.loop import ModelLearner
    evaluate = ModelLearner.evaluate

    def overflowing(self, iterations, in_flight):
        value = evaluate(self, iterations, in_flight)
        return float("inf") if iterations >= 6 else value

    monkeypatch.setattr(ModelLearner, "evaluate", overflowing)
    out = _run(tmp_path, fmnist_root, "inf", "--method", "d-sgd")
    summary, rows = read_summary(out), read_metrics(out)
    assert summary["status"] == "diverged" and summary["diverged"] is True
    assert summary["diverged_at_iteration"] == 6 and summary["iterations"] == 6
    assert rows[-1]["iteration"] == 6 and rows[-1]["diverged"] is True
    assert float(rows[-1]["metric"]) == float("inf")    # written "inf" (JSON has no inf)
    assert all(r["loss"] < 3 for r in rows)
    monkeypatch.setattr(ModelLearner, "evaluate", evaluate)
    assert read_summary(_run(tmp_path, fmnist_root, "fine", "--method", "d-sgd")
                        )["status"] == "finished"


def test_above_ceiling_by_hand():
    from decobench.training.loop import above_ceiling
    # D-SGD's ramp on GPT-2 mid, iterations 137-141: one spike of 12.25, median 6.75
    assert not above_ceiling([6.7, 6.34, 12.25, 6.75, 7.12], 11.0, 5)
    assert above_ceiling([6.7, 6.34, 12.25], 11.0, 1)                 # the spike alone
    assert above_ceiling([10.1, 11.2, 11.3, 10.9, 11.5], 11.0, 5)     # median 11.2
    assert not above_ceiling([12.0, 12.0, 12.0, 12.0], 11.0, 5)       # fewer than 5 yet
    assert not above_ceiling([12.0], None, 1)                          # no ceiling
    assert not above_ceiling([1.0, 12.0, 13.0, 1.0], 11.0, 4)         # (1 + 12) / 2 = 6.5


def test_yaml_config_with_flag_override(tmp_path, fmnist_root):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"task": "cnn-fmnist", "method": "dd-ef-sgd", "workers": 2,
                                   "trace": "constant-20mbps-100ms", "delta": 0.5, "tau": 2,
                                   "max_iters": 3, "batch_size": 8,
                                   "data_root": str(fmnist_root)}))
    out = tmp_path / "y"
    assert main(["run", "--config", str(cfg), "--tau", "1", "--out", str(out),
                 "--no-progress"]) == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["method_options"] == {"delta": 0.5, "tau": 1}
    assert {r["tau"] for r in read_metrics(out)} == {1}


BAD_INPUTS = [
    (["--task", "nope"], "unknown task 'nope'"),
    (["--method", "nope"], "unknown method 'nope'"),
    (["--method", "dd-ef-sgd", "--delta", "1.5"], "--delta"),
    (["--method", "dd-ef-sgd", "--delta", "0"], "--delta"),
    (["--method", "d-sgd", "--data-root", "/nonexistent/fmnist"], "no Fashion-MNIST"),
    (["--method", "d-sgd", "--data-root", "cnn-fmnist=/some/fmnist"],
     "a run takes the folder alone (--data-root /some/fmnist)"),
    (["--method", "d-sgd", "--trace", "no-such-trace"], "no-such-trace"),
    (["--method", "d-sgd", "--target", "75"], "--target 75.0 is not an accuracy"),
    (["--method", "d-sgd", "--target", "0.7", "--milestone", "2"],
     "--milestone 2.0 is not an accuracy"),
    (["--method", "d-sgd", "--delta", "0.5"], "invalid option for method d-sgd"),
    (["--method", "d-sgd", "--workers", "0"], "--workers"),
]


@pytest.mark.parametrize("extra,message", BAD_INPUTS)
def test_bad_input_is_one_clear_line_before_training(tmp_path, fmnist_root, capsys, extra,
                                                     message):
    args = ["run", "--task", "cnn-fmnist", "--method", "d-sgd", "--trace",
            "constant-20mbps-100ms", "--data-root",
            str(fmnist_root), "--out", str(tmp_path / "x"), "--no-progress", *extra]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("decobench: error: ") and message in err[0]
    assert not (tmp_path / "x").exists()       # nothing started


def test_malformed_trace_names_file_and_line(tmp_path, fmnist_root, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("time_s,bandwidth_mbps,latency_ms\n0,10,100\n5,-3,100\n")
    args = ["run", "--task", "cnn-fmnist", "--method", "d-sgd", "--trace", str(bad),
            "--data-root", str(fmnist_root), "--out", str(tmp_path / "x"), "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{bad}:3" in err[0]
    assert not (tmp_path / "x").exists()


def test_existing_run_directory_is_not_overwritten_silently(tmp_path, fmnist_root, capsys):
    out = _run(tmp_path, fmnist_root, "once", "--method", "d-sgd", "--max-iters", "1")
    assert main(["run", *SMALL, "--method", "d-sgd", "--data-root", str(fmnist_root),
                 "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_plan_command(capsys):
    assert main(["plan", "--params", "1000000", "--workers", "4", "--compute-ms", "100",
                 "--bandwidth-mbps", "100", "--latency-ms", "200", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["delta"], plan["tau"], plan["bubble_free"]) == (0.28125, 3, True)
    assert plan["dsgd_t_avg_s"] == pytest.approx(0.1 + 0.32 + 0.2)


@pytest.mark.parametrize("flag,value,message", [
    ("--bandwidth-mbps", "0", "bandwidth must be finite and > 0"),
    ("--latency-ms", "-5", "latency must be finite and >= 0"),
    ("--compute-ms", "0", "compute time must be finite and > 0"),
])
def test_plan_rejects_bad_conditions_with_one_line(capsys, flag, value, message):
    args = {"--params": "1000", "--compute-ms": "100", "--bandwidth-mbps": "10",
            "--latency-ms": "50"}
    args[flag] = value
    assert main(["plan", *[x for kv in args.items() for x in kv]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("decobench: error: ") and message in err[0]


@pytest.mark.parametrize("argv,named", [
    (["run", "--task", "cnn-fmnist", "--method", "d-sgd", "--trase", "x"], "decobench run"),
    (["report", "results", "--bogus"], "decobench report"),
    (["--bogus"], None),
])
def test_a_mistyped_flag_is_one_line_naming_its_command(argv, named, capsys):
    """One line, the command that was given named once (never "decobench: decobench"), and
    where its --help is."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("decobench: error: ")
    assert "decobench: error: decobench:" not in err[0]
    if named is not None:
        assert err[0].startswith(f"decobench: error: {named}: unrecognized arguments: ")
        assert err[0].endswith(f"(see {named} --help)")


def test_deco_sgd_notes_once_when_a_held_plan_meets_a_bandwidth_drop(tmp_path, fmnist_root,
                                                                    capsys):
    """50 -> 5 Mbit/s at 2 s: the plan made at iteration 1 is held (F = 100) across the drop;
    one `decobench: note:` line names --deco-interval, and metrics.jsonl keeps it in a row.
    The note comes at iteration 14 (the estimate 19.3 Mbit/s, 2.6x below the plan's) and is
    not repeated over the 6 iterations after; batches of 8 (the clock is simulated, so the
    batch size moves no time)."""
    trace = tmp_path / "drop.csv"
    trace.write_text("time_s,bandwidth_mbps,latency_ms\n0,50,50\n2,5,50\n")
    out = tmp_path / "run"
    assert main(["run", "--task", "cnn-fmnist", "--profile", "paper", "--method", "deco-sgd",
                 "--workers", "4", "--batch-size", "8", "--max-iters", "20", "--eval-every", "20",
                 "--trace", str(trace), "--data-root", str(fmnist_root), "--out", str(out),
                 "--no-progress"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines()
             if line.startswith("decobench: note: iteration ")]
    assert len(notes) == 1 and notes[0].startswith("decobench: note: iteration 14: ")
    assert "--deco-interval" in notes[0] and "F = 100" in notes[0]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sum("warning" in row for row in rows) == 1


def test_a_run_diverges_where_it_first_did():
    """An evaluation that was not finite at 6 comes before a loss that overflows at 9 (the
    emulated ranks train on until the stop is agreed): the run diverged at 6."""
    from decobench.training.loop import _first
    assert _first(None, 9) == 9 and _first(6, 9) == 6
