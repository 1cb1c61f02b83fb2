"""Sweeps on clusters (issue 16, part 4): ``--executor ray`` on a real local Ray cluster and
``--executor slurm`` on a real single-node Slurm (started here as root), each writing the
same results and report as the local executor, and retrying a cell whose worker is killed
mid-run so that it resumes from its checkpoint."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from decobench.cli.main import main
from decobench.reports.build import write_report
from decobench.runs.rundir import read_summary

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _suite(tmp_path: Path) -> Path:
    """Two methods on two links; each run takes the whole 2-CPU machine (one at a time),
    checkpointed every iteration. D-SGD and DGA each train on the first link and are
    re-timed on the second."""
    data = {
        "name": "cluster", "description": "a small suite for the cluster executors",
        "defaults": {"batch_size": 16, "eval_every": 10, "checkpoint_every_s": 1e-9},
        "resources": {"cpus": 2, "timeout_min": 10},
        "conditions": {"slow": {"trace": "constant-20mbps-100ms"},
                       "fast": {"constant": {"bandwidth_mbps": 1000, "latency_ms": 10}}},
        "experiments": [{"name": "e", "tasks": ["cnn-fmnist"], "conditions": ["slow", "fast"],
                         "methods": ["d-sgd", "dga"], "workers": [2], "seeds": [0],
                         "max_iters": 60}],
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory, fmnist_root):
    """The suite swept by the local executor: what both clusters must reproduce."""
    folder = tmp_path_factory.mktemp("executors")
    suite = _suite(folder)
    assert main(_command(suite, folder / "local", fmnist_root, "--jobs", "1")) == 0
    return suite, folder / "local"


def _command(suite: Path, out: Path, fmnist_root: Path, *extra: str) -> list[str]:
    return ["sweep", str(suite), "--out", str(out), "--no-wandb", "--no-progress",
            "--data-root", f"cnn-fmnist={fmnist_root}", *extra]


def _results(out: Path) -> dict[str, tuple[dict, list[dict]]]:
    found = {}
    for run in sorted((out / "runs").iterdir()):
        summary = read_summary(run)
        for key in ("wall_time_s", "trace_path"):
            summary.pop(key)
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        for row in rows:
            row.pop("wall_time_s", None)
        found[run.name] = (summary, rows)
    return found


def _report(out: Path) -> dict[str, bytes]:
    written = out.parent / f"{out.name}-report"
    write_report(out, written)
    return {str(p.relative_to(written)): p.read_bytes()
            for p in sorted(written.rglob("*")) if p.is_file()}


def _kill_a_cell_mid_run(process: subprocess.Popen, out: Path, find_pids) -> None:
    """Wait until a cell has checkpointed 20 iterations, then SIGKILL its worker process."""
    deadline = time.monotonic() + 300
    runs = out / "runs"
    while True:
        assert process.poll() is None, "the sweep ended before a cell could be killed"
        assert time.monotonic() < deadline, "no cell reached 20 iterations"
        staging = [s for s in runs.glob(".staging-*") if (s / "checkpoint.pt").is_file()
                   and (s / "metrics.jsonl.partial").is_file()
                   and len((s / "metrics.jsonl.partial").read_text().splitlines()) >= 20]
        pids = find_pids() if staging else []
        if pids:
            break
        time.sleep(0.05)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def _pids(pattern: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_cluster():
    """A real Ray head (2 CPUs) started from this virtual environment, and stopped after."""
    pytest.importorskip("ray")
    if shutil.which("pgrep") is None:
        pytest.skip("pgrep is needed to find the Ray worker to kill")
    port = _free_port()
    temp = Path(f"/tmp/rt{port}")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen([str(BIN / "ray"), "start", "--head", "--block", f"--port={port}",
                             "--num-cpus=2", "--disable-usage-stats",
                             "--include-dashboard=false", f"--temp-dir={temp}"],
                            env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while subprocess.run([str(BIN / "ray"), "status", f"--address={address}"], env=env,
                         capture_output=True).returncode != 0:
        if head.poll() is not None or time.monotonic() > deadline:
            os.killpg(head.pid, signal.SIGKILL)
            pytest.skip("a local Ray cluster did not start here")
        time.sleep(0.5)
    try:
        yield address, env
    finally:                           # `ray stop` would stop every Ray cluster on the host
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(head.pid, signal.SIGKILL)     # its raylet, GCS and workers
        except ProcessLookupError:
            pass
        head.wait()
        shutil.rmtree(temp, ignore_errors=True)
        assert not _pids(str(temp)), "a Ray process outlived its cluster"


@pytest.mark.slow  # a live cluster, about 35 s (make test-slow)
def test_a_sweep_on_ray_equals_the_local_one_and_resumes_a_killed_cell(
        tmp_path, fmnist_root, local_sweep, ray_cluster):
    address, env = ray_cluster
    suite, local = local_sweep
    out = tmp_path / "ray"
    process = subprocess.Popen(
        [sys.executable, "-m", "decobench.cli.main",
         *_command(suite, out, fmnist_root, "--executor", "ray", "--ray-address", address)],
        cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    _kill_a_cell_mid_run(process, out, lambda: _pids("ray::cnn-fmnist__"))  # task name
    _, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    assert "as Ray tasks (127.0.0.1" in err and "2 trained, 2 re-timed" in err
    assert "resuming" in err                          # the retried task went on from its checkpoint
    assert _results(out) == _results(local)
    assert _report(out) == _report(local)


SLURM_TOOLS = ("slurmctld", "slurmd", "sbatch", "sacct", "munged", "slurmdbd", "mariadbd",
               "mariadb-install-db")


@pytest.fixture
def slurm_cluster(tmp_path_factory):
    """A real single-node Slurm with accounting, started as root by
    tests/slurm_single_node.sh (Debian packages that `make tools` installs), and stopped."""
    pytest.importorskip("submitit")
    if os.geteuid() != 0:
        pytest.skip("starting a Slurm cluster needs root")
    missing = [tool for tool in SLURM_TOOLS if shutil.which(tool) is None
               and not Path("/usr/sbin", tool).exists()]
    if missing:
        pytest.skip(f"Slurm is not installed here (missing {', '.join(missing)}; `make tools` "
                    "installs slurmctld, slurmd, slurm-client, munge, slurmdbd and "
                    "mariadb-server as root)")
    if shutil.which("pgrep") is None:
        pytest.skip("pgrep is needed to find the Slurm job to kill")
    root = Path(f"/tmp/slurm-{os.getpid()}")
    script = REPO / "tests" / "slurm_single_node.sh"
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf"),
           "PATH": f"{os.environ.get('PATH', '')}:/usr/sbin"}
    started = subprocess.run(["bash", str(script), "up", str(root)], env=env,
                             capture_output=True, text=True, timeout=180)
    try:
        if started.returncode != 0:
            pytest.skip(f"a single-node Slurm did not start here: {started.stderr.strip()}")
        yield env
    finally:
        subprocess.run(["bash", str(script), "down", str(root)], env=env, timeout=120)


@pytest.mark.slow  # a live cluster, about 35 s (make test-slow)
def test_a_sweep_on_slurm_equals_the_local_one_and_resumes_a_killed_cell(
        tmp_path, fmnist_root, local_sweep, slurm_cluster):
    env = slurm_cluster
    suite, local = local_sweep
    out = tmp_path / "slurm"
    process = subprocess.Popen(
        [sys.executable, "-m", "decobench.cli.main",
         *_command(suite, out, fmnist_root, "--executor", "slurm", "--slurm-partition",
                   "debug")],
        cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    _kill_a_cell_mid_run(process, out, lambda: _pids("submitit.core._submit"))
    _, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    assert "as Slurm jobs" in err and "2 trained, 2 re-timed" in err
    logs = "".join(p.read_text() for p in (out / "slurm").rglob("*.err"))
    assert "resuming" in logs                         # the resubmitted job used the checkpoint
    # a job's result exists before Slurm ends it, and slurmdbd records jobs asynchronously
    deadline = time.monotonic() + 60
    while True:
        accounted = subprocess.run(["sacct", "-n", "-X", "-o", "State"], env=env,
                                   capture_output=True, text=True).stdout.split()
        if (len(accounted) >= 5 and "RUNNING" not in accounted
                and "COMPLETING" not in accounted):
            break
        assert time.monotonic() < deadline, accounted
        time.sleep(0.5)
    assert sorted(accounted) == ["COMPLETED"] * 4 + ["FAILED"]   # 4 cells, 1 killed and rerun
    assert _results(out) == _results(local)
    assert _report(out) == _report(local)


@pytest.mark.parametrize(("flags", "fragment"), [
    (["--ray-address", "auto"], "--ray-address needs --executor ray"),
    (["--slurm-partition", "debug"], "--slurm-partition needs --executor slurm"),
    (["--executor", "ray", "--retries", "-1"], "--retries must be >= 0"),
    (["--executor", "mpi"], "invalid choice: 'mpi'"),
])
def test_bad_executor_flags_are_one_line(tmp_path, fmnist_root, capsys, flags, fragment):
    out = tmp_path / "out"
    assert main(_command(_suite(tmp_path), out, fmnist_root, *flags)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0], err
    assert not out.exists()


def test_bad_resources_name_the_field(tmp_path, fmnist_root, capsys):
    suite = _suite(tmp_path)
    data = yaml.safe_load(suite.read_text())
    data["resources"] = {"cpus": 0}
    suite.write_text(yaml.safe_dump(data))
    assert main(_command(suite, tmp_path / "out", fmnist_root)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "resources.cpus" in err[0], err
