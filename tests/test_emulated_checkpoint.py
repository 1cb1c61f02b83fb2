"""Checkpoints of an emulated run (issue 15): two real ranks on loopback, killed mid-run
(here one rank was writing a newer checkpoint than the other), resume with ``--resume``:
every rank restores the newest iteration all of them hold, and the resumed run follows the
same trajectory as an uninterrupted one (every row equal but the measured times). The bookkeeping that makes "the same iteration" hold is tested on its own.
"""

import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from decobench.errors import DecobenchError
from decobench.runs.checkpoint import RankCheckpointer, common_iteration
from decobench.runs.rundir import RANK_CHECKPOINTS, read_metrics, read_summary

ARGS = ["--task", "cnn-fmnist", "--profile", "cpu", "--workers", "2", "--trace",
        "constant-1gbps-10ms", "--topology", "ring", "--max-iters", "24", "--eval-every", "12",
        "--seed", "1", "--method", "dd-ef-sgd", "--delta", "0.05", "--tau", "2",
        "--no-progress", "--no-wandb"]


def _start(args: list[str]) -> list[subprocess.Popen]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen([sys.executable, "-m", "decobench.emulated", *args],
                                      env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    return procs


def _held(folder: Path, rank: int) -> list[int]:
    return sorted(int(p.stem.split("-")[1]) for p in folder.glob(f"rank{rank}-*.pt"))


def test_killed_ranks_resume_from_the_same_iteration(tmp_path, fmnist_root):
    out = tmp_path / "emu"
    args = [*ARGS, "--data-root", str(fmnist_root), "--latency-mechanism", "comm-layer",
            "--out", str(out)]
    procs = _start([*args, "--checkpoint-every-s", "0.02"])
    folder = out / RANK_CHECKPOINTS
    deadline = time.monotonic() + 240    # a hang guard only: the loop ends at the checkpoint
    while not (_held(folder, 0) and _held(folder, 1) and min(_held(folder, 1)) >= 10):
        assert all(p.poll() is None for p in procs), "the run ended before it was killed"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for p in procs:
        p.send_signal(signal.SIGKILL)
    for p in procs:
        p.wait()
    assert not (out / "summary.json").exists()
    # rank 0 holds a newer checkpoint than rank 1 (as when a kill cuts rank 1's save)
    newest = _held(folder, 1)[-1]
    torch.save({"fingerprint": "not restored"}, folder / f"rank0-{newest + 3:09d}.pt")
    procs = _start([*args, "--resume"])
    outputs = [p.communicate(timeout=240)[0] for p in procs]   # timeouts: hang guards only
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs)
    assert f"after iteration {newest} (the newest checkpoint every rank holds)" in outputs[0]
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "metrics.jsonl",
                                                     "summary.json"]

    whole = tmp_path / "whole"
    procs = _start([*args[:-1], str(whole)])
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs)
    rows, reference = read_metrics(out), read_metrics(whole)
    assert [r["iteration"] for r in rows] == list(range(1, 25))
    measured = {"sim_time_s", "wall_time_s", "bubble_s", "compute_s", "wait_s", "tx_s",
                "tx_start_s", "arrive_s", "metric_time_s", "reported_work_s"}
    for row, ref in zip(rows, reference, strict=True):   # the same computation, bit for bit
        assert {k: v for k, v in row.items() if k not in measured} == \
            {k: v for k, v in ref.items() if k not in measured}
    times = [r["sim_time_s"] for r in rows]
    assert times == sorted(times)              # the measured clock continued, not restarted
    summary = read_summary(out)
    assert summary["iterations"] == 24
    assert summary["final_metric"] == read_summary(whole)["final_metric"]


@pytest.mark.slow  # about 5 s for two rank processes (make test-slow); in make test,
# test_resume_without_a_common_checkpoint_stops_every_rank checks that every rank raises,
# and test_emulated_ranks' test_a_method_that_cannot_run_emulated_says_why that a rank's
# error ends it with exit 2 and its line
def test_resume_without_checkpoints_stops_every_rank_with_one_line(tmp_path, fmnist_root):
    out = tmp_path / "emu"
    out.mkdir()
    procs = _start([*ARGS, "--data-root", str(fmnist_root), "--latency-mechanism",
                    "comm-layer", "--out", str(out), "--resume"])
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [2, 2], outputs
    for rank, text in enumerate(outputs):
        assert text.strip().splitlines()[-1].startswith(f"decobench rank {rank}: error: "
                                                        "--resume: no checkpoint every rank")


def _checkpointer(tmp_path, rank, fingerprint="run"):
    return RankCheckpointer(tmp_path / RANK_CHECKPOINTS, rank, every_s=None,
                            fingerprint=fingerprint)


def test_rank_checkpoints_keep_what_every_rank_holds(tmp_path):
    zero, one = _checkpointer(tmp_path, 0), _checkpointer(tmp_path, 1)
    for it in (4, 8, 12):
        zero.save({"iteration": it, "x": torch.tensor([float(it)])})
    for it in (4, 8):
        one.save({"iteration": it})
    assert zero.latest == 12 and zero.iterations() == [4, 8, 12]
    assert common_iteration([zero.iterations(), one.iterations()], tmp_path) == 8
    zero.prune(8)                      # every rank reported saving 8: 4 can go
    assert zero.iterations() == [8, 12] and one.iterations() == [4, 8]
    assert torch.equal(zero.load(12)["x"], torch.tensor([12.0]))
    with pytest.raises(DecobenchError, match="different configuration"):
        _checkpointer(tmp_path, 0, fingerprint="other").load(12)
    with pytest.raises(DecobenchError, match=r"rank\(s\) 1 hold none"):
        common_iteration([[8], []], tmp_path)
    with pytest.raises(DecobenchError, match="no iteration in common"):
        common_iteration([[8], [4]], tmp_path)
    zero.discard_after(8)              # resumed from 8: the interrupted attempt's 12 goes
    assert zero.iterations() == [8]
    zero.remove()
    assert zero.iterations() == [] and one.iterations() == [4, 8]


@pytest.mark.parametrize("held", [{}, {0: [4, 8]}, {0: [4], 1: [8]}],
                         ids=["none", "rank-1-none", "none-in-common"])
def test_resume_without_a_common_checkpoint_stops_every_rank(tmp_path, monkeypatch, held):
    """On --resume every rank gathers the iterations every rank holds (here the two ranks
    in turn, the all-gather answered from both ranks' files), so when no iteration is common
    to all, every rank stops with the same error instead of one rank waiting for the
    others."""
    from decobench.emulated import worker

    ranks = [_checkpointer(tmp_path, rank) for rank in range(2)]
    for rank, iterations in held.items():
        for it in iterations:
            ranks[rank].save({"iteration": it})

    def all_gather_object(gathered, mine):
        gathered[:] = [checkpointer.iterations() for checkpointer in ranks]

    monkeypatch.setattr(worker.dist, "all_gather_object", all_gather_object)
    for rank in range(2):
        env = worker.RankEnvironment.from_environ({"RANK": str(rank), "WORLD_SIZE": "2",
                                                   "MASTER_ADDR": "-", "MASTER_PORT": "0"})
        with pytest.raises(DecobenchError, match="--resume: no checkpoint every rank can "
                                                 "restore"):
            worker.agree_on_checkpoint(ranks[rank], env, tmp_path, torch.device("cpu"))
    assert [r.iterations() for r in ranks] == [held.get(0, []), held.get(1, [])]


def test_ranks_delete_a_checkpoint_only_once_every_rank_reported_a_newer_one(tmp_path):
    from decobench.emulated.transport import FLAG_CHECKPOINT, DistributedTransport

    ranks = []
    for rank in range(2):
        transport = DistributedTransport(rank, 2, "ring", trace_for=None,
                                         latency_mechanism="comm-layer", timeout_s=1.0,
                                         device=torch.device("cpu"),
                                         checkpoints=_checkpointer(tmp_path, rank))
        for it in (3, 6):
            transport.checkpoints.save({"iteration": it})
        ranks.append(transport)
    # headers of one message as both ranks read it: rank 1 reports 3, rank 0 reports 6
    for transport in ranks:
        transport._learn_commit([{"saved_iteration": 6.0}, {"saved_iteration": 3.0}])
        assert transport.committed == 3 and transport.checkpoints.iterations() == [3, 6]
        transport._learn_commit([{"saved_iteration": 6.0}, {"saved_iteration": math.nan}])
        assert transport.committed == 3
        transport._learn_commit([{"saved_iteration": 6.0}, {"saved_iteration": 6.0}])
        assert transport.committed == 6 and transport.checkpoints.iterations() == [6]
    # only the leader asks; every rank saves after the iteration that applies the request
    leader, other = ranks
    assert not other.checkpoint_now(5, due=True) and not other._raise_checkpoint
    assert not leader.checkpoint_now(5, due=True) and leader._raise_checkpoint
    assert not leader.checkpoint_now(6, due=True)         # asked once, not again
    for transport in ranks:
        transport.checkpoint_after = 7                    # what due() sets on FLAG_CHECKPOINT
        assert transport.checkpoint_now(7, due=False)
        assert not transport.checkpoint_now(7, due=False)
    assert FLAG_CHECKPOINT & ~3 == FLAG_CHECKPOINT        # its own bit beside stop/diverged
