"""Checkpoints and resume (issue 15): a simulated run killed mid-way and resumed with
``--resume`` ends with the same metrics and summary as an uninterrupted run; a sweep killed
mid-cell continues that cell from its checkpoint; resuming what cannot be resumed is one
line."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from decobench.cli import main
from decobench.trajectory import TRAJECTORY, Trajectory

REPO = Path(__file__).resolve().parents[1]
BASE = ["--task", "cnn-fmnist", "--trace", "wan-200ms-lowbw-varying", "--workers", "2",
        "--batch-size", "8", "--max-iters", "60", "--eval-every", "10", "--seed", "3", "--no-wandb",
        "--no-progress"]


def _clean(path: Path) -> tuple[list[dict], dict]:
    """metrics.jsonl and summary.json without the wall-clock fields."""
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("wall_time_s", None)
    summary = json.loads((path / "summary.json").read_text())
    summary.pop("wall_time_s")
    return rows, summary


def _kill_after_checkpoint(process: subprocess.Popen, folder: Path, rows: int = 20) -> None:
    partial = folder / "metrics.jsonl.partial"
    deadline = time.monotonic() + 240
    while not ((folder / "checkpoint.pt").is_file() and partial.is_file()
               and len(partial.read_text().splitlines()) >= rows):
        assert process.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()


@pytest.mark.parametrize("method", [["--method", "deco-sgd", "--deco-interval", "5"],
                                    ["--method", "dga"]], ids=["deco-sgd", "dga"])
def test_a_killed_run_resumes_to_the_uninterrupted_result(tmp_path, fmnist_root, method):
    args = [*BASE, *method, "--data-root", str(fmnist_root)]
    assert main(["run", *args, "--out", str(tmp_path / "whole")]) == 0
    cut = tmp_path / "cut"
    process = subprocess.Popen([sys.executable, "-m", "decobench.cli", "run", *args, "--out",
                                str(cut), "--checkpoint-every-s", "1e-9"], cwd=REPO,
                               stderr=subprocess.DEVNULL)
    _kill_after_checkpoint(process, cut)
    written = len((cut / "metrics.jsonl.partial").read_text().splitlines())
    assert 20 <= written < 60
    resumed = subprocess.run([sys.executable, "-m", "decobench.cli", "run", *args, "--out",
                              str(cut), "--resume"], cwd=REPO, capture_output=True, text=True,
                             timeout=240)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr and "after iteration" in resumed.stderr
    assert _clean(cut) == _clean(tmp_path / "whole")
    assert sorted(p.name for p in cut.iterdir()) == ["config.yaml", "metrics.jsonl",
                                                     "summary.json"]


def test_what_cannot_be_resumed_is_one_line(tmp_path, fmnist_root, capsys):
    args = ["run", *BASE, "--method", "d-sgd", "--max-iters", "4", "--data-root",
            str(fmnist_root), "--out", str(tmp_path / "r")]

    def error(argv, fragment):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and fragment in err[0], err

    error([*args, "--resume"], "--resume: no checkpoint in")
    error([*args, "--resume", "--overwrite"], "give one of them")
    assert main([*args, "--checkpoint-every-s", "1e-9"]) == 0
    error([*args, "--resume"], "holds a finished run")
    # a checkpoint of another configuration
    folder = tmp_path / "other"
    process = subprocess.Popen([sys.executable, "-m", "decobench.cli", "run", *BASE,
                                "--method", "d-sgd", "--data-root", str(fmnist_root), "--out",
                                str(folder), "--checkpoint-every-s", "1e-9"], cwd=REPO,
                               stderr=subprocess.DEVNULL)
    _kill_after_checkpoint(process, folder, rows=3)
    error(["run", *BASE, "--method", "d-sgd", "--seed", "4", "--data-root", str(fmnist_root),
           "--out", str(folder), "--resume"], "was made by a different configuration")


def test_a_killed_sweep_continues_its_cell_from_the_checkpoint(tmp_path, fmnist_root):
    suite = {"name": "ck", "description": "one cell, checkpointed every iteration",
             "defaults": {"checkpoint_every_s": 1e-9, "eval_every": 10, "batch_size": 8},
             "conditions": {"wan": {"trace": "wan-200ms-lowbw-varying"}},
             "experiments": [{"name": "e", "tasks": ["cnn-fmnist"], "conditions": ["wan"],
                              "methods": ["deco-sgd"], "workers": [2], "seeds": [0],
                              "max_iters": 60}]}
    path = tmp_path / "ck.yaml"
    path.write_text(yaml.safe_dump(suite))

    def command(out):
        return [sys.executable, "-m", "decobench.cli", "sweep", str(path), "--out", str(out),
                "--jobs", "1", "--no-wandb", "--no-progress", "--data-root",
                f"cnn-fmnist={fmnist_root}"]

    assert subprocess.run(command(tmp_path / "whole"), cwd=REPO, capture_output=True,
                          timeout=240).returncode == 0
    out = tmp_path / "cut"
    process = subprocess.Popen(command(out), cwd=REPO, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not list((out / "runs").glob(".staging-*/checkpoint.pt")):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    staging = next((out / "runs").glob(".staging-*"))
    _kill_after_checkpoint(process, staging)
    rerun = subprocess.run(command(out), cwd=REPO, capture_output=True, text=True, timeout=240)
    assert rerun.returncode == 0, rerun.stderr
    assert "resuming" in rerun.stderr
    (name,) = [p.name for p in (out / "runs").iterdir()]
    assert _clean(out / "runs" / name) == _clean(tmp_path / "whole" / "runs" / name)
    # the trajectory recorded for reuse went on from the checkpoint too
    resumed, whole = (Trajectory.load(folder / "runs" / name / TRAJECTORY)
                      for folder in (out, tmp_path / "whole"))
    assert len(resumed.steps) == 60 and resumed == whole
    shutil.rmtree(tmp_path / "whole")
