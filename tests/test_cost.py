"""The GPU cost of a suite: an upper bound from documented per-iteration times
(benchmark/sweeps/cost.py), hand-checked."""

import pytest

from decobench.runs.config import RunConfig
from decobench.sweeps.cost import STEP_TIMES, describe, measured_step_time, run_cost, suite_cost


def test_hand_checked_run_cost():
    """GPT-2 paper profile, 4 workers, 1000 iterations, E = 100, E_F = 10, a target and one
    milestone: 1000 · 4 · 0.146 = 584 s of steps (the H200's measured step); 10 + 2 · 10 · 2 = 50
    evaluations of 1.1 s."""
    config = RunConfig(task="gpt2-wikitext", method="d-sgd", trace="constant-1gbps-10ms",
                       target=50.0, milestones=[80.0], fine_eval_every=10)
    cost = run_cost(config, max_iters=1000, eval_every=100)
    assert cost.evaluations == 50
    assert cost.seconds == pytest.approx(584.0 + 50 * 1.1)


def test_suite_cost_defaults_to_the_profiles_and_names_what_it_cannot_estimate():
    configs = [RunConfig(task="vit-imagenet", method="d-sgd", trace="constant-1gbps-10ms",
                         max_iters=100),
               RunConfig(task="vit-imagenet", profile="cpu", method="d-sgd",
                         trace="constant-1gbps-10ms")]
    cost = suite_cost(configs)
    # the paper profile's E = 1000 > 100 iterations: one evaluation
    vit = STEP_TIMES[("vit-imagenet", "paper")]
    assert cost.seconds == pytest.approx(100 * 4 * vit.step_s + 1 * vit.eval_s)
    assert cost.missing == ["vit-imagenet/cpu"]
    text = describe(cost)
    assert "upper bound" in text and "1 of 2 runs" in text and "vit-imagenet/cpu" in text
    assert f"at the times of {vit.device}" in text


def test_a_cpu_measured_time_is_not_priced_as_a_gpu():
    """The CNNs' times are a 2-core CPU's: the bound names that machine, not a GPU."""
    configs = [RunConfig(task="cnn-fmnist", method="d-sgd", trace="constant-1gbps-10ms",
                         max_iters=100)]
    text = describe(suite_cost(configs))
    assert "on one GPU" not in text
    assert "at the times of a 2-core CPU" in text.splitlines()[0]


def test_measured_step_time_by_hand():
    """Iterations 1-9 logged one by one, 4 workers. After the fifth: 6-5 and 7-6 take 2.0 s,
    8-7 2.4 s with an evaluation in it, 9-8 2.2 s → median step 2.0 (of 2.0, 2.0, 2.2) → 0.5 s
    per worker; evaluation 2.4 − 2.0 = 0.4 s. Iterations 1-5 (start-up) are not counted."""
    walls = {1: 9.0, 2: 10.0, 3: 11.0, 4: 12.0, 5: 13.0, 6: 15.0, 7: 17.0, 8: 19.4, 9: 21.6}
    rows = [{"iteration": k, "wall_time_s": w, "loss": 1.0} | ({"metric": 3.0} if k == 8 else {})
            for k, w in walls.items()]
    measured = measured_step_time(rows, workers=4)
    assert measured["iteration_s"] == pytest.approx(2.0)
    assert measured["step_s"] == pytest.approx(0.5)
    assert measured["eval_s"] == pytest.approx(0.4)
    assert measured["iterations"] == 3
    with pytest.raises(ValueError, match="no iteration after the first 5"):
        measured_step_time(rows[:5], workers=4)

