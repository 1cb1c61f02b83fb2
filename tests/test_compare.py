"""`decobench compare` (issue 18): identical results pass, a deliberate regression (a slower
trace, a changed method option) is caught with exit 1 and named, a missing cell is reported,
snapshots round-trip, and the tolerance follows the platform (exact) or the seed spread.
Issue 40: plain run folders' configurations are compared field by field (bookkeeping left
out), and time to target decides while iterations and bits are flagged unless --decisive."""

import json
import shutil
from pathlib import Path

import pytest
import yaml
from e2e_shared import cells_in_this_process

from decobench.cli.main import main
from decobench.reports.compare import (
    DEFAULT_TOLERANCE,
    Cell,
    Snapshot,
    compare,
    config_diff,
    load_results,
    seed_spread,
    task_spread,
    write_snapshot,
)


def _suite(tmp: Path, name: str, bandwidth: float, deco_interval: int = 5,
           methods=("d-sgd", "deco-sgd")) -> Path:
    trace = tmp / name / "link.csv"
    trace.parent.mkdir(parents=True)
    trace.write_text(f"time_s,bandwidth_mbps,latency_ms\n0,{bandwidth},50\n")
    entries = [m if m != "deco-sgd" else {"method": "deco-sgd",
                                          "options": {"deco_interval": deco_interval}}
               for m in methods]
    suite = {"name": "cmp", "conditions": {"link": {"trace": str(trace)}},
             "experiments": [{"name": "main", "tasks": ["cnn-fmnist"], "conditions": ["link"],
                              "methods": entries, "workers": [2], "seeds": [0, 1],
                              "target": 0.45, "max_iters": 20, "options": {"eval_every": 20}}]}
    path = tmp / name / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    return path


def _sweep(suite: Path, out: Path, fmnist_root: Path) -> Path:
    assert main(["sweep", str(suite), "--out", str(out), "--no-progress", "--no-wandb",
                 "--data-root", f"cnn-fmnist={fmnist_root}"]) == 0
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory, fmnist_root):
    """BASE, a copy of it, and two deliberately changed NEW sweeps (of the cells they change:
    the others are missing there, so their tests narrow with --only). A rerun giving the same
    numbers is the determinism tests' business (test_run_end_to_end.py)."""
    tmp = tmp_path_factory.mktemp("compare")
    with cells_in_this_process():
        base = _sweep(_suite(tmp, "base", 20), tmp / "r-base", fmnist_root)
        shutil.copytree(base, tmp / "r-again")
        return {
            "base": base, "again": tmp / "r-again",
            # the same link at a quarter of the bandwidth: D-SGD slower to target
            "slower": _sweep(_suite(tmp, "slower", 5, methods=("d-sgd",)), tmp / "r-slower",
                             fmnist_root),
            # DeCo-SGD never re-plans after its first plan (F = 1000 > the budget)
            "option": _sweep(_suite(tmp, "option", 20, deco_interval=1000,
                                    methods=("deco-sgd",)), tmp / "r-option", fmnist_root),
        }


def _compare(capsys, base, new, *extra) -> tuple[int, str, dict]:
    out = Path(new).parent / f"cmp-{Path(new).name}-{len(extra)}"
    code = main(["compare", str(base), str(new), "--out", str(out), *extra])
    text = capsys.readouterr().out
    return code, text, json.loads((out / "compare.json").read_text())


def test_identical_results_pass_exactly(results, capsys):
    code, text, data = _compare(capsys, results["base"], results["again"])
    assert code == 0 and not data["regressed"]
    assert data["tolerance"].startswith("exact")
    assert {c["verdict"] for c in data["cells"]} == {"same"}
    assert len(data["cells"]) == 4 and "0 regressed" in text


def test_a_slower_trace_is_a_named_regression(results, capsys):
    code, text, data = _compare(capsys, results["base"], results["slower"], "--only",
                                "*/d-sgd/*")
    assert code == 1 and data["regressed"] and not data["missing"]
    regressed = {c["name"] for c in data["cells"] if c["verdict"] == "regressed"}
    assert "main/cnn-fmnist/link/d-sgd/n2/s0" in regressed
    cell = next(c for c in data["cells"] if c["name"] == "main/cnn-fmnist/link/d-sgd/n2/s0")
    assert cell["identity_changed"]                  # the trace's content is in the identity
    ttt = next(m for m in cell["metrics"] if m["metric"] == "time_to_target_s")
    assert ttt["verdict"] == "regressed" and ttt["new"] > ttt["base"]
    # the trace files lie in other folders: the field that differs is the network's bandwidth
    assert any(line.startswith("network.mean_bandwidth_mbps: 20") for line in cell["config_diff"])
    assert not any(line.startswith("trace:") for line in cell["config_diff"])
    assert "REGRESSED" in (Path(results["slower"]).parent / "cmp-r-slower-2" /
                           "compare.md").read_text()


def test_a_changed_method_option_is_named_with_its_field(results, capsys):
    code, _, data = _compare(capsys, results["base"], results["option"], "--only",
                             "*/deco-sgd/*")
    deco = data["cells"]
    assert len(deco) == 2 and all(c["identity_changed"] for c in deco)
    assert any("deco_interval" in line for c in deco for line in c["config_diff"])
    code_all, _, data_all = _compare(capsys, results["base"], results["option"])
    assert code_all == 1 and len(data_all["missing"]) == 2     # D-SGD's cells are not there
    # whether F = 1000 is worse here is what the comparison measured: the exit status says it
    assert code == (1 if any(c["verdict"] == "regressed" for c in deco) else 0)


def test_narrowing_by_metric_and_cell(results, capsys):
    # D-SGD's trajectory does not depend on the link: its final metric and bits are the same
    code, _, data = _compare(capsys, results["base"], results["slower"],
                             "--metric", "final_metric", "--metric", "bits_sent",
                             "--only", "*/d-sgd/*")
    assert data["metrics"] == ["final_metric", "bits_sent"]
    assert {c["name"].split("/")[3] for c in data["cells"]} == {"d-sgd"}
    assert code == 0 and {c["verdict"] for c in data["cells"]} == {"same"}


def test_a_missing_cell_is_reported_and_fails(results, capsys, tmp_path):
    new = tmp_path / "partial"
    shutil.copytree(results["again"], new)
    manifest = json.loads((new / "manifest.json").read_text())
    gone = next(c for c in manifest["cells"] if c["method"] == "deco-sgd" and c["seed"] == 1)
    shutil.rmtree(new / gone["run_dir"])
    code, text, data = _compare(capsys, results["base"], new)
    assert code == 1
    assert data["missing"] == ["main/cnn-fmnist/link/deco-sgd/n2/s1"]
    assert "missing in NEW" in text
    # and the other way round it is a new cell, which does not fail
    code, _, data = _compare(capsys, new, results["base"])
    assert code == 0 and data["new_cells"] == ["main/cnn-fmnist/link/deco-sgd/n2/s1"]


def test_a_snapshot_round_trips_and_refreshes(results, capsys, tmp_path):
    golden = tmp_path / "golden.json"
    assert main(["compare", str(results["base"]), str(results["base"]), "--out",
                 str(tmp_path / "o"), "--save", str(golden)]) == 0
    text = golden.read_text()
    assert json.loads(text)["format"] == "decobench-snapshot/1"
    code, _, data = _compare(capsys, golden, results["again"])
    assert code == 0 and data["tolerance"].startswith("exact")
    # --save accepts NEW as the baseline: exit 0 although it regressed, and the file moves
    assert main(["compare", str(golden), str(results["slower"]), "--out", str(tmp_path / "o"),
                 "--save", str(golden)]) == 0
    assert golden.read_text() != text
    code, _, _ = _compare(capsys, golden, results["slower"])
    assert code == 0


def test_another_platform_uses_the_seed_spread(results):
    base, _ = load_results(results["base"])
    new, _ = load_results(results["slower"])
    other = dict(base.environment, cpu_capability="another vector unit")
    moved = Snapshot(base.suite, base.cells, other, "other")
    comparison = compare(moved, new, only=["*/d-sgd/*"])
    assert comparison.mode.startswith("seed spread") and "cpu_capability" in comparison.mode
    assert comparison.failed                     # 4x slower is beyond any seed spread here
    assert not compare(moved, base).failed       # the same numbers pass


def _cell(name, seed, **values):
    return Cell(f"{name}/s{seed}", "x", {"status": "reached", **values}, "perplexity",
                "simulated")


def test_metric_directions_and_tolerance_by_hand():
    base = Snapshot("t", {c.name: c for c in (
        _cell("g/a", 0, time_to_target_s=100.0, final_metric=50.0, iters_to_target=10),
        _cell("g/a", 1, time_to_target_s=120.0, final_metric=52.0, iters_to_target=12),
    )}, None, "base")
    # spread of time to target over the seeds: (120 - 100) / 110 = 18.2%
    assert seed_spread(base.cells.values(), "time_to_target_s") == {"g/a": pytest.approx(20 / 110)}
    new = Snapshot("t", {
        "g/a/s0": _cell("g/a", 0, time_to_target_s=115.0, final_metric=49.0,
                        iters_to_target=10),                    # +15%: within 18.2%
        "g/a/s1": _cell("g/a", 1, time_to_target_s=None, final_metric=51.0,
                        iters_to_target=None, status="budget_exhausted"),   # target lost
    }, None, "new")
    result = {c.name: {ch.metric: ch.verdict for ch in c.changes} for c in compare(base, new).cells}
    assert result["g/a/s0"] == {"time_to_target_s": "within", "iters_to_target": "same",
                                "final_metric": "better",       # perplexity: lower is better
                                "bits_sent": "same", "status": "same"}
    # slower within tolerance and a better final metric: the cell is not "better"
    assert compare(base, new).cells[0].verdict == "within tolerance"
    assert result["g/a/s1"]["time_to_target_s"] == "regressed"
    assert result["g/a/s1"]["status"] == "regressed"
    # one tolerance for all: 10% makes +15% a regression
    strict = compare(base, new, tolerance=0.10)
    assert strict.cells[0].changes[0].verdict == "regressed"
    assert DEFAULT_TOLERANCE == 0.05


def test_a_cell_with_one_seed_takes_its_tasks_largest_spread():
    # cells are experiment/task/condition/label/nN/sSEED
    base = Snapshot("t", {c.name: c for c in (
        _cell("main/cnn/c/deco/n4", 0, time_to_target_s=54.0),
        _cell("main/cnn/c/deco/n4", 1, time_to_target_s=75.0),     # (75-54)/64.5 = 32.6%
        _cell("main/cnn/c/d-sgd/n4", 0, time_to_target_s=250.0),
        _cell("main/cnn/c/d-sgd/n4", 1, time_to_target_s=240.0),   # 10/245 = 4.1%
        _cell("map/cnn/r2/topk/n4", 0, time_to_target_s=26.5),     # one seed
        _cell("map/gpt2/r2/topk/n4", 0, time_to_target_s=10.0),    # one seed, no kin
    )}, None, "base")
    spread = seed_spread(base.cells.values(), "time_to_target_s")
    assert task_spread(spread) == {"cnn": pytest.approx(21 / 64.5)}
    new = Snapshot("t", {**base.cells,
                         "map/cnn/r2/topk/n4/s0": _cell("map/cnn/r2/topk/n4", 0,
                                                        time_to_target_s=32.1),   # +21%
                         "map/gpt2/r2/topk/n4/s0": _cell("map/gpt2/r2/topk/n4", 0,
                                                         time_to_target_s=10.6)}, # +6%
                   None, "new")
    verdicts = {c.name: c.changes[0].verdict for c in compare(base, new).cells}
    assert verdicts["map/cnn/r2/topk/n4/s0"] == "within"       # 21% < 32.6%
    assert verdicts["map/gpt2/r2/topk/n4/s0"] == "regressed"   # no kin: 5%
    assert "one seed: its task's largest" in compare(base, new).mode


def test_bad_input_is_one_line(tmp_path, capsys):
    (tmp_path / "x.json").write_text("{}")
    assert main(["compare", str(tmp_path / "x.json"), str(tmp_path)]) == 2
    assert "not a decobench snapshot" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "nope"), str(tmp_path)]) == 2
    assert main(["compare", "a", "b", "--metric", "speed"]) == 2


def test_write_snapshot_is_sorted_for_diffs(results, tmp_path):
    snapshot, _ = load_results(results["base"])
    path = write_snapshot(snapshot, tmp_path / "s.json")
    names = list(json.loads(path.read_text())["cells"])
    assert names == sorted(names) and len(names) == 4


def test_a_snapshot_leaves_out_what_changes_between_runs_of_the_same_code(results):
    snapshot, _ = load_results(results["base"])
    moved = {}
    for name, cell in snapshot.cells.items():
        versions = {**cell.config["_versions"], "git_commit": "another commit"}
        moved[name] = Cell(cell.name, cell.identity, cell.values, cell.metric_name,
                           cell.time_basis, {**cell.config, "_versions": versions},
                           {"id": "other", "mode": "offline", "url": None})
    again = Snapshot(snapshot.suite, moved, snapshot.environment, "again").to_json()
    first = snapshot.to_json()
    assert again["cells"] == first["cells"]
    assert again["measured_at"] == ["another commit"] != first["measured_at"]


# ------------------------------------------------- issue 40: plain run folders, decisive metrics


def _run_folder(out: Path, trace: Path, fmnist_root: Path, deco_interval: int, *extra: str):
    """A plain run folder (``decobench run --out``, no manifest) of DeCo-SGD on ``trace``."""
    assert main(["run", "--task", "cnn-fmnist", "--method", "deco-sgd", "--workers", "2",
                 "--trace", str(trace), "--target", "0.4", "--max-iters", "40",
                 "--eval-every", "10", "--deco-interval", str(deco_interval),
                 "--data-root", str(fmnist_root), "--out", str(out), "--no-progress",
                 "--no-wandb", *extra]) == 0
    return out


def _rescale(run_dir: Path, time: float, iters: float) -> None:
    """Scale a finished run's time and iterations to target (the numbers reported in issue
    40; the runs themselves are too short to show them)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["reached"], f"{run_dir}: the run must reach its target"
    summary["time_to_target_s"] = summary["time_to_target_s"] * time
    summary["iters_to_target"] = round(summary["iters_to_target"] * iters)
    (run_dir / "summary.json").write_text(json.dumps(summary))


@pytest.fixture(scope="module")
def interval_pair(tmp_path_factory, fmnist_root):
    """Two plain runs that differ only in deco_interval (100 -> 10) and in bookkeeping: the
    run directory, the trace file's folder (same content), the checkpoint interval."""
    tmp = tmp_path_factory.mktemp("interval")
    traces = []
    for side in ("base", "new"):
        (tmp / side).mkdir()
        traces.append(tmp / side / "link.csv")
        traces[-1].write_text("time_s,bandwidth_mbps,latency_ms\n0,20,50\n")
    base = _run_folder(tmp / "base" / "run-f100", traces[0], fmnist_root, 100)
    new = _run_folder(tmp / "new" / "run-f10", traces[1], fmnist_root, 10,
                      "--checkpoint-every-s", "60")
    return base, new


def test_a_plain_run_pair_lists_the_changed_field(interval_pair, capsys):
    base, new = interval_pair
    code, text, data = _compare(capsys, base, new)
    assert code == 0 and not data["missing"] and not data["new_cells"]
    (cell,) = data["cells"]
    assert cell["name"] == "-/cnn-fmnist/link/deco-sgd/n2/s0" and cell["config_changed"]
    # out, trace_path, the trace's folder and checkpoint_every_s differ and are not counted
    assert cell["config_diff"] == ["method_options.deco_interval: 100 -> 10"]
    assert "1 with a changed configuration" in text
    assert "method_options.deco_interval: 100 -> 10" in text


def test_faster_with_more_iterations_passes_unless_iterations_decide(interval_pair, tmp_path,
                                                                     capsys):
    base, new = interval_pair
    faster = tmp_path / "faster"
    shutil.copytree(new, faster)
    _rescale(faster, time=0.62, iters=1.4)           # issue 40: 38% faster, more iterations
    code, text, data = _compare(capsys, base, faster)
    (cell,) = data["cells"]
    verdicts = {m["metric"]: m["verdict"] for m in cell["metrics"]}
    assert code == 0 and cell["verdict"] == "better"
    assert verdicts["time_to_target_s"] == "better" and verdicts["iters_to_target"] == "flagged"
    assert cell["flagged"] == ["iters_to_target"] and "(flag)" in text
    assert "1 with a changed configuration, 1 with a flagged metric" in text
    code, text, data = _compare(capsys, base, faster, "--decisive", "iters_to_target,bits_sent")
    assert code == 1 and data["cells"][0]["verdict"] == "regressed"
    assert data["decisive"] == ["time_to_target_s", "iters_to_target", "bits_sent", "status"]
    # a slower time to target still fails, whatever iterations do
    slower = tmp_path / "slower"
    shutil.copytree(new, slower)
    _rescale(slower, time=1.2, iters=0.8)
    code, _, data = _compare(capsys, base, slower)
    assert code == 1 and data["cells"][0]["verdict"] == "regressed"


def test_bookkeeping_fields_are_not_a_configuration_change():
    config = {"method": "deco-sgd", "method_options": {"deco_interval": 100},
              "trace": "/results/a/traces/walk-r1.csv", "regime": "paper:/results/a/x.csv",
              "compute_time_source": "b/T = 1 at 32d/(a·T)", "identity": "abc",
              "emulation": {"packet_loss": 0.0, "namespaces": ["db-123-w0"],
                            "addresses": ["10.0.0.1"]}}
    moved = {**config, "out": "elsewhere", "data_root": "/data", "data_source": "/data",
             "trace_path": "/other/walk-r1.csv", "checkpoint_every_s": 60.0,
             "trace": "/results/b/traces/walk-r1.csv", "regime": "paper:/results/b/x.csv",
             "versions": {"git_commit": "x"}, "gradients": {"engine": "loop"},
             "trajectory": {"recorded": "trajectory.pt"}, "identity": "def",
             "emulation": {"packet_loss": 0.0, "namespaces": ["db-456-w0"],
                           "addresses": ["10.0.0.9"]}}
    assert config_diff(config, moved) == ()
    changed = {**moved, "emulation": {**moved["emulation"], "packet_loss": 0.01},
               "trace": "/results/b/traces/walk-r2.csv"}
    assert config_diff(config, changed) == (
        "emulation.packet_loss: 0.0 -> 0.01", "trace: 'walk-r1.csv' -> 'walk-r2.csv'")


def test_plain_runs_on_other_networks_are_paired_but_sweep_cells_are_not():
    def cell(name, time):
        return Cell(name, None, {"status": "reached", "time_to_target_s": time}, "accuracy",
                    "simulated", {"condition": name.split("/")[2]})

    base = Snapshot(None, {c.name: c for c in (
        cell("-/cnn/rho2-lambda1/d-sgd/n4/s0", 10.0),
        cell("main/cnn/fast/d-sgd/n4/s0", 10.0))}, None, "base")
    new = Snapshot(None, {c.name: c for c in (
        cell("-/cnn/rho4-lambda1/d-sgd/n4/s0", 9.0),
        cell("main/cnn/slow/d-sgd/n4/s0", 9.0))}, None, "new")
    result = compare(base, new)
    (paired,) = result.cells
    assert paired.name == "-/cnn/rho2-lambda1/d-sgd/n4/s0"
    assert paired.new_name == "-/cnn/rho4-lambda1/d-sgd/n4/s0"
    assert paired.config_diff == ("condition: 'rho2-lambda1' -> 'rho4-lambda1'",)
    assert result.missing == ("main/cnn/fast/d-sgd/n4/s0",)
    assert result.added == ("main/cnn/slow/d-sgd/n4/s0",)


def test_the_final_metric_decides_only_where_no_target_was_reached():
    def cell(time, final):
        status = "reached" if time is not None else "budget_exhausted"
        return Cell("g/a/s0", None, {"status": status, "time_to_target_s": time,
                                     "final_metric": final}, "accuracy", "simulated")

    def verdict(b, n):
        return compare(Snapshot(None, {"g/a/s0": b}, None, "b"),
                       Snapshot(None, {"g/a/s0": n}, None, "n")).cells[0].verdict

    assert verdict(cell(10.0, 0.80), cell(9.0, 0.70)) == "better"       # flagged only
    assert verdict(cell(None, 0.80), cell(None, 0.70)) == "regressed"   # nothing else says


def test_decisive_names_a_compared_metric(interval_pair, tmp_path, capsys):
    base, new = interval_pair
    for bad, says in ((["--decisive", "speed"], "--decisive speed: not a metric"),
                      (["--decisive", "bits_sent", "--metric", "time_to_target_s"],
                       "--decisive bits_sent: not compared")):
        assert main(["compare", str(base), str(new), "--out", str(tmp_path), *bad]) == 2
        assert says in capsys.readouterr().err
