"""Fair budgets (docs/suites.md "Budgets"): the dense time budget by hand, the iteration cap
that never comes first, the warning for an iteration budget that ended one method long
before another, and `decobench versus` end to end on the Fashion-MNIST slice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from e2e_shared import cells_in_this_process
from hypothesis import given
from hypothesis import strategies as st

from decobench.cli.main import main
from decobench.clock.budget import dense_time_budget, iterations_within
from decobench.clock.timemodel import ConstantLink
from decobench.reports.runs import Run
from decobench.reports.tables import budget_warnings


def test_dense_time_budget_by_hand():
    # d = 1000: 32,000 bits at 10 Mbit/s = 3.2 ms; b = 100 ms; T = 50 ms; τ = 0, so each
    # iteration waits for its own message: 50 + 3.2 + 100 = 153.2 ms, ten of them 1.532 s
    link = ConstantLink(10e6, 0.1)
    assert dense_time_budget(link, 1000, 0.05, 10) == pytest.approx(1.532)
    assert dense_time_budget(link, 1000, 0.05, 1) == pytest.approx(0.1532)


def test_dense_time_budget_refuses_nonsense():
    with pytest.raises(ValueError):
        dense_time_budget(ConstantLink(10e6, 0.1), 1000, 0.0, 10)


@given(budget=st.floats(1e-3, 1e6), compute=st.floats(1e-4, 10.0))
def test_the_iteration_cap_never_ends_a_run_before_its_time_budget(budget, compute):
    cap = iterations_within(budget, compute)
    # the cap's iterations take at least one T more than the budget, whatever the rounding
    assert (cap - 1) * compute >= budget * (1 - 1e-12)
    assert cap * compute > budget
    assert (cap - 2) * compute <= budget * (1 + 1e-12)     # and not more than needed


def _run(label: str, status: str, sim_time_s: float, iterations: int, *,
         max_sim_time: float | None = None, seed: int = 0) -> Run:
    summary = {"task": "cnn-fmnist", "condition": "mine", "workers": 4, "seed": seed,
               "label": label, "method": label, "status": status, "sim_time_s": sim_time_s,
               "iterations": iterations, "target": 0.75,
               "reached": status == "finished"}
    return Run(Path(label), label, summary, {"max_sim_time": max_sim_time}, ())


def test_an_iteration_budget_that_ends_one_method_early_is_named_with_both_times():
    # the case: 300 iterations were 7.55 simulated s for deco-sgd, 808.63 for d-sgd
    runs = [_run("deco-sgd", "budget_exhausted", 7.55, 300),
            _run("d-sgd", "finished", 808.63, 300)]
    (line,) = budget_warnings(runs)
    assert "deco-sgd's iteration budget ended it after 300 iterations and 7.55" in line
    assert "d-sgd ran 808.63 s" in line and "--max-sim-time" in line


def test_no_warning_when_the_budget_was_time_or_the_times_are_close():
    timed = [_run("deco-sgd", "budget_exhausted", 100.0, 4000, max_sim_time=100.0),
             _run("d-sgd", "budget_exhausted", 100.4, 120, max_sim_time=100.0)]
    assert budget_warnings(timed) == []
    close = [_run("deco-sgd", "budget_exhausted", 400.0, 300),
             _run("d-sgd", "finished", 790.0, 300)]
    assert budget_warnings(close) == []


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "drop.csv"           # the link: 50 ms, 50 -> 5 Mbit/s at 30 s
    path.write_text("time_s,bandwidth_mbps,latency_ms\n0,50,50\n30,5,50\n")
    return path


def test_versus_runs_the_methods_with_one_time_budget_and_prints_the_table(
        tmp_path, fmnist_root, capsys):
    out = tmp_path / "out"
    with cells_in_this_process():
        code = main(["versus", "--task", "cnn-fmnist", "--profile", "cpu",
                     "--trace", str(_trace(tmp_path)), "--target", "0.5",
                     "--methods", "d-sgd,deco-sgd", "--budget-iters", "30",
                     "--option", "eval_every=10", "--option", "batch_size=16",
                     "--data-root", str(fmnist_root), "--out", str(out), "--jobs", "1",
                     "--no-wandb", "--no-progress"])
    assert code == 0
    captured = capsys.readouterr()
    assert "D-SGD's simulated time for 30 iterations on this trace (--budget-iters)" \
        in captured.err
    assert "| label | seeds reached | median TTT (s)" in captured.out
    assert "speed-up over d-sgd" in captured.out
    summaries = [json.loads(p.read_text()) for p in sorted(out.glob("runs/*/summary.json"))]
    assert {s["label"] for s in summaries} == {"d-sgd", "deco-sgd"}
    configs = [p.read_text() for p in sorted(out.glob("runs/*/config.yaml"))]
    budgets = {line for text in configs for line in text.splitlines()
               if line.startswith("max_sim_time:")}
    assert len(budgets) == 1                       # one time budget for every method
    for s in summaries:
        assert s["time_to_target_s"] is None or s["time_to_target_s"] <= s["sim_time_s"]
    report = (out / "report.md").read_text()
    assert "None of these runs is evidence for the paper's claims" in report
    assert "| claim |" not in report           # no table of claims that all say "not run"


@pytest.mark.parametrize("extra, message", [
    (["--budget-s", "0"], "--budget-s 0 must be > 0"),
    (["--option", "max_iters=3"], "versus sets max_iters itself"),
    (["--seeds", "a,b"], "--seeds 'a,b': expected integers"),
    (["--methods", "d-sgd,nope"], "nope"),
])
def test_versus_refuses_bad_input_in_one_line(tmp_path, capsys, extra, message):
    code = main(["versus", "--task", "cnn-fmnist", "--trace", "wan-200ms-lowbw-varying",
                 "--target", "0.5", "--out", str(tmp_path / "out"), "--no-wandb", *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "out" / "runs").exists()
