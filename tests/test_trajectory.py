"""Trajectory reuse (issue 16, part 2): a run re-timed from another network's recorded
trajectory writes the same metrics.jsonl and summary.json as a fresh run on its own network
(wall-clock fields aside); trajectory keys tell apart what must train on its own."""

import json
from pathlib import Path

import pytest
import yaml
from e2e_shared import cells_in_this_process

from decobench.errors import DecobenchError
from decobench.methods import METHODS, MethodSpec, get_method_spec, register_method
from decobench.runs.config import RunConfig
from decobench.runs.rundir import TRAJECTORY
from decobench.runs.runner import execute, prepare
from decobench.runs.trajectory import Reuse, reuse_key

WALL_CLOCK = ("wall_time_s",)


def _config(fmnist_root: Path, out: Path, method: str, network: dict, **extra) -> RunConfig:
    fields = {"task": "cnn-fmnist", "method": method, "workers": 2, "max_iters": 40,
              "eval_every": 10, "seed": 3, "data_root": str(fmnist_root), "out": str(out)}
    return RunConfig(**{**fields, **network, **extra})


def _clean(path: Path) -> tuple[list[dict], dict]:
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        for key in WALL_CLOCK:
            row.pop(key, None)
    summary = json.loads((path / "summary.json").read_text())
    for key in (*WALL_CLOCK, "retimed_from"):
        summary.pop(key)
    return rows, summary


CASES = {
    # a static method: one trajectory for every network
    "d-sgd": ("d-sgd", {}, {"trace": "constant-20mbps-100ms"},
              {"trace": "wan-200ms-lowbw-varying"}),
    # DGA's automatic D is 1 on both, chosen from different measurements (logged)
    "dga": ("dga", {}, {"trace": "wan-200ms-lowbw-varying"}, {"trace": "aws-oregon-tokyo"}),
    # DeCo-SGD plans (δ, τ) = (1, 1) on both fast links, from different estimates (logged)
    "deco-sgd": ("deco-sgd", {"deco_interval": 5}, {"trace": "aws-oregon-tokyo"},
                 {"trace": "constant-1gbps-10ms"}),
    # per-layer Top-k with its detector's records (nested log fields) in every row
    "accordion": ("accordion", {}, {"trace": "constant-20mbps-100ms"},
                  {"trace": "aws-virginia-singapore"}),
    # CocktailSGD's own compressor and its logged split, at the reference recipe's (δ, τ)
    "cocktail-sgd": ("cocktail-sgd", {"cocktail_reference_defaults": True},
                     {"trace": "constant-20mbps-100ms"}, {"trace": "aws-oregon-tokyo"}),
    # a target met between evaluations: stop at target, milestones and the refine pass
    "dd-ef-sgd-target": ("dd-ef-sgd", {"delta": 0.1, "tau": 2},
                         {"trace": "constant-20mbps-100ms"},
                         {"transmission_ratio": 3.0, "latency_ratio": 2.0}),
    # the same with --ttt-resolution: the cadence counts iterations, so the re-timed run
    # evaluates where its trajectory has metrics
    "dd-ef-sgd-share": ("dd-ef-sgd", {"delta": 0.1, "tau": 2},
                        {"trace": "constant-20mbps-100ms"},
                        {"transmission_ratio": 3.0, "latency_ratio": 2.0}),
}


# cases whose path a make-test test covers run in make test-slow, with that test named
COVERED_ELSEWHERE = {
    "d-sgd": "test_a_sweep_trains_each_trajectory_once re-times D-SGD (static) on two networks",
    "dga": "test_a_sweep_trains_each_trajectory_once re-times DGA, D = 1 decided on both "
           "links from their own measurements",
}


@pytest.mark.parametrize("case", [
    pytest.param(case, marks=pytest.mark.slow if case in COVERED_ELSEWHERE else ())
    for case in CASES])
def test_a_retimed_run_equals_a_fresh_run(tmp_path, fmnist_root, case):
    method, options, first, second = CASES[case]
    # 20 iterations (DeCo-SGD re-plans 3 times), evaluated at the end; the target cases
    # evaluate every 10 and stop at their target
    extra = {"method_options": options, "max_iters": 20, "eval_every": 20}
    if case == "dd-ef-sgd-target":
        extra.update(target=0.35, milestones=[0.25], fine_eval_every=5, eval_every=10,
                     max_iters=200)
    if case == "dd-ef-sgd-share":
        extra.update(target=0.4, milestones=[0.3], fine_eval_every=4, ttt_resolution=0.05,
                     fine_eval_margin=0.2, eval_every=10, max_iters=200)
    trained = prepare(_config(fmnist_root, tmp_path / "trained", method, first, **extra))
    retimed = prepare(_config(fmnist_root, tmp_path / "retimed", method, second, **extra))
    fresh = prepare(_config(fmnist_root, tmp_path / "fresh", method, second, **extra))
    key, _ = reuse_key(trained)
    assert key is not None and reuse_key(retimed)[0] == key

    execute(trained, show_progress=False, reuse=Reuse(key))
    assert (tmp_path / "trained" / TRAJECTORY).is_file()
    summary = execute(retimed, show_progress=False, reuse=Reuse(key, tmp_path / "trained"))
    assert summary["retimed_from"] == "../trained"
    execute(fresh, show_progress=False)

    assert _clean(tmp_path / "retimed") == _clean(tmp_path / "fresh")
    assert _clean(tmp_path / "retimed") != _clean(tmp_path / "trained")   # other times
    config = yaml.safe_load((tmp_path / "retimed" / "config.yaml").read_text())
    assert config["trajectory"] == {"key": key, "retimed_from": "../trained"}
    assert not (tmp_path / "retimed" / TRAJECTORY).exists()
    assert json.loads((tmp_path / "fresh" / "summary.json").read_text())["retimed_from"] is None
    if case == "dd-ef-sgd-target":       # the case exercised what it is there for
        assert summary["reached"] and summary["refined_targets"]
        assert summary["iterations"] < 200
    if case == "dd-ef-sgd-share":        # finer than E_f = 4 where the target fell early
        assert summary["reached"] and summary["ttt_resolution"] == 0.05
        hits = [summary, *summary["milestones"]]
        assert all(h["ttt_resolution_iters"] <= max(1, int(0.05 * h["iters_to_target"]))
                   for h in hits), hits
        assert any(h["ttt_resolution_iters"] < 4 for h in hits), hits


def test_the_static_strategy_is_retimed_from_deco_where_deco_keeps_its_first_plan(
        tmp_path, fmnist_root):
    """DeCo-SGD and the paper's static strategy share a learner (MethodSpec.learner): on a
    constant link where DeCo's re-plans keep its first plan, the static strategy re-timed from
    DeCo's trajectory writes what a fresh static run writes (its own log: no re-plan rows)."""
    link = {"trace": "constant-20mbps-100ms", "max_iters": 20, "eval_every": 20}
    deco = prepare(_config(fmnist_root, tmp_path / "deco", "deco-sgd", link,
                           method_options={"deco_interval": 5}))
    static = {name: prepare(_config(fmnist_root, tmp_path / name, "cocktail-sgd-topk", link))
              for name in ("retimed", "fresh")}
    key, why = reuse_key(deco)
    assert key is not None and reuse_key(static["retimed"]) == (key, why)
    assert "any dd-ef-sgd/top-k method" in why
    execute(deco, show_progress=False, reuse=Reuse(key))
    execute(static["retimed"], show_progress=False, reuse=Reuse(key, tmp_path / "deco"))
    execute(static["fresh"], show_progress=False)
    assert _clean(tmp_path / "retimed") == _clean(tmp_path / "fresh")
    deco_rows = _clean(tmp_path / "deco")[0]
    replans = [row["iteration"] for row in deco_rows if "plan_phi" in row]
    assert len(replans) > 2                            # DeCo re-planned, the same plan
    assert [row["iteration"] for row in _clean(tmp_path / "retimed")[0]
            if "plan_phi" in row] == replans[:1]       # the static strategy planned once
    assert [(r["delta"], r["tau"]) for r in deco_rows] == [
        (r["delta"], r["tau"]) for r in _clean(tmp_path / "retimed")[0]]


def test_static_and_network_decided_keys(fmnist_root, tmp_path):
    def key(method, network, **options):
        return reuse_key(prepare(_config(fmnist_root, tmp_path, method, network,
                                         method_options=options)))[0]

    slow, fast = {"trace": "constant-20mbps-100ms"}, {"trace": "constant-1gbps-10ms"}
    assert key("d-sgd", slow) == key("d-sgd", fast)
    assert key("dd-ef-sgd", slow, delta=0.1) != key("dd-ef-sgd", slow, delta=0.2)
    # DGA: D = 1 on both links, but a latency of 5 T gives another D
    assert key("dga", slow) == key("dga", fast)
    assert key("dga", slow) != key("dga", {"transmission_ratio": 1.0, "latency_ratio": 5.0})
    assert key("dga", slow, dga_delay=3) == key("dga", {"transmission_ratio": 1.0,
                                                         "latency_ratio": 5.0}, dga_delay=3)
    # DeCo-SGD compresses on the slow link and not on the fast one
    assert key("deco-sgd", slow) != key("deco-sgd", fast)
    assert key("cocktail-sgd-topk", slow) != key("cocktail-sgd-topk", fast)
    # one learner: DeCo-SGD keeps its first plan on a constant link, but not where the
    # bandwidth changes; a method outside the learner never shares
    assert key("deco-sgd", slow, deco_interval=5) == key("cocktail-sgd-topk", slow)
    varying = {"trace": "wan-200ms-lowbw-varying"}
    assert key("deco-sgd", varying, deco_interval=5) != key("cocktail-sgd-topk", varying)
    assert key("dd-ef-sgd", slow, delta=0.1) != key("cocktail-sgd-topk", slow)
    assert (key("cocktail-sgd", slow, cocktail_reference_defaults=True)
            == key("cocktail-sgd", fast, cocktail_reference_defaults=True))


def test_what_is_never_reused_says_why(fmnist_root, tmp_path, monkeypatch):
    def why(method="d-sgd", **extra):
        key, reason = reuse_key(prepare(_config(fmnist_root, tmp_path, method,
                                                {"trace": "constant-20mbps-100ms"}, **extra)))
        assert key is None
        return reason

    assert "max_sim_time" in why(max_sim_time=5.0)
    assert "measured" in why(compute_time="measured")
    spec = get_method_spec("d-sgd")
    monkeypatch.setattr(METHODS, "registered", dict(METHODS.registered))   # this test only
    register_method(MethodSpec("outside-dsgd", spec.summary, spec.options, spec.build))
    assert "does not declare" in why("outside-dsgd")
    # the Theorem-1 iteration model reads the applied updates: no trajectory is shared
    assert "read the training" in why("deco-sgd-robust")
    assert reuse_key(prepare(_config(fmnist_root, tmp_path, "deco-sgd-robust",
                                     {"trace": "constant-20mbps-100ms"},
                                     method_options={"iteration_model": "fixed"})))[0] is not None


def test_a_trajectory_with_another_key_is_refused(tmp_path, fmnist_root):
    run = prepare(_config(fmnist_root, tmp_path / "a", "d-sgd",
                          {"trace": "constant-20mbps-100ms"}, max_iters=4))
    key, _ = reuse_key(run)
    execute(run, show_progress=False, reuse=Reuse(key))
    other = prepare(_config(fmnist_root, tmp_path / "b", "d-sgd",
                            {"trace": "constant-20mbps-100ms"}, max_iters=4))
    with pytest.raises(DecobenchError, match="no recorded trajectory with key"):
        execute(other, show_progress=False, reuse=Reuse("0" * 64, tmp_path / "a"))


def _grid_suite(tmp_path: Path) -> Path:
    data = {
        "name": "reuse",
        "description": "three methods on three networks: D-SGD trains once, DGA (D = 1 on "
                       "the two links) twice, DeCo-SGD on every network",
        "defaults": {"batch_size": 16, "eval_every": 10},
        "conditions": {"slow": {"trace": "constant-20mbps-100ms"},
                       "fast": {"constant": {"bandwidth_mbps": 1000, "latency_ms": 10}},
                       "far": {"transmission_ratio": 1.0, "latency_ratio": 5.0}},
        "experiments": [{"name": "e", "tasks": ["cnn-fmnist"],
                         "conditions": ["slow", "fast", "far"],
                         "methods": ["d-sgd", "dga", {"method": "deco-sgd",
                                                      "options": {"deco_interval": 5}}],
                         "workers": [2], "seeds": [0], "target": 0.6, "max_iters": 20}],
    }
    path = tmp_path / "reuse.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _sweep_results(out: Path) -> dict[str, tuple[list[dict], dict]]:
    """Every run's rows and summary, without wall-clock fields and the results folder."""
    found = {}
    for run in sorted((out / "runs").iterdir()):
        rows, summary = _clean(run)
        summary.pop("trace_path")
        found[run.name] = (rows, summary)
    return found


def _sweep_command(suite: Path, out: Path, fmnist_root: Path) -> list[str]:
    return ["sweep", str(suite), "--out", str(out), "--jobs", "1", "--no-wandb",
            "--no-progress", "--data-root", f"cnn-fmnist={fmnist_root}"]


@pytest.fixture(scope="module")
def reused_grid(tmp_path_factory, fmnist_root) -> tuple[Path, Path, str]:
    """The grid suite swept once with reuse: (suite, results, stderr), shared by the tests
    that compare other sweeps of the same suite with it."""
    import contextlib
    import io

    from decobench.cli.main import main

    folder = tmp_path_factory.mktemp("grid")
    suite = _grid_suite(folder)
    err = io.StringIO()
    with cells_in_this_process(), contextlib.redirect_stderr(err):
        assert main(_sweep_command(suite, folder / "reused", fmnist_root)) == 0
    return suite, folder / "reused", err.getvalue()


def test_a_sweep_trains_each_trajectory_once(tmp_path, fmnist_root, reused_grid):
    """The three re-timed runs equal the same cells trained by a sweep with --no-reuse (which
    resumes a copy of the reused sweep without them: the six trained cells are the same runs
    either way)."""
    import contextlib
    import io
    import shutil

    from decobench.cli.main import main

    suite, reused, err = reused_grid
    assert "9 to run (6 trained, 3 re-timed from their trajectories)" in err
    retimed = {run.name.split("__")[1] + "/" + run.name.split("__")[2]:
               json.loads((run / "summary.json").read_text())["retimed_from"]
               for run in (reused / "runs").iterdir()}
    assert sum(source is not None for source in retimed.values()) == 3
    assert retimed["fast/d-sgd"].startswith("../cnn-fmnist__slow__d-sgd__")
    assert retimed["fast/dga"].startswith("../cnn-fmnist__slow__dga__")
    assert retimed["far/dga"] is None and retimed["fast/deco-sgd"] is None

    trained = tmp_path / "trained"
    shutil.copytree(reused, trained)
    fresh = [run for run in (trained / "runs").iterdir()
             if json.loads((run / "summary.json").read_text())["retimed_from"] is not None]
    for run in fresh:
        shutil.rmtree(run)
    err = io.StringIO()
    with cells_in_this_process(), contextlib.redirect_stderr(err):
        assert main([*_sweep_command(suite, trained, fmnist_root), "--no-reuse"]) == 0
    assert "9 runs, 6 already finished, 3 to run " in err.getvalue()
    assert _sweep_results(reused) == _sweep_results(trained)
    assert not any((run / TRAJECTORY).exists() for run in fresh)    # --no-reuse records none


@pytest.mark.slow  # about 25 s (make test-slow); a killed sweep resumes in make test too
def test_a_killed_sweep_with_reuse_resumes_to_the_same_report(tmp_path, fmnist_root,
                                                                reused_grid):
    import os
    import signal
    import subprocess
    import sys
    import time

    from decobench.cli.main import main
    from decobench.reports.build import write_report

    suite, whole, _ = reused_grid

    def command(out: Path) -> list[str]:
        return _sweep_command(suite, out, fmnist_root)

    def report(out: Path) -> dict[str, bytes]:
        written = out.parent / f"{out.name}-report"
        write_report(out, written)
        return {str(p.relative_to(written)): p.read_bytes()
                for p in sorted(written.rglob("*")) if p.is_file()}

    killed = tmp_path / "killed"
    runs = killed / "runs"
    process = subprocess.Popen([sys.executable, "-m", "decobench.cli.main", *command(killed)],
                               cwd=Path(__file__).resolve().parents[1],
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (runs.is_dir() and len([p for p in runs.iterdir()
                                      if not p.name.startswith(".")]) >= 2
               and any((s / "metrics.jsonl.partial").exists()
                       for s in runs.glob(".staging-*"))):
        assert process.poll() is None, "the sweep ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert main(command(killed)) == 0
    assert _sweep_results(killed) == _sweep_results(whole)
    assert report(killed) == report(whole)
