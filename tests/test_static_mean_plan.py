"""static-mean-plan: Top-k DD-EF-SGD frozen, from iteration 0, at DeCo's plan for the
condition's mean bandwidth, latency and T (baselines/static_mean_plan.py, issue 39)."""

import pytest
import torch
import yaml

from decobench.cli.main import main
from decobench.errors import DecobenchError
from decobench.methods import MethodContext, get_method_spec
from decobench.methods.optimizer import OptimizerConfig
from decobench.methods.options import PlannerOptions
from decobench.planning.estimators import NetworkEstimate
from decobench.planning.planner import plan


def _context(condition):
    return MethodContext(d=1_000_000, workers=4, topology="paper",
                         optimizer=OptimizerConfig(lr=0.01), condition=condition)


def test_plan_from_the_means_from_iteration_zero_and_never_changed():
    """â = 100 Mbit/s, b̂ = 200 ms, T̂ = 100 ms with d = 10^6 and 4 workers: the planner's
    hand-checked plan (0.28125, 3) (tests/test_methods.py), sent from iteration 0 (no probe)
    and logged once with the means it was made from."""
    spec = get_method_spec("static-mean-plan")
    method = spec.build(_context(NetworkEstimate(1e8, 0.2, 0.1)), spec.options())
    x = torch.zeros(1_000_000)
    g = torch.randn(4, 1_000_000, generator=torch.Generator().manual_seed(0))
    first = method.step(0, x, g)
    assert (first.delta, first.staleness) == (0.28125, 3)
    assert first.log["plan_bandwidth_mbps"] == pytest.approx(100.0)
    assert first.log["plan_latency_ms"] == pytest.approx(200.0)
    assert first.log["plan_from"] == "condition means"
    for k in (1, 50, 500):
        later = method.step(k, x, g)
        assert (later.delta, later.staleness) == (0.28125, 3) and "plan_phi" not in later.log
    expected = plan(1_000_000, 4, 0.1, 1e8, 0.2)
    assert (expected.delta, expected.staleness) == (0.28125, 3)


def test_needs_the_condition_and_has_the_planners_options():
    spec = get_method_spec("static-mean-plan")
    assert list(spec.options.model_fields) == list(PlannerOptions.model_fields)
    with pytest.raises(DecobenchError, match="fixed compute time"):
        spec.build(_context(None), spec.options())


def test_a_run_plans_from_its_traces_means(fmnist_root, tmp_path):
    """On the section-5.2 CNN trace (mean 21.28 Mbit/s, 200.3 ms; T = 0.2 s) the run's first
    row logs those means and the plan made from them."""
    out = tmp_path / "run"
    assert main(["run", "--task", "cnn-fmnist", "--profile", "paper", "--method",
                 "static-mean-plan", "--workers", "4", "--max-iters", "2", "--eval-every", "2",
                 "--trace", "deco52-cnn-fmnist", "--data-root", str(fmnist_root),
                 "--out", str(out), "--no-progress"]) == 0
    first = yaml.safe_load((out / "metrics.jsonl").read_text().splitlines()[0])
    assert first["plan_bandwidth_mbps"] == pytest.approx(21.284, rel=1e-3)
    assert first["plan_latency_ms"] == pytest.approx(200.29, rel=1e-3)
    chosen = plan(454_922, 4, 0.2, first["plan_bandwidth_mbps"] * 1e6,
                  first["plan_latency_ms"] / 1e3)
    assert (first["delta"], first["tau"]) == (chosen.delta, chosen.staleness)
