"""One run lifecycle (decobench.runs.lifecycle): the run directory both backends write, and
``failure.json``'s one writer and schema (docs/design.md §9.3)."""

from __future__ import annotations

import json

from decobench.cli.main import main
from decobench.runs.lifecycle import FAILURE_FIELDS, RunRecord, record_failure
from decobench.runs.rundir import FAILURE, METRICS, PARTIAL_SUFFIX, SUMMARY
from decobench.runs.tracking import RunTracker

BASE = ["--task", "cnn-fmnist", "--trace", "wan-200ms-lowbw-varying", "--workers", "2",
        "--batch-size", "8", "--max-iters", "6", "--eval-every", "3", "--seed", "3",
        "--no-wandb", "--no-progress", "--method", "d-sgd"]


def test_failure_record_has_one_schema_and_merges_what_was_there(tmp_path):
    """Rank 0 writes first (its error, the rank it lost); the launcher writes after it: the
    launcher's message stands, rank 0's becomes ``earlier_error``, its lost rank is kept
    when the launcher names none."""
    first = record_failure(tmp_path, "rank 0: lost rank 1 during the collective of "
                           "iteration 12", backend="emulated", reported_by="rank 0",
                           error_type="PeerLost", lost_ranks=[1])
    assert tuple(first) == FAILURE_FIELDS and first["earlier_error"] is None
    second = record_failure(tmp_path, "emulated run failed: rank 0 exited with status 1",
                            backend="emulated", reported_by="launcher",
                            exit_statuses={0: 1, 1: -9})
    on_disk = json.loads((tmp_path / FAILURE).read_text())
    assert on_disk == second and tuple(on_disk) == FAILURE_FIELDS
    assert on_disk["earlier_error"].startswith("rank 0: lost rank 1")
    assert on_disk["lost_ranks"] == [1] and on_disk["exit_statuses"] == {"0": 1, "1": -9}
    assert on_disk["reported_by"] == "launcher" and on_disk["status"] == "failed"


def test_a_record_writes_config_metrics_and_summary_last(tmp_path):
    seen = []

    class Tracker(RunTracker):
        def log(self, row):
            seen.append(row["iteration"])

        def finish(self, summary):
            seen.append("finish")

        def fail(self, exc):
            seen.append("fail")

    record = RunRecord(tmp_path / "r", "simulated", lambda resolved, path: Tracker())
    record.open()
    record.begin({"task": "t"}, files={"extra.json": "{}"})
    record.log({"iteration": 1})
    record.log({"iteration": 2}, track=False)
    assert (tmp_path / "r" / (METRICS + PARTIAL_SUFFIX)).is_file()
    record.finish({"status": "finished"})
    names = {p.name for p in (tmp_path / "r").iterdir()}
    assert names == {"config.yaml", "extra.json", METRICS, SUMMARY}
    assert seen == [1, "finish"]
    assert len((tmp_path / "r" / METRICS).read_text().splitlines()) == 2


def test_a_failed_simulated_run_leaves_its_rows_and_a_failure_record(tmp_path, fmnist_root,
                                                                    monkeypatch, capsys):
    """A simulated run that fails mid-run writes what rank 0 of an emulated run writes: the
    partial metrics, ``failure.json`` and no summary; ``--resume`` would remove the record."""
    from decobench.runs import lifecycle

    log = lifecycle.RunRecord.log

    def log_then_fail(self, row, track=True):
        log(self, row, track)
        if row["iteration"] == 4:
            raise RuntimeError("disk full")

    monkeypatch.setattr(lifecycle.RunRecord, "log", log_then_fail)
    out = tmp_path / "r"
    assert main(["run", *BASE, "--data-root", str(fmnist_root), "--out", str(out)]) != 0
    assert "disk full" in capsys.readouterr().err
    failure = json.loads((out / FAILURE).read_text())
    assert tuple(failure) == FAILURE_FIELDS
    assert (failure["backend"], failure["reported_by"], failure["error"],
            failure["error_type"]) == ("simulated", "simulated", "disk full", "RuntimeError")
    assert not (out / SUMMARY).exists()
    rows = (out / (METRICS + PARTIAL_SUFFIX)).read_text().splitlines()
    assert [json.loads(r)["iteration"] for r in rows] == [1, 2, 3, 4]
    monkeypatch.undo()
    assert main(["run", *BASE, "--data-root", str(fmnist_root), "--out", str(out)]) == 0
    assert not (out / FAILURE).exists() and (out / SUMMARY).is_file()


def test_one_reader_serves_resume_and_names_a_bad_line(tmp_path):
    """``read_metrics``: a finished run's bad line is an error naming file and line; an
    interrupted run's partial file is read up to the line the interruption cut, which is
    what ``RunDirectory.resume`` keeps (rows after the checkpoint's iteration dropped)."""
    import pytest

    from decobench.errors import DecobenchError
    from decobench.runs.rundir import RunDirectory, dumps_row, read_metrics

    rows = [{"iteration": i, "loss": 1.0 / i} for i in (1, 2, 3)]
    text = "".join(dumps_row(r) + "\n" for r in rows)
    (tmp_path / (METRICS + PARTIAL_SUFFIX)).write_text(text + '{"iteration": 4, "lo')
    assert read_metrics(tmp_path, partial=True) == rows
    RunDirectory.resume(tmp_path, 2).abandon_metrics()
    kept = "".join(dumps_row(r) + "\n" for r in rows[:2])
    assert (tmp_path / (METRICS + PARTIAL_SUFFIX)).read_text() == kept
    (tmp_path / METRICS).write_text(text + "not json\n")
    with pytest.raises(DecobenchError, match=r"metrics.jsonl:4: not JSON"):
        read_metrics(tmp_path)
