"""When a run evaluates and how finely its time to target is bracketed (decobench.training.evaluation),
and that fine evaluation near the target changes nothing but the evaluations."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decobench.cli.main import main
from decobench.runs.rundir import read_metrics, read_summary
from decobench.training.evaluation import (
    EvaluationSchedule,
    Resolution,
    TargetBook,
    milestone_records,
    near_target,
    refine_windows,
    target_met,
)


def test_target_and_margin_for_accuracy_and_perplexity():
    assert target_met(0.75, 0.75, True) and not target_met(0.7499, 0.75, True)
    assert target_met(400.0, 400.0, False) and not target_met(400.01, 400.0, False)
    # 5% relative: accuracy >= 0.7125, perplexity <= 420
    assert near_target(0.7125, 0.75, 0.05, True) and not near_target(0.712, 0.75, 0.05, True)
    assert near_target(420.0, 400.0, 0.05, False) and not near_target(420.5, 400.0, 0.05, False)


def test_hand_checked_book_and_schedule():
    """E = 10, E_f = 2, margin 0.1, targets 0.5 (milestone) and 0.8 (stop)."""
    book = TargetBook((0.8, 0.5), higher_is_better=True)
    schedule = EvaluationSchedule(every=10, fine_every=2, margin=0.1)
    assert book.unmet() == [0.5, 0.8]
    assert [k for k in range(1, 11) if schedule.due(k, book)] == [10]
    assert book.record(10, 0.40, 4.0) == []          # 0.40 < 0.45: not near 0.5
    assert not schedule.fine(book)
    assert book.record(20, 0.46, 8.0) == []          # near 0.5: fine from now on
    assert schedule.fine(book) and schedule.due(22, book) and not schedule.due(23, book)
    assert book.record(22, 0.44, 8.8) == []          # a dip keeps the best, 0.46: still fine
    assert schedule.fine(book)
    assert book.record(24, 0.51, 9.6) == [0.5]
    hit = book.hits[0.5]
    assert (hit.previous_iteration, hit.iteration, hit.resolution_iters) == (22, 24, 2)
    assert hit.previous_time_s == 8.8 and abs(hit.resolution_s - 0.8) < 1e-12
    assert not schedule.fine(book)                   # 0.51 < 0.72: not near 0.8
    assert book.record(30, 0.95, 12.0) == [0.8]      # meets the stop target at a coarse eval
    assert book.hits[0.8].resolution_s == 12.0 - 9.6
    records = milestone_records(book, [0.5])
    assert records == [{"target": 0.5, "reached": True, "time_to_target_s": 9.6,
                        "iters_to_target": 24, "ttt_resolution_s": hit.resolution_s,
                        "ttt_bracket_s": [8.8, 9.6], "ttt_resolution_iters": 2}]


def test_perplexity_targets_nearest_first():
    book = TargetBook((400.0, 600.0), higher_is_better=False)
    assert book.unmet() == [600.0, 400.0]
    assert book.record(5, 500.0, 1.0) == [600.0]
    assert book.hits[600.0].previous_time_s == 0.0   # met at the first evaluation: from start
    assert EvaluationSchedule(10, 1, 0.3).fine(book)  # 500 <= 400 · 1.3


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=60),
       st.integers(2, 12), st.integers(1, 3), st.floats(0.3, 0.95))
def test_fine_schedule_brackets_a_crossing_within_e_f(metrics, every, fine_every, target):
    """Whatever the metric path, every evaluation of the coarse schedule is also made, and a
    target met after fine mode began is bracketed within E_f iterations."""
    schedule = EvaluationSchedule(every=every, fine_every=fine_every, margin=0.2)
    book = TargetBook((target,), higher_is_better=True)
    was_fine, evaluated, path = False, [], iter(metrics)
    for k in range(1, 400):
        if not schedule.due(k, book):
            continue
        evaluated.append(k)
        was_fine = schedule.fine(book)
        metric = next(path, None)
        if metric is None:
            break
        if book.record(k, metric, float(k)) and was_fine:
            assert book.hits[target].resolution_iters <= fine_every
    coarse = [k for k in range(1, evaluated[-1] + 1) if k % every == 0]
    assert set(coarse) <= set(evaluated)
    for hit in book.hits.values():
        assert hit.previous_iteration < hit.iteration
        # consecutive models evaluated: exact (resolution 0); otherwise the bracket's width
        assert (hit.resolution_s == 0.0 if hit.resolution_iters == 1
                else hit.resolution_s == hit.time_s - hit.previous_time_s > 0)


def test_refine_windows_hand_checked():
    """A target met at a coarse evaluation (bracket 20 > E_f = 2) gets a window; one met
    inside the fine window (bracket 2) does not; a schedule with the window evaluates every
    E_f inside it, counted from its start, and still every E."""
    book = TargetBook((0.8, 0.5), higher_is_better=True)
    book.record(20, 0.2, 4.0)
    book.record(40, 0.6, 8.0)                        # 0.5 met at a coarse evaluation
    book.record(42, 0.79, 8.4)
    book.record(44, 0.81, 8.8)                       # 0.8 met inside the fine window
    assert refine_windows(book, Resolution(2)) == [(20, 40, 2)]
    one = TargetBook((0.5,), higher_is_better=True)
    one.record(7, 0.4, 3.0)
    one.record(8, 0.6, 9.5)                          # consecutive models: exact, not 6.5 s
    assert one.hits[0.5].resolution_iters == 1 and one.hits[0.5].resolution_s == 0.0
    assert refine_windows(book, Resolution()) == []
    assert refine_windows(book, Resolution(20)) == []
    schedule = EvaluationSchedule(every=20, fine_every=3, margin=0.0).with_windows(
        [(20, 40, 3)])
    fresh = TargetBook((0.8,), higher_is_better=True)
    assert [k for k in range(1, 61) if schedule.due(k, fresh)] == [
        20, 23, 26, 29, 32, 35, 38, 40, 60]


def test_resolution_cadence_hand_checked():
    """r = 2% capped at E_f = 4: every iteration below k = 100 (⌊0.02·99⌋ = 1), every 2 up
    to 149, 3 from 150, 4 (E_f) from 200; without E_f it keeps growing; without r it is E_f."""
    both = Resolution(fine_every=4, share=0.02)
    assert [both.cadence(k) for k in (1, 49, 99, 100, 149, 150, 199, 200, 1000)] == [
        1, 1, 1, 2, 2, 3, 3, 4, 4]
    assert Resolution(share=0.02).cadence(1000) == 20
    assert Resolution(fine_every=4).cadence(7) == 4 and Resolution().cadence(7) is None
    assert not Resolution().active and Resolution(share=0.02).active
    # the hit of D-SGD's 0.3 milestone in the cpu-paper ViT runs: 104 iterations, bracket 4
    # (E_f = 4) is 3.8%; with r = 0.02 it is too wide (cadence 2) and refined every 2
    book = TargetBook((0.3,), higher_is_better=True)
    book.record(100, 0.29, 118.2)
    book.record(104, 0.31, 123.1)
    assert both.too_wide(book.hits[0.3]) and not Resolution(4).too_wide(book.hits[0.3])
    assert refine_windows(book, both) == [(100, 104, 2)]
    assert refine_windows(book, Resolution(4)) == []


def test_schedule_with_a_share_counts_from_the_last_evaluation():
    """In the fine window (here from the start: margin 0.99) a run evaluates once the
    iterations since its last evaluation reach the cadence: 95-99 every iteration, then
    every 2 (100, 102, ..., 148), every 3 from 150, and every 4 (E_f) from 200."""
    schedule = EvaluationSchedule(every=50, fine_every=4, margin=0.99, share=0.02)
    book = TargetBook((0.9,), higher_is_better=True)
    book.record(94, 0.5, 1.0)
    due = []
    for k in range(95, 211):
        if schedule.due(k, book):
            due.append(k)
            book.record(k, 0.5, float(k))
    assert due == [95, 96, 97, 98, 99, *range(100, 150, 2), 150, 153, 156, 159, 162, 165,
                   168, 171, 174, 177, 180, 183, 186, 189, 192, 195, 198, 200, 204, 208]
    # outside the window (margin 0.01: 0.5 is far from 0.9) only every E
    far = EvaluationSchedule(every=50, fine_every=4, margin=0.01, share=0.02)
    assert [k for k in range(1, 201) if far.due(k, book)] == [50, 100, 150, 200]


@settings(max_examples=200, deadline=None)
@given(share=st.floats(0.001, 0.95), fine_every=st.one_of(st.none(), st.integers(1, 12)),
       every=st.integers(13, 120), start=st.integers(1, 400))
def test_share_brackets_never_exceed_the_cadence_at_their_end(share, fine_every, every, start):
    """Whatever r, E_f and E: two consecutive evaluations in the fine window are at most the
    cadence at the later one apart, so no bracket met there is too wide (no refine pass)."""
    schedule = EvaluationSchedule(every=every, fine_every=fine_every, margin=0.99, share=share)
    book = TargetBook((0.9,), higher_is_better=True)
    book.record(start, 0.5, 0.0)
    last = start
    for k in range(start + 1, start + 600):
        if schedule.due(k, book):
            assert k - last <= schedule.resolution.cadence(k)
            book.record(k, 0.5, float(k))
            last = k


SMALL = ["run", "--task", "cnn-fmnist", "--workers", "2", "--batch-size", "16",
         "--max-iters", "30", "--eval-every", "10", "--no-progress", "--no-wandb",
         "--method", "d-sgd", "--trace", "constant-20mbps-100ms", "--no-stop-at-target"]


@pytest.fixture(scope="module")
def coarse(tmp_path_factory, fmnist_root):
    """SMALL with target 0.5, evaluated every E = 10 only: the run the fine ones are
    compared with (it meets 0.5 at a coarse evaluation, with 0.4 to 0.5 the one before)."""
    out = tmp_path_factory.mktemp("coarse") / "coarse"
    assert main([*SMALL, "--data-root", str(fmnist_root), "--target", "0.5",
                 "--out", str(out)]) == 0
    return out


def test_fine_evaluation_changes_only_the_evaluations(tmp_path, fmnist_root, coarse):
    """Same seed with and without --fine-eval-every: identical training rows, the coarse
    evaluations among the fine run's, and a time to target no later, bracketed finer."""
    fine = tmp_path / "fine"
    common = [*SMALL, "--data-root", str(fmnist_root), "--target", "0.5"]
    assert main([*common, "--out", str(fine), "--fine-eval-every", "2",
                 "--fine-eval-margin", "0.2", "--milestone", "0.45"]) == 0
    rows_c, rows_f = read_metrics(coarse), read_metrics(fine)
    strip = ("wall_time_s", "metric", "metric_name", "metric_time_s", "target_reached",
             "targets_met")
    assert ([{k: v for k, v in r.items() if k not in strip} for r in rows_c]
            == [{k: v for k, v in r.items() if k not in strip} for r in rows_f])
    evals_c = {r["iteration"]: r["metric"] for r in rows_c if "metric" in r}
    evals_f = {r["iteration"]: r["metric"] for r in rows_f if "metric" in r}
    assert evals_c.items() <= evals_f.items() and len(evals_f) > len(evals_c)
    sc, sf = read_summary(coarse), read_summary(fine)
    assert sc["reached"] and sf["reached"]
    assert sf["time_to_target_s"] <= sc["time_to_target_s"]
    assert sf["ttt_resolution_s"] <= sc["ttt_resolution_s"]
    assert sf["ttt_resolution_iters"] <= 10 and sc["ttt_resolution_iters"] <= 10
    bracket = sf["ttt_bracket_s"]
    assert bracket[1] == sf["time_to_target_s"] and bracket[0] < bracket[1]
    assert [m["target"] for m in sf["milestones"]] == [0.45] and sc["milestones"] == []
    assert sf["fine_eval_every"] == 2 and sc["fine_eval_every"] is None
    json.dumps(sf)


def test_a_share_brackets_an_early_target_finer_than_e_f(tmp_path, fmnist_root):
    """--ttt-resolution 0.05 beside --fine-eval-every 4: the same training rows as E_f alone,
    and the target (met within 30 iterations, where 5% is one iteration) bracketed to at
    most ⌊0.05·k⌋ iterations, i.e. exactly (resolution 0), where E_f alone leaves up to 4."""
    ef, share = tmp_path / "ef", tmp_path / "share"
    common = [*SMALL, "--data-root", str(fmnist_root), "--target", "0.5",
              "--fine-eval-every", "4", "--fine-eval-margin", "0.2"]
    assert main([*common, "--out", str(ef)]) == 0
    assert main([*common, "--out", str(share), "--ttt-resolution", "0.05"]) == 0
    rows_e, rows_s = read_metrics(ef), read_metrics(share)
    strip = ("wall_time_s", "metric", "metric_name", "metric_time_s", "target_reached",
             "targets_met")
    assert ([{k: v for k, v in r.items() if k not in strip} for r in rows_e]
            == [{k: v for k, v in r.items() if k not in strip} for r in rows_s])
    se, ss = read_summary(ef), read_summary(share)
    assert se["reached"] and ss["reached"] and ss["ttt_resolution"] == 0.05
    assert ss["iters_to_target"] < 30 and ss["ttt_resolution_iters"] == 1
    assert ss["ttt_resolution_s"] == 0.0 < se["ttt_resolution_s"]
    assert ss["time_to_target_s"] <= se["time_to_target_s"]


def test_fine_eval_every_must_be_finer_than_eval_every(tmp_path, fmnist_root, capsys):
    code = main([*SMALL, "--data-root", str(fmnist_root), "--out", str(tmp_path / "x"),
                 "--fine-eval-every", "10"])
    assert code == 2
    assert "--fine-eval-every 10 must be smaller than --eval-every (10)" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_milestone_outside_the_metric_range_is_refused(tmp_path, fmnist_root, capsys):
    code = main([*SMALL, "--data-root", str(fmnist_root), "--out", str(tmp_path / "x"),
                 "--milestone", "1.5"])
    assert code == 2 and "1.5" in capsys.readouterr().err


def test_refine_pass_brackets_a_jump_within_e_f(tmp_path, fmnist_root, coarse):
    """With a margin of 0.001 the fine window never opens before the target is met, so the
    crossing is bracketed by a coarse evaluation; the refine pass replays the run with a fine
    window there: the same training rows and metrics at the coarse evaluations, the target
    bracketed within E_f iterations, no later than the first pass's time to target."""
    refined = tmp_path / "refined"
    common = [*SMALL, "--data-root", str(fmnist_root), "--target", "0.5"]
    assert main([*common, "--out", str(refined), "--fine-eval-every", "2",
                 "--fine-eval-margin", "0.001"]) == 0
    sc, sr = read_summary(coarse), read_summary(refined)
    assert sc["reached"] and sr["reached"] and sc["ttt_resolution_iters"] == 10
    assert sr["refined_targets"] == [0.5] and sc["refined_targets"] == []
    assert sr["ttt_resolution_iters"] <= 2
    assert sr["time_to_target_s"] <= sc["time_to_target_s"]
    assert sc["iters_to_target"] - 10 < sr["iters_to_target"] <= sc["iters_to_target"]
    rows_c, rows_r = read_metrics(coarse), read_metrics(refined)
    evals_c = {r["iteration"]: r["metric"] for r in rows_c if "metric" in r}
    evals_r = {r["iteration"]: r["metric"] for r in rows_r if "metric" in r}
    assert evals_c.items() <= evals_r.items()
    assert [r["loss"] for r in rows_c] == [r["loss"] for r in rows_r]


@pytest.mark.parametrize(("targets", "refined"), [
    pytest.param({"milestones": [0.4], "target": 0.55, "stop_at_target": False}, 2,
                 marks=pytest.mark.slow, id="milestone-and-target"),  # 17 s: make test-slow
    pytest.param({"target": 0.4, "stop_at_target": True}, 1, id="stop-at-target"),
])
def test_a_refine_pass_from_the_kept_state_equals_a_replay_from_the_start(
        tmp_path, fmnist_root, monkeypatch, targets, refined):
    """The refine pass starts from the first pass's state at the evaluation opening the first
    wide bracket (decobench.runs.checkpoint.RefineStarts): metrics.jsonl, summary.json and the
    recorded trajectory equal a replay from iteration 0's (wall-clock fields aside). With a
    milestone and a target two brackets are refined and the run goes on after the first;
    a run stopped at its target refines the bracket of its last evaluation."""
    import torch

    from decobench.runs.checkpoint import RefineStarts
    from decobench.runs.config import RunConfig
    from decobench.runs.rundir import TRAJECTORY
    from decobench.runs.runner import execute, prepare
    from decobench.runs.trajectory import Reuse, reuse_key

    started = []
    state_at = RefineStarts.state_at

    def spy(self, iteration):
        state = state_at(self, iteration)
        started.append(None if state is None else state["iteration"])
        return state

    def run(out, *, from_start):
        monkeypatch.setattr(RefineStarts, "state_at",
                            (lambda self, iteration: None) if from_start else spy)
        config = RunConfig(task="cnn-fmnist", method="dd-ef-sgd", workers=2, seed=1,
                           trace="constant-20mbps-100ms", data_root=str(fmnist_root),
                           out=str(out), max_iters=60, eval_every=10, fine_eval_every=2,
                           batch_size=16, fine_eval_margin=0.001, **targets)
        prepared = prepare(config)
        key, _ = reuse_key(prepared)
        execute(prepared, show_progress=False, reuse=Reuse(key))
        rows = read_metrics(out)
        for row in rows:
            row.pop("wall_time_s", None)
        summary = read_summary(out)
        summary.pop("wall_time_s")
        summary.pop("trace_path")
        recorded = torch.load(out / TRAJECTORY, weights_only=False)
        return rows, summary, recorded

    kept = run(tmp_path / "kept", from_start=False)
    replayed = run(tmp_path / "replayed", from_start=True)
    assert started and started[0] is not None and started[0] > 0, started
    assert len(kept[1]["refined_targets"]) == refined, kept[1]
    assert kept[0] == replayed[0]
    assert kept[1] == replayed[1]
    assert kept[2] == replayed[2]
