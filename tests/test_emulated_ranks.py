"""Real ranks on loopback (no root needed): ``python -m decobench.emulated`` started twice
with the torchrun environment trains the same model as the simulated backend.

D-SGD (dense all-reduce) and DD-EF-SGD with a static (δ, τ) (sparse all-gather of exactly
⌈W/8⌉-byte payloads, messages applied τ iterations later) end at the same accuracy as the
simulated run of the same configuration; the run directory has measured times.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from decobench.runs.rundir import read_metrics, read_summary


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ranks(args: list[str], out: Path, workers: int = 2, extra_env=None, timeout=240,
           entry: list[str] | None = None):
    port = _free_port()
    procs = []
    for rank in range(workers):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(workers),
               "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(workers),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **(extra_env or {})}
        procs.append(subprocess.Popen(
            [sys.executable, *(entry or ["-m", "decobench.emulated"]), *args, "--out", str(out),
             "--no-progress", "--no-wandb"], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=timeout)[0] for p in procs]
    return [p.returncode for p in procs], outputs


def _simulated(args: list[str], out: Path) -> dict:
    from decobench.cli.main import main

    assert main(["run", *args, "--out", str(out), "--no-progress", "--no-wandb"]) == 0
    return read_summary(out)


COMMON = ["--task", "cnn-fmnist", "--profile", "cpu", "--workers", "2", "--trace",
          "constant-1gbps-10ms", "--topology", "ring", "--max-iters", "8", "--eval-every", "8",
          "--seed", "1"]


@pytest.mark.parametrize("method", [
    # d-sgd (τ = 0) in make test-slow: its loopback run against the simulated one is
    # test_every_emulatable_method_agrees_with_the_simulated_run[d-sgd], and the report
    # timing below is checked with τ = 2 by the dd-ef-sgd case
    pytest.param(["--method", "d-sgd"], id="d-sgd", marks=pytest.mark.slow),
    pytest.param(["--method", "dd-ef-sgd", "--delta", "0.05", "--tau", "2"], id="dd-ef-sgd")])
def test_two_loopback_ranks_match_the_simulated_backend(tmp_path, fmnist_root, method):
    args = [*COMMON, *method, "--data-root", str(fmnist_root)]
    codes, outputs = _ranks([*args, "--latency-mechanism", "comm-layer"], tmp_path / "emu")
    assert codes == [0, 0], "\n".join(outputs)
    emulated = read_summary(tmp_path / "emu")
    simulated = _simulated(args, tmp_path / "sim")
    assert emulated["backend"] == "emulated" and emulated["time_basis"] == "measured"
    assert emulated["status"] == "finished" and emulated["iterations"] == 8
    assert emulated["bits_sent"] == simulated["bits_sent"]
    assert emulated["final_metric"] == pytest.approx(simulated["final_metric"], abs=0.002)
    rows = read_metrics(tmp_path / "emu")
    assert [r["iteration"] for r in rows] == list(range(1, 9))
    times = [r["sim_time_s"] for r in rows]
    assert times == sorted(times) and times[0] > 0
    tau = 2 if "dd-ef-sgd" in method else 0
    # a message is applied τ iterations after it is sent: none in the first τ iterations
    assert [r["applied_messages"] for r in rows[:tau + 1]] == [0] * tau + [1]
    # a report on message s's transfer rides in message s + τ + 1 with that iteration's T̂
    # sample, which is consumed τ later: row r carries the sample of iteration r − τ, from
    # row 2τ + 2 on (the first report is on message 0)
    reported = {r["iteration"]: r["reported_work_iteration"] for r in rows
                if "reported_work_iteration" in r}
    assert reported == {r: r - tau for r in range(2 * tau + 2, 9)}
    assert all(r["reported_work_s"] > 0 for r in rows if "reported_work_s" in r)
    # comm-layer latency: every due message waited at least l·b after its collective
    config = (tmp_path / "emu" / "config.yaml").read_text()
    assert "latency_mechanism: comm-layer" in config and "time_basis: measured" in config


def _rank_main(monkeypatch, capsys, args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """``python -m decobench.emulated ARGS`` in this process with the torchrun environment
    ``env``: for the checks made before the rank joins the process group (a subprocess pair
    costs 4-5 s of start-up for a one-line error)."""
    from decobench.emulated.entry import main

    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    code = main([*args, "--no-progress", "--no-wandb"])
    return code, capsys.readouterr().err


def test_missing_torchrun_environment_is_a_clear_error(tmp_path, monkeypatch, capsys):
    code, err = _rank_main(monkeypatch, capsys, [*COMMON, "--method", "d-sgd", "--out",
                                                 str(tmp_path / "x")], {})
    assert code == 2
    assert "not set: start the workers with torchrun" in err


def test_world_size_must_match_workers(tmp_path, fmnist_root, monkeypatch, capsys):
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    code, err = _rank_main(monkeypatch, capsys, [*COMMON, "--method", "d-sgd", "--data-root",
                                                 str(fmnist_root), "--workers", "3", "--out",
                                                 str(tmp_path / "emu")], env)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--workers 3 but 2 processes were started" in err
    assert not (tmp_path / "emu" / "summary.json").exists()


def test_a_malformed_host_changes_variable_stops_the_rank_before_training(
        tmp_path, fmnist_root, monkeypatch, capsys):
    """DECOBENCH_HOST_CHANGES (set by python -m decobench.netem.tcp, recorded by rank 0)."""
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
           "DECOBENCH_HOST_CHANGES": "cubic"}
    code, err = _rank_main(monkeypatch, capsys, [*COMMON, "--method", "d-sgd", "--data-root",
                                                 str(fmnist_root), "--workers", "1", "--out",
                                                 str(tmp_path / "emu")], env)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "DECOBENCH_HOST_CHANGES='cubic' is not a JSON list" in err
    assert not (tmp_path / "emu").exists()


ADAPTIVE = {"deco-sgd", "cocktail-sgd-topk", "dga", "cocktail-sgd"}
"""Methods whose (δ, τ) come from the network they measure: the loopback run replays the
simulated run's decisions (--replay-schedule), as a measured network never equals the
simulated one."""


def _emulatable() -> list[str]:
    from decobench.methods import method_specs

    return sorted(name for name, spec in method_specs().items() if spec.emulation is None)


AGREE_IN_MAKE_TEST = ("cocktail-sgd", "d-sgd", "deco-sgd")
"""The loopback agreement runs in make test (a dense all-reduce, CocktailSGD's own wire format
and DeCo's replayed plan, 8-10 s each); the other methods' run in make test-slow."""


@pytest.mark.parametrize("method", [
    pytest.param(name, marks=() if name in AGREE_IN_MAKE_TEST else pytest.mark.slow)
    for name in _emulatable()])
def test_every_emulatable_method_agrees_with_the_simulated_run(tmp_path, fmnist_root, method):
    """Per iteration: the same δ, τ and bits, and the same loss (the mean over the workers)
    within float32 tolerance; the same accuracy at the end."""
    flags = {"deco-sgd": ["--deco-interval", "3"],
             "dd-ef-sgd": ["--delta", "0.05", "--tau", "2"],
             "dga": ["--eval-every", "4"],
             # checks at iterations 2 and 4: the layers leave the critical regime at 4, a
             # decision only rank 0 (worker 0's gradient) can make
             "accordion": ["--accordion-window-iters", "2"]}.get(method, [])
    args = [*COMMON, "--method", method, *flags, "--data-root", str(fmnist_root)]
    simulated = _simulated(args, tmp_path / "sim")
    replay = ["--replay-schedule", str(tmp_path / "sim")] if method in ADAPTIVE else []
    codes, outputs = _ranks([*args, *replay, "--latency-mechanism", "comm-layer"],
                            tmp_path / "emu")
    assert codes == [0, 0], "\n".join(outputs)
    sim_rows, emu_rows = read_metrics(tmp_path / "sim"), read_metrics(tmp_path / "emu")
    assert [r["iteration"] for r in emu_rows] == [r["iteration"] for r in sim_rows]
    for key in ("delta", "tau", "bits", "bits_sent", "applied_messages"):
        assert [r[key] for r in emu_rows] == [r[key] for r in sim_rows], key
    assert [r["loss"] for r in emu_rows] == pytest.approx([r["loss"] for r in sim_rows],
                                                          rel=1e-5)
    emulated = read_summary(tmp_path / "emu")
    assert emulated["final_metric"] == pytest.approx(simulated["final_metric"], abs=0.002)
    if method in ("deco-sgd", "accordion"):
        assert len({r["delta"] for r in sim_rows}) > 1, f"{method} should change δ in 8 iterations"


NOT_EMULATABLE = """
import sys
from decobench.methods import MethodSpec, get_method_spec, register_method
base = get_method_spec("dd-ef-sgd")
register_method(MethodSpec("local-only", "a method that declares it cannot run emulated",
                           base.options, base.build, emulation="it needs a shared disk"))
from decobench.emulated.entry import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_method_that_cannot_run_emulated_says_why(tmp_path, fmnist_root):
    codes, outputs = _ranks([*COMMON, "--method", "local-only", "--data-root",
                             str(fmnist_root)], tmp_path / "emu", entry=["-c", NOT_EMULATABLE])
    assert codes == [2, 2], "\n".join(outputs)
    assert "local-only cannot run on the emulated backend: it needs a shared disk" in outputs[0]
    assert not (tmp_path / "emu" / "summary.json").exists()
