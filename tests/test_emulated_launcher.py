"""``decobench run --backend emulated`` end to end, as root (CI runs as root): namespaces,
shaped links, the probe, the trace player, two real ranks, teardown; and a killed rank."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hostfeatures import emulation_unavailable, left_behind, namespaces

from decobench.cli.main import main
from decobench.errors import DecobenchError
from decobench.netem.host import SubprocessRunner, throwaway_namespace
from decobench.runs.config import RunConfig
from decobench.runs.rundir import read_metrics, read_summary

_UNAVAILABLE = emulation_unavailable()
needs_root = pytest.mark.skipif(_UNAVAILABLE is not None,
                                reason=f"the emulated backend: {_UNAVAILABLE}")


LANES = ["--collectives-in-flight", "2"]
"""Two lanes, not the default 8: each lane is a gloo process group whose set-up takes about
1.4 s of rendezvous over the 200 ms round trip (9 groups were 13 s of a 32 s run); two lanes
(and the probe group) take the multi-lane path all the same. The default runs in make
test-slow (tests/test_emulated_faults.py, the killed-rank test)."""


def _args(fmnist_root, out, method, iters=6, lanes=LANES):
    return ["run", "--backend", "emulated", "--task", "cnn-fmnist", "--profile", "cpu",
            "--workers", "2", "--trace", "constant-20mbps-100ms", "--max-iters", str(iters),
            "--eval-every", str(iters), "--data-root", str(fmnist_root), "--out", str(out),
            "--no-wandb", "--no-progress", *lanes, *method]


def _emulatable() -> list[str]:
    from decobench.methods import method_specs

    return sorted(name for name, spec in method_specs().items() if spec.emulation is None)


IN_MAKE_TEST = ("deco-sgd",)
"""The per-method netns run in make test: the adaptive method, whose plan reads the link;
the others (30-40 s each: D-SGD's dense all-reduce, CocktailSGD's own wire format, ...)
run in make test-slow, as do the loopback agreement runs of the methods beyond three
(tests/test_emulated_ranks.py)."""


RULES = ["--topk-scope", "layer", "--ef-units", "update", "--clip-norm", "1", "--step-bound",
         "theorem-1", "--momentum", "0.9", "--momentum-correction", "on"]


@needs_root
@pytest.mark.slow
def test_emulated_run_with_every_update_rule(tmp_path, fmnist_root):
    """DeCo-SGD with every update rule of docs/design.md §2.5 on the netns backend: the
    per-tensor Top-k travels in its own wire format (LayerwiseWire), each rank holds its
    own DGC momentum, and config.yaml records the rules."""
    out = tmp_path / "run"
    assert main(_args(fmnist_root, out, ["--method", "deco-sgd", *RULES])) == 0
    assert read_summary(out)["status"] == "finished" and len(read_metrics(out)) == 6
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["update_rules"]["topk_scope"] == "layer"
    assert config["update_rules"]["momentum_correction"] is True


@needs_root
@pytest.mark.parametrize("method", [
    pytest.param(["--method", name], id=name,
                 marks=() if name in IN_MAKE_TEST else pytest.mark.slow)
    for name in _emulatable()])
def test_two_worker_emulated_run(tmp_path, fmnist_root, method):
    """One netns run per method that runs emulated (every method, unless its MethodSpec
    says why it cannot), with the latency mechanism ``auto`` picks here."""
    before = namespaces()
    out = tmp_path / "run"
    assert main(_args(fmnist_root, out, method)) == 0
    summary = read_summary(out)
    assert (summary["backend"], summary["time_basis"], summary["status"]) == (
        "emulated", "measured", "finished")
    assert summary["iterations"] == 6 and summary["topology"] == "ring"
    rows = read_metrics(out)
    assert len(rows) == 6 and rows[-1]["sim_time_s"] > 0
    probe = json.loads((out / "network_probe.json").read_text())
    assert any(" tbf " in c or " htb " in c for c in probe["tc_commands"])
    for link in probe["links"]:
        assert abs(link["measured_mbps"] - 20.0) / 20.0 <= 0.10
    assert (out / "tc_commands.txt").read_text().count("tc qdisc add") >= 2
    config = (out / "config.yaml").read_text()
    assert "time_basis: measured" in config and "latency_mechanism:" in config
    if method[1] == "deco-sgd" and probe["latency_mechanism"] in ("netem", "nfqueue"):
        # the network adds the 100 ms: DeCo must read it as latency (the collective's fixed
        # cost, timed on an empty collective), not as a slow link (it read 0 ms and
        # 0.45 Mbit/s before the split)
        plans = [r for r in rows if "plan_latency_ms" in r]
        assert plans and plans[0]["plan_latency_ms"] >= 90, plans[0]
        # the bandwidth comes from the warm-up messages (δ = 0.01: 232 kbit, 11.6 ms on the
        # link), so a few ms of timing noise (the delayer's release lag reaches 5-8 ms
        # under load) moves it by tens of percent (25.9 Mbit/s measured once, a sweep on the
        # other core): judge it by the transmission time it implies. A burst that let the
        # message through in 2.4 ms (97 Mbit/s, before tc's burst was sized to 1 ms of the
        # rate) fails this, and so did one timing of the empty collective held up by the
        # delayer (4.4 ms implied, one clean-clone make test) before the first plan read the
        # least of three (10.5-10.7 ms in four runs since)
        warmup_bits = rows[0]["bits"]
        implied_s = warmup_bits / (plans[0]["plan_bandwidth_mbps"] * 1e6)
        if abs(implied_s - warmup_bits / 20e6) > 0.010 and rows[0]["bubble_s"] > 1.0:
            # the first iteration waits 0.82 s (three empty all-gathers of 0.2 s, then the
            # message; 0.42-0.43 s with one empty before 2026-11-26), and a stalled transfer
            # took 0.4 s more in one clean-clone make test, whose plan read 0.57 Mbit/s: a stalled
            # warm-up transfer (TCP loss recovery, about one RTT + RTO), which the estimator's
            # first sample takes at face value. Not the burst this test guards against; the
            # estimator does not filter such a sample (docs/emulation.md "A stalled first
            # transfer")
            pytest.xfail(f"first warm-up transfer stalled ({rows[0]['bubble_s']:.2f} s wait), "
                         f"plan {plans[0]['plan_bandwidth_mbps']:.2f} Mbit/s: a stalled first "
                         "transfer, docs/emulation.md")
        # asymmetric: a burst makes the message look faster than the link (implied time
        # short), which is what this test guards against, so that side keeps 4 ms; a late
        # reading is the delayer's release lag (lag_max 5-9 ms per delayer in a fidelity
        # run's nfqueue_delay.json; 16.4-20.6 ms implied in three make tests of 2026-11-26,
        # against 11.6 ms), so that side allows 10 ms or, where load made this run's
        # delayers later (11-12 ms measured with two busy processes beside the test), the
        # largest release lag they measured themselves plus 2 ms: the allowance follows the
        # run's own measurement, not an idle machine's. A stall (hundreds of ms) still fails
        link_s = warmup_bits / 20e6
        late_s = max(0.010, _largest_release_lag_s(out) + 0.002)
        assert link_s - 0.004 <= implied_s <= link_s + late_s, (implied_s, late_s, plans[0])
    if method[1] == "d-sgd":
        # a dense fp32 message of 32·454,922 bits over a 20 Mbit/s ring (h = 1 for n = 2)
        # takes 0.73 s, plus l·b = 2 · 0.1 s: an iteration cannot be faster than that
        per_iteration = (rows[-1]["sim_time_s"] - rows[0]["sim_time_s"]) / 5
        assert per_iteration > 0.8
    assert not left_behind(before), "namespaces left behind"


def _largest_release_lag_s(out: Path) -> float:
    """The largest release lag any NFQUEUE delayer of the run measured (nfqueue_delay.json),
    in seconds; 0 where the latency came from netem (no delayer)."""
    from decobench.emulated.launcher import DELAY_REPORT

    path = out / DELAY_REPORT
    if not path.is_file():
        return 0.0
    delayers = json.loads(path.read_text())["delayers"].values()
    return max((d["lag_max_ms"] for d in delayers), default=0.0) / 1e3


def _rank_pid(out: Path, rank: int, deadline: float) -> int:
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if (b"decobench.emulated" in cmdline and str(out).encode() in cmdline
                    and f"RANK={rank}".encode() in environ):
                return int(pid)
        time.sleep(0.2)
    raise AssertionError(f"rank {rank} never started")


@pytest.mark.slow  # about a minute: it waits for gloo to notice the lost rank (make test-slow)
@needs_root
def test_killed_worker_fails_the_run_naming_the_lost_rank(tmp_path, fmnist_root):
    before = namespaces()
    out = tmp_path / "run"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "decobench.cli.main", *_args(fmnist_root, out, ["--method", "d-sgd"],
                                                         iters=500, lanes=[])],   # default
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 180
    victim = _rank_pid(out, 1, deadline)
    partial = out / "metrics.jsonl.partial"
    while time.monotonic() < deadline and (
            not partial.exists() or partial.read_text().count("\n") < 3):
        time.sleep(0.2)
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    output, _ = launcher.communicate(timeout=120)
    assert time.monotonic() - killed_at < 60, output
    assert launcher.returncode != 0
    assert "lost rank 1" in output, output
    failure = json.loads((out / "failure.json").read_text())
    assert failure["status"] == "failed" and failure["lost_ranks"] == [1]
    assert not (out / "summary.json").exists()
    assert not left_behind(before, launcher.pid), "namespaces left behind"


def test_methods_without_an_emulated_implementation_fail_before_anything(tmp_path, monkeypatch):
    import decobench.methods
    from decobench.emulated.launcher import check_emulation
    from decobench.methods import MethodSpec, get_method_spec
    from decobench.runs.runner import prepare

    base = get_method_spec("dd-ef-sgd")
    monkeypatch.setitem(decobench.methods.METHODS.registered, "local-only",
                        MethodSpec("local-only", "declares it cannot run emulated", base.options,
                                   base.build, emulation="it needs a shared disk"))
    run = prepare(RunConfig(task="cnn-fmnist", method="local-only", workers=2,
                            backend="emulated", trace="constant-20mbps-100ms",
                            out=str(tmp_path / "x")))
    with pytest.raises(DecobenchError, match="local-only cannot run on the emulated backend: "
                                             "it needs a shared disk"):
        check_emulation(run)
    assert not (tmp_path / "x").exists()


def test_not_root_is_a_clear_error(tmp_path, monkeypatch):
    from decobench.emulated.launcher import check_emulation
    from decobench.runs.runner import prepare

    run = prepare(RunConfig(task="cnn-fmnist", method="d-sgd", workers=2, backend="emulated",
                            trace="constant-20mbps-100ms", out=str(tmp_path / "x")))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(DecobenchError, match="needs root"):
        check_emulation(run)


def test_emulated_runs_default_to_ring_topology():
    emulated = RunConfig(task="cnn-fmnist", method="d-sgd", backend="emulated",
                         trace="constant-20mbps-100ms")
    assert emulated.topology == "ring"
    assert RunConfig(task="cnn-fmnist", method="d-sgd", trace="x").topology == "paper"
    assert RunConfig(task="cnn-fmnist", method="d-sgd", backend="emulated", topology="paper",
                     trace="x").topology == "paper"


def test_the_trace_players_changes_are_written_to_the_run_directory(tmp_path):
    from decobench.emulated.launcher import _stop_player
    from decobench.netem.player import PlayedChange
    from decobench.netem.tc import LinkSetting

    class Player:
        records = [PlayedChange(planned_s=0.0, actual_s=0.002, apply_s=0.01,
                                setting=LinkSetting(rate_bps=20e6, latency_s=0.1)),
                   PlayedChange(planned_s=5.0, actual_s=5.003, apply_s=0.02,
                                setting=LinkSetting(rate_bps=5e6, latency_s=0.2))]

        def stop(self):
            return self.records

    _stop_player(Player(), tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "trace_player.jsonl").read_text().splitlines()]
    assert [(r["planned_s"], r["setting"]["rate_bps"]) for r in rows] == [(0.0, 20e6), (5.0, 5e6)]


@pytest.mark.slow  # about 30 s; loopback ranks resume in make test (test_emulated_checkpoint)
@needs_root
def test_a_run_that_lost_a_rank_resumes_from_its_checkpoints(tmp_path, fmnist_root):
    """Rank 1 is killed after the ranks checkpointed; ``--resume`` builds the links again,
    every rank restores the same iteration, and the run directory ends complete."""
    before = namespaces()
    out = tmp_path / "run"
    # comm-layer: this test is about checkpoints, and gloo notices the lost rank sooner
    # without 100 ms of packet latency (about 40 s less under nfqueue)
    args = _args(fmnist_root, out, ["--method", "dd-ef-sgd", "--delta", "0.05", "--tau", "2",
                                    "--checkpoint-every-s", "0.1", "--latency-mechanism",
                                    "comm-layer"], iters=40)
    launcher = subprocess.Popen([sys.executable, "-m", "decobench.cli.main", *args],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 180
    victim = _rank_pid(out, 1, deadline)
    while not list((out / "checkpoints").glob("rank1-*.pt")):
        assert launcher.poll() is None and time.monotonic() < deadline, "no checkpoint"
        time.sleep(0.05)
    os.kill(victim, signal.SIGKILL)
    output, _ = launcher.communicate(timeout=120)
    assert launcher.returncode != 0 and "lost rank 1" in output, output
    resumed = subprocess.Popen([sys.executable, "-m", "decobench.cli.main", *args, "--resume"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, stderr = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, stderr
    assert "the newest checkpoint every rank holds" in stderr
    assert read_summary(out)["iterations"] == 40
    assert [r["iteration"] for r in read_metrics(out)] == list(range(1, 41))
    assert not (out / "failure.json").exists() and not (out / "checkpoints").exists()
    assert not left_behind(before, launcher.pid, resumed.pid), "namespaces left behind"


@needs_root
def test_left_behind_judges_this_tests_namespaces_not_a_neighbours():
    """The leak check the tests above end with: a namespace this process made and kept
    counts; one a neighbour made (another owner pid) does not; a deleted one is gone."""
    runner = SubprocessRunner()
    before = namespaces()
    with throwaway_namespace(runner, "mine") as mine:
        assert left_behind(before) == {mine}
        neighbour = "dcbtest-nb"
        runner.run(["ip", "netns", "add", neighbour])
        try:
            runner.run(["ip", "-n", neighbour, "link", "set", "lo", "alias",
                        "decobench owner pid=1 start=1"])
            assert left_behind(before) == {mine}
            assert left_behind(before, 1) == {mine, neighbour}
        finally:
            runner.run(["ip", "netns", "del", neighbour])
    assert left_behind(before) == set()
