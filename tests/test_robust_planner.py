"""deco-sgd-robust's pieces (decobench.planning.robust, decobench.methods.robust): a
hand-computed plan, Algorithm 1 as its special case, the bad samples of issue 42 point 3
fed by hand, the period from the rate of change, and each switch."""

from __future__ import annotations

import math

import pytest
import torch

from decobench.cli.main import main
from decobench.clock.topology import topology_factors
from decobench.errors import DecobenchError
from decobench.methods.base import Observation
from decobench.methods.robust import RobustDecoController, RobustDecoOptions, UpdateNoiseMeter
from decobench.planning.phi import phi_paper
from decobench.planning.planner import plan
from decobench.planning.robust import (
    SampleWindow,
    largest_count_within,
    replan_period,
    robust_plan,
    theorem1_kappa,
)


def test_hand_computed_plan_for_two_bandwidths():
    """d = 10^6 (L = 20 index bits, so W(k) = 52 k for small k), T = 0.1 s, b = 0.05 s,
    samples a = 10 and 4 Mbit/s, β = 0.05, τ ≤ 1, paper topology (h = l = 1).

    τ = 0: every iteration waits T + W/a + b > 0.15 s, a bubble share above 33%: none.
    τ = 1: t(a) = max(T, W/a, (T + W/a + b)/2). The mean over both samples may be at most
    T/(1 − β) = 0.105263 s. At 10 Mbit/s, W/a <= 0.05 keeps t = T; then the 4 Mbit/s sample
    may take 2·0.105263 − 0.1 = 0.110526 s, so (0.15 + W/a)/2 <= 0.110526, W/a <= 0.071053,
    k <= 0.071053 · 4e6 / 52 = 5465.6: k = 5465 (and 52·5465/1e7 = 0.0284 <= 0.05 holds).
    The point estimate (the median, 7 Mbit/s, bubble-free) would allow 52 k <= 0.05 · 7e6,
    k = 6730: the distribution asks for a smaller δ."""
    d = 1_000_000
    chosen = robust_plan(d, 4, 0.1, [10e6, 4e6], 0.05, tau_max=1, bubble_share=0.05)
    assert (round(chosen.delta * d), chosen.staleness) == (5465, 1)
    assert chosen.bubble_free and chosen.t_avg_s <= 0.1 / 0.95
    point = plan(d, 4, 0.1, 7e6, 0.05, tau_max=1)
    assert (round(point.delta * d), point.staleness) == (6730, 1)
    f = topology_factors("paper", 4, dense=False)
    assert largest_count_within(1, d, 0.1, [10e6, 4e6], 0.05, f, f, 0.05, 1) == 5465


@pytest.mark.parametrize(("compute_s", "bandwidth", "latency", "workers", "topology"), [
    (0.2, 15.8e6, 0.194, 4, "paper"), (0.05, 100e6, 0.02, 8, "paper"),
    (0.2, 10e6, 0.1, 4, "ring"), (1.0, 1e9, 0.2, 16, "ring"), (0.01, 1e6, 0.3, 2, "paper")])
def test_one_sample_and_no_bubble_share_is_algorithm_1(compute_s, bandwidth, latency, workers,
                                                       topology):
    d = 454_922
    ours = robust_plan(d, workers, compute_s, [bandwidth], latency, topology=topology,
                       bubble_share=0.0)
    paper = plan(d, workers, compute_s, bandwidth, latency, topology=topology)
    assert (ours.delta, ours.staleness, ours.bubble_free) == (paper.delta, paper.staleness,
                                                              paper.bubble_free)
    assert ours.phi == pytest.approx(paper.phi)


def test_a_wider_distribution_never_gets_a_larger_delta():
    d = 454_922
    narrow = robust_plan(d, 4, 0.2, [15e6, 16e6, 17e6], 0.2, tau_max=4)
    wide = robust_plan(d, 4, 0.2, [5e6, 16e6, 27e6], 0.2, tau_max=4)
    assert wide.delta <= narrow.delta


def test_a_stalled_transfer_and_a_burst_are_held_back():
    window = SampleWindow(size=10, outlier_factor=4.0, confirm=3)
    for x in (20e6, 19e6, 21e6):
        window.add(x)
    window.add(0.5e6)      # a transfer stalled by TCP loss recovery (40x slow)
    window.add(20e6)
    window.add(400e6)      # a shaper's burst (20x fast)
    assert window.values() == [20e6, 19e6, 21e6, 20e6]
    assert window.level_changes == 0


def test_three_in_a_row_are_a_new_level_not_outliers():
    """A 5x drop mid-run: held back twice, the third agrees, and the window restarts."""
    window = SampleWindow(size=10, outlier_factor=4.0, confirm=3)
    for x in (20e6, 20e6, 20e6, 4e6, 4e6):
        window.add(x)
    assert window.values() == [20e6, 20e6, 20e6] and window.recent_median(3) == 4e6
    window.add(4e6)
    assert window.values() == [4e6, 4e6, 4e6] and window.level_changes == 1


def test_a_bad_first_sample_cannot_set_a_plan():
    """The first iteration's one-off compute (10x): kept while the window fills, filtered out
    by the window's own median when read."""
    window = SampleWindow(size=10, outlier_factor=4.0, confirm=3)
    for x in (2.0, 0.2, 0.2, 0.21):
        window.add(x)
    assert window.values() == [0.2, 0.2, 0.21] and window.median() == 0.2
    unfiltered = SampleWindow(size=10, outlier_factor=None)
    for x in (2.0, 0.2, 0.2, 0.21):
        unfiltered.add(x)
    assert unfiltered.values() == [2.0, 0.2, 0.2, 0.21]


def test_replan_period_follows_the_rate_of_change():
    """One doubling in 100 samples: σ² = ln(2)² / 99 = 0.004853 per iteration, σ = 0.06967;
    F = (ln 1.2 / σ)² = (0.18232 / 0.06967)² = 6.85 -> 7. A steady link: the longest F."""
    assert replan_period([1.0] * 50 + [2.0] * 50, 1, 100) == 7
    assert replan_period([1.0] * 50 + [2.0] * 50, 10, 100) == 10
    assert replan_period([5e6] * 30, 10, 100) == 100
    slow = [math.exp(0.01 * (i % 2)) for i in range(100)]      # ±1% jitter: σ = 0.01
    assert replan_period(slow, 10, 100) == 100                   # (0.182 / 0.01)² = 332


def test_bad_input_is_one_line():
    with pytest.raises(DecobenchError, match="bandwidth samples"):
        robust_plan(100, 2, 0.1, [], 0.01)
    with pytest.raises(DecobenchError, match="bubble share"):
        robust_plan(100, 2, 0.1, [1e6], 0.01, bubble_share=1.0)
    with pytest.raises(DecobenchError, match="finite and > 0"):
        SampleWindow().add(float("nan"))


def _controller(**options) -> RobustDecoController:
    return RobustDecoController(d=454_922, workers=4, topology="paper", phi=phi_paper,
                                options=RobustDecoOptions(**options))


def _observe(controller: RobustDecoController, iteration: int, bandwidth: float,
             compute_s: float = 0.2, latency_s: float = 0.1, bits: float = 1e6) -> None:
    start = iteration * 0.3
    controller.observe(Observation(iteration, compute_s, bits, start, start + bits / bandwidth,
                                   start + bits / bandwidth + latency_s, 1.0))


def test_the_first_plan_waits_for_min_samples_and_reads_medians():
    controller = _controller()
    _observe(controller, 0, 0.5e6, compute_s=3.0)   # a stalled probe and a one-off compute
    assert controller.schedule(1).delta == 0.01     # the probe's δ until 3 of each
    _observe(controller, 1, 20e6)
    _observe(controller, 2, 20e6)
    assert controller.schedule(3).delta == 0.01     # the bad samples do not count
    assert controller.log() == {}
    _observe(controller, 3, 20e6)
    first = controller.schedule(4)
    fields = controller.log()
    assert fields["plan_reason"] == "first"
    clean = _controller()
    for i in range(3):
        _observe(clean, i, 20e6)
    assert clean.schedule(3) == first
    assert fields["plan_bandwidth_mbps"] == pytest.approx(20.0)


def test_a_drop_replans_at_once_and_the_switch_turns_it_off():
    for change_factor, expected in ((1.5, "change"), (0.0, None)):
        controller = _controller(change_factor=change_factor, adaptive_interval=False,
                                 robust_samples=False)
        for i in range(5):
            _observe(controller, i, 20e6)
        controller.schedule(5)
        assert controller.log()["plan_reason"] == "first"
        for i in range(5, 10):
            _observe(controller, i, 5e6)
        controller.schedule(10)
        assert controller.log().get("plan_reason") == expected


def test_theorem1_kappa_by_hand():
    # κ = sqrt(n · ĝ² / v̂): n = 4, ĝ² = 0.25, v̂ = 1 -> 1; n = 8, ĝ² = 2, v̂ = 4 -> 2
    assert theorem1_kappa(0.25, 1.0, 4) == pytest.approx(1.0)
    assert theorem1_kappa(2.0, 4.0, 8) == pytest.approx(2.0)
    assert theorem1_kappa(-0.1, 1.0, 4) == 0.0          # noise dominates: staleness is cheap
    with pytest.raises(DecobenchError, match="noise > 0"):
        theorem1_kappa(1.0, 0.0, 4)


def test_update_meter_by_hand():
    meter = UpdateNoiseMeter(window=2)
    meter.add(torch.tensor([1.0, 0.0]))
    meter.add(torch.zeros(2))                   # nothing applied: skipped, not a pair
    assert meter.kappa(2, 1) is None
    meter.add(torch.tensor([1.0, 2.0]))
    # ⟨u2, u1⟩ = 1, ||u2 − u1||²/2 = 2 -> κ = sqrt(2 · 1 / 2) = 1
    assert meter.kappa(2, 1) == pytest.approx(1.0)
    assert meter.kappa(2, 2) is None            # fewer pairs than asked for
    meter.add(torch.tensor([3.0, 2.0]))
    # second pair: ⟨u3, u2⟩ = 7, ||u3 − u2||²/2 = 2; means 4 and 2 -> κ = sqrt(2 · 4 / 2) = 2
    assert meter.kappa(2, 2) == pytest.approx(2.0)


def test_the_theorem1_model_sets_kappa_and_fixed_keeps_the_flag():
    fixed = _controller(kappa=0.7, iteration_model="fixed")
    fitted = _controller(kappa=0.7)                      # theorem-1, the default
    for controller in (fixed, fitted):
        for i in range(3):
            _observe(controller, i, 20e6)
        for u in ([1.0, 0.0], [1.0, 2.0], [3.0, 2.0], [3.0, 4.0]):
            controller.observe_update(torch.tensor(u))
        controller.schedule(4)
    assert fixed.log()["plan_kappa"] == 0.7
    # pairs (1, 2), (7, 2), (17, 2): means 25/3 and 2 -> κ = sqrt(4 · 25/3 / 2)
    assert fitted.log()["plan_kappa"] == pytest.approx(math.sqrt(4 * 25 / 3 / 2))
    before = _controller(kappa=0.7)
    for i in range(3):
        _observe(before, i, 20e6)
    before.schedule(3)
    assert before.log()["plan_kappa"] == 0.7    # no updates measured yet: --kappa


def test_the_variant_refuses_the_ewma_weight(capsys):
    assert main(["run", "--task", "cnn-fmnist", "--method", "deco-sgd-robust",
                 "--estimator-alpha", "0.5", "--trace", "wan-200ms-lowbw-varying"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--estimator-alpha" in error[0]
    for flag, value, says in (("--ef-delta0", "0", "--ef-delta0: Input should be greater than 0"),
                              ("--iteration-model", "online", "--iteration-model: invalid "
                               "choice: 'online'")):
        assert main(["run", "--task", "cnn-fmnist", "--method", "deco-sgd-robust", flag, value,
                     "--trace", "wan-200ms-lowbw-varying"]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and says in error[0]


def test_a_run_measures_kappa_from_its_updates_and_repeats_itself(tmp_path, fmnist_root):
    import json

    def run(out):
        assert main(["run", "--task", "cnn-fmnist", "--method", "deco-sgd-robust",
                     "--workers", "2", "--trace", "wan-200ms-lowbw-varying",
                     "--batch-size", "16", "--max-iters", "13", "--eval-every", "13",
                     "--deco-interval", "4", "--adaptive-interval", "false",
                     "--data-root", str(fmnist_root),
                     "--out", str(out), "--no-wandb", "--no-progress"]) == 0
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        for row in rows:
            row.pop("wall_time_s", None)
        return rows

    rows = run(tmp_path / "a")
    kappas = [row["plan_kappa"] for row in rows if "plan_kappa" in row]
    assert kappas[0] == 1.0                     # the first plan: no pairs yet, --kappa
    assert len(kappas) == 3 and all(k != 1.0 and k >= 0 for k in kappas[1:])   # 4, 8, 12
    assert rows == run(tmp_path / "b")          # a fixed seed gives the same metrics


def test_ef_delta0_scales_the_compression_term_and_pickles():
    import pickle

    from decobench.planning.phi import phi_ef, phi_ef_scaled
    assert phi_ef_scaled(0.003) is phi_ef
    phi = pickle.loads(pickle.dumps(phi_ef_scaled(0.001)))
    assert phi(0.5, 2) == pytest.approx(2.004)   # 2 + 0.001 · 0.5 / (0.5 · 0.25)
    with pytest.raises(DecobenchError, match="δ₀"):
        phi_ef_scaled(0.0)
    # a smaller δ₀ prices compression lower: the plan never keeps more coordinates
    common = dict(tau_max=4, objective="time-to-accuracy", bubble_share=0.05)
    wide = robust_plan(454_922, 4, 0.2, [20e6], 0.2, phi=phi_ef_scaled(0.001), **common)
    narrow = robust_plan(454_922, 4, 0.2, [20e6], 0.2, phi=phi_ef, **common)
    assert wide.delta <= narrow.delta
