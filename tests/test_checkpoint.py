"""Checkpoints and resume (issue 15): a simulated run killed mid-way and resumed with
``--resume`` ends with the same metrics and summary as an uninterrupted run; a sweep killed
mid-cell continues that cell from its checkpoint; resuming what cannot be resumed is one
line.

The killed runs are real processes, killed with SIGKILL. In make test a sweep is killed
(its worker runs the cell as `decobench run` does) and resumed in this process (the
checkpoint still crosses from the killed process to another, and a start-up of torch is
spared), and a DGA run stopped in this process resumes with ``--resume``; `decobench run`
killed and resumed is in make test-slow."""

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
from e2e_shared import cells_in_this_process

from decobench.cli.main import main
from decobench.runs.checkpoint import Checkpointer
from decobench.runs.rundir import TRAJECTORY
from decobench.runs.trajectory import Trajectory

REPO = Path(__file__).resolve().parents[1]
BASE = ["--task", "cnn-fmnist", "--trace", "wan-200ms-lowbw-varying", "--workers", "2",
        "--batch-size", "8", "--max-iters", "40", "--eval-every", "10", "--seed", "3", "--no-wandb",
        "--no-progress"]


def _clean(path: Path) -> tuple[list[dict], dict]:
    """metrics.jsonl and summary.json without the wall-clock fields."""
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("wall_time_s", None)
    summary = json.loads((path / "summary.json").read_text())
    summary.pop("wall_time_s")
    return rows, summary


def _kill_after_checkpoint(process: subprocess.Popen, folder: Path, rows: int = 10) -> None:
    partial = folder / "metrics.jsonl.partial"
    deadline = time.monotonic() + 240    # a hang guard only: the loop ends at the checkpoint
    while not ((folder / "checkpoint.pt").is_file() and partial.is_file()
               and len(partial.read_text().splitlines()) >= rows):
        assert process.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()


def _stopped_after_checkpoint(monkeypatch, argv: list[str], saved: int, stop: int) -> None:
    """``main(argv)`` in this process with a checkpoint after every iteration up to
    ``saved``, stopped (as by Ctrl-C) after iteration ``stop``: its folder then holds the
    checkpoint of ``saved`` and metrics rows past it, as a killed run's does."""
    save = Checkpointer.save

    def save_then_stop(self, state):
        if state["iteration"] <= saved:
            save(self, state)
        if state["iteration"] >= stop:
            raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(Checkpointer, "save", save_then_stop)
        assert main([*argv, "--checkpoint-every-s", "1e-9"]) == 130


@pytest.mark.slow  # make test-slow: in make test, a SIGKILLed DeCo-SGD run resumes to the
# uninterrupted result in test_a_killed_sweep_continues_its_cell_from_the_checkpoint (the
# sweep's worker runs the same code), and `run --resume` of a DGA run that stopped after a
# checkpoint in test_a_dga_run_stopped_after_a_checkpoint_resumes_to_the_uninterrupted_result
@pytest.mark.parametrize("method", [["--method", "deco-sgd", "--deco-interval", "5"],
                                    ["--method", "dga"]], ids=["deco-sgd", "dga"])
def test_a_killed_run_resumes_to_the_uninterrupted_result(tmp_path, fmnist_root, method):
    args = [*BASE, *method, "--data-root", str(fmnist_root)]
    assert main(["run", *args, "--out", str(tmp_path / "whole")]) == 0
    cut = tmp_path / "cut"
    process = subprocess.Popen([sys.executable, "-m", "decobench.cli.main", "run", *args, "--out",
                                str(cut), "--checkpoint-every-s", "1e-9"], cwd=REPO,
                               stderr=subprocess.DEVNULL)
    _kill_after_checkpoint(process, cut)
    written = len((cut / "metrics.jsonl.partial").read_text().splitlines())
    assert 10 <= written < 40
    resumed = subprocess.run([sys.executable, "-m", "decobench.cli.main", "run", *args, "--out",
                              str(cut), "--resume"], cwd=REPO, capture_output=True, text=True,
                             timeout=240)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr and "after iteration" in resumed.stderr
    assert _clean(cut) == _clean(tmp_path / "whole")
    assert sorted(p.name for p in cut.iterdir()) == ["config.yaml", "metrics.jsonl",
                                                     "summary.json"]


def test_a_dga_run_stopped_after_a_checkpoint_resumes_to_the_uninterrupted_result(
        tmp_path, fmnist_root, monkeypatch, capsys):
    """DGA's state (worker models, the delay it chose, the updates in flight) round-trips
    through a checkpoint: stopped in this process after iteration 7 with the checkpoint of
    iteration 5, resumed to the uninterrupted run's metrics and summary.

    The checkpoint also keeps the wall time counted so far, and the resumed run counts on
    from it: with the checkpoint's count raised by 1,000 s, every row after it and the summary
    count at least 1,000 s (a lower bound, whatever the load; they would start from 0)."""
    args = ["run", *BASE, "--max-iters", "12", "--method", "dga", "--data-root",
            str(fmnist_root)]
    assert main([*args, "--out", str(tmp_path / "whole")]) == 0
    cut = tmp_path / "cut"
    save = Checkpointer.save
    with monkeypatch.context() as patched:
        patched.setattr(Checkpointer, "save", lambda self, state: save(
            self, {**state, "wall_time_s": state["wall_time_s"] + 1000.0}))
        _stopped_after_checkpoint(monkeypatch, [*args, "--out", str(cut)], saved=5, stop=7)
    assert len((cut / "metrics.jsonl.partial").read_text().splitlines()) == 7
    capsys.readouterr()
    assert main([*args, "--out", str(cut), "--resume"]) == 0
    assert "after iteration 5" in capsys.readouterr().err
    assert _clean(cut) == _clean(tmp_path / "whole")
    rows = [json.loads(line) for line in (cut / "metrics.jsonl").read_text().splitlines()]
    assert [row["wall_time_s"] >= 1000.0 for row in rows] == [
        row["iteration"] > 5 for row in rows]
    assert json.loads((cut / "summary.json").read_text())["wall_time_s"] >= 1000.0
    assert sorted(p.name for p in cut.iterdir()) == ["config.yaml", "metrics.jsonl",
                                                     "summary.json"]


def test_what_cannot_be_resumed_is_one_line(tmp_path, fmnist_root, capsys, monkeypatch):
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
    _stopped_after_checkpoint(monkeypatch, [*args[:-1], str(folder)], saved=1, stop=2)
    capsys.readouterr()
    error(["run", *BASE, "--method", "d-sgd", "--max-iters", "4", "--seed", "4",
           "--data-root", str(fmnist_root), "--out", str(folder), "--resume"],
          "was made by a different configuration")


def test_a_killed_sweep_continues_its_cell_from_the_checkpoint(tmp_path, fmnist_root, capfd):
    suite = {"name": "ck", "description": "one cell, checkpointed every iteration",
             "defaults": {"checkpoint_every_s": 1e-9, "eval_every": 10, "batch_size": 8},
             "conditions": {"wan": {"trace": "wan-200ms-lowbw-varying"}},
             "experiments": [{"name": "e", "tasks": ["cnn-fmnist"], "conditions": ["wan"],
                              "methods": ["deco-sgd"], "workers": [2], "seeds": [0],
                              "max_iters": 20}]}
    path = tmp_path / "ck.yaml"
    path.write_text(yaml.safe_dump(suite))

    def command(out):
        return ["sweep", str(path), "--out", str(out), "--jobs", "1", "--no-wandb",
                "--no-progress", "--data-root", f"cnn-fmnist={fmnist_root}"]

    # the uninterrupted sweep and the resumed one run their cell in this process
    # (e2e_shared; a worker process costs seconds of start-up); the killed one is a real
    # sweep with its real worker process
    with cells_in_this_process():
        assert main(command(tmp_path / "whole")) == 0
    out = tmp_path / "cut"
    process = subprocess.Popen([sys.executable, "-m", "decobench.cli.main", *command(out)],
                               cwd=REPO, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240    # a hang guard only: the loop ends at a checkpoint
    while not list((out / "runs").glob(".staging-*/checkpoint.pt")):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    staging = next((out / "runs").glob(".staging-*"))
    _kill_after_checkpoint(process, staging)
    capfd.readouterr()
    with cells_in_this_process():
        assert main(command(out)) == 0
    assert "resuming" in capfd.readouterr().err       # written by the cell's run
    (name,) = [p.name for p in (out / "runs").iterdir()]
    assert _clean(out / "runs" / name) == _clean(tmp_path / "whole" / "runs" / name)
    # the checkpoint went when the cell finished, and so did any file a killed save left
    assert not [p.name for p in (out / "runs" / name).iterdir() if "checkpoint" in p.name]
    # the trajectory recorded for reuse went on from the checkpoint too
    resumed, whole = (Trajectory.load(folder / "runs" / name / TRAJECTORY)
                      for folder in (out, tmp_path / "whole"))
    assert len(resumed.steps) == 20 and resumed == whole
    shutil.rmtree(tmp_path / "whole")


def test_a_checkpoint_written_before_the_floors_still_loads(tmp_path, monkeypatch):
    """0.2.0 moved the core's modules (CHANGELOG.md). A 0.1.0 checkpoint names a class by
    its old module, e.g. ``decobench.estimators.LinkEstimator``: it loads from the new one.
    The old name is made here the way 0.1.0 had it: the class's module said so on save."""
    from decobench.planning.estimators import LinkEstimator
    from decobench.runs.checkpoint import MOVED_MODULES, load_checkpoint

    assert MOVED_MODULES["decobench.estimators"] == LinkEstimator.__module__
    estimator = LinkEstimator()
    old = type(sys)("decobench.estimators")
    old.LinkEstimator = LinkEstimator
    monkeypatch.setitem(sys.modules, "decobench.estimators", old)
    monkeypatch.setattr(LinkEstimator, "__module__", "decobench.estimators")
    Checkpointer(tmp_path / "checkpoint.pt", None, "abc").save({"estimator": estimator})
    monkeypatch.undo()
    raw = (tmp_path / "checkpoint.pt").read_bytes()
    assert b"cdecobench.estimators\nLinkEstimator" in raw
    state = load_checkpoint(tmp_path / "checkpoint.pt", "abc")
    assert type(state["estimator"]) is LinkEstimator
