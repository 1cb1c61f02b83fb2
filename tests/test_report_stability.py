"""The largest stable step of a γ-ramp run (reports/stability.py), hand-checked."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from decobench.reports.stability import iterations_to, largest_stable_step, smoothed


def test_a_run_that_leaves_its_trend_for_good():
    """γ_k = 0.01·k. Trailing medians of 3: 10, 9.5, 9, 8, 8 (the spike 30 is voted out), 7,
    6, 5.2, 5.2, then 6, 7, 9 (the last loss is +∞): from iteration 10 on the smoothed loss
    stays above its minimum 5.2 + 0.5, so the last stable step is γ_9 = 0.09."""
    losses = [10, 9, 8, 7, 30, 6, 5, 5.2, 6.0, 7, 9, math.inf]
    assert smoothed(losses, 3) == [10, 9.5, 9, 8, 8, 7, 6, 5.2, 5.2, 6.0, 7, 9]
    iterations = list(range(1, 13))
    found = largest_stable_step(iterations, losses, [0.01 * k for k in iterations], window=3)
    assert found.left_at == 10 and not found.censored
    assert found.gamma == pytest.approx(0.09)


def test_an_excursion_that_returns_is_not_the_end():
    """Medians 10, 9.5, 9, 9, 12, 12, 12, 7, 7: off the trend at 5-7, back at 8: censored at
    the last step."""
    losses = [10, 9, 8, 12, 12, 12, 7, 7, 7]
    iterations = list(range(1, 10))
    found = largest_stable_step(iterations, losses, [0.01 * k for k in iterations], window=3)
    assert found.censored and found.left_at is None and found.gamma == pytest.approx(0.09)


def test_nan_counts_as_off_and_inputs_must_match():
    found = largest_stable_step([1, 2, 3], [5.0, math.nan, math.nan], [0.1, 0.2, 0.3], window=1)
    assert (found.left_at, found.gamma) == (2, 0.1)
    with pytest.raises(ValueError):
        largest_stable_step([1, 2], [1.0], [0.1, 0.2])


@given(st.lists(st.floats(0.1, 20), min_size=1, max_size=60))
def test_a_falling_loss_never_leaves_its_trend(values):
    """A non-increasing loss stays on its trend: the answer is the last step, censored."""
    losses = sorted(values, reverse=True)
    iterations = list(range(1, len(losses) + 1))
    found = largest_stable_step(iterations, losses, [0.001 * k for k in iterations])
    assert found.censored and found.gamma == pytest.approx(0.001 * len(losses))


def test_iterations_to_a_perplexity_reads_the_log_linearly():
    curve = [(100, 1000.0), (200, 100.0), (300, 50.0)]
    # by hand: sqrt(1000 x 100) = 316.2 is halfway in log between 1000 and 100
    assert iterations_to(curve, math.sqrt(1000 * 100)) == pytest.approx(150)
    assert iterations_to(curve, 100.0) == 200                  # met at an evaluation
    assert iterations_to(curve, 2000.0) == 100                 # there at the first one
    assert iterations_to(curve, 10.0) is None                  # never
    # after a non-finite evaluation there is nothing to read between: that evaluation's
    assert iterations_to([(50, math.inf), (100, 500.0)], 800.0) == 100
    assert iterations_to([], 800.0) is None


@given(st.lists(st.floats(1.0, 1e6), min_size=1, max_size=8), st.floats(1.0, 1e6))
def test_iterations_to_lies_between_the_evaluations_around_the_crossing(values, target):
    curve = [(25 * (i + 1), v) for i, v in enumerate(values)]
    found = iterations_to(curve, target)
    crossing = next((k for k, (_, v) in enumerate(curve) if v <= target), None)
    if crossing is None:
        assert found is None
    else:
        low = curve[crossing - 1][0] if crossing else curve[0][0]
        assert low <= found <= curve[crossing][0]


def test_the_report_reads_a_ramp_run(tmp_path, fmnist_root):
    """A 12-iteration γ ramp to 40 on the CNN (the loss: 2.3, then ~10, then 1e5 and up): the report's stability section has its row,
    the ramp's γ taken from config.yaml; a run without a ramp gets no row."""
    from decobench.cli.main import main
    from decobench.reports.build import write_report

    common = ["run", "--task", "cnn-fmnist", "--workers", "2", "--batch-size", "16",
              "--max-iters", "12", "--eval-every", "12", "--no-progress", "--no-wandb",
              "--trace", "wan-200ms-lowbw-varying", "--data-root", str(fmnist_root),
              "--method", "d-sgd"]
    results = tmp_path / "results" / "runs"
    assert main([*common, "--lr", "40", "--schedule", "warmup", "--warmup-iters", "12",
                 "--label", "d-sgd@ramp", "--out", str(results / "ramp")]) == 0
    assert main([*common, "--out", str(results / "plain")]) == 0
    out = write_report(tmp_path / "results")
    text = out.markdown.read_text()
    section = text[text.index("## Stability: the largest stable step"):
                   text.index("## Where the time goes")]
    assert "| d-sgd@ramp |" in section and "| d-sgd |" not in section
    assert "0 → 40 over 12" in section and "paper pipeline" in section
    # γ_0 = 40/12 keeps the CNN's loss at 2.3; γ_1 = 6.67 sends it to ~10, then it explodes
    assert "| 3.333 | 2 |" in section
    figure = "stability__cnn-fmnist__wan-200ms-lowbw-varying__w2"
    assert (tmp_path / "results" / "figures" / f"{figure}.png").is_file()
    assert f"figures/{figure}.png" in section


def test_the_report_draws_loss_curves_for_cells_without_a_target(tmp_path):
    """The committed gpu-stability runs (no target, no ramp): the report's loss-curve section
    has their cell's figure, the two runs that share a label told apart by their γ; a cell
    with a target gets none."""
    import shutil
    from pathlib import Path

    from decobench.reports import figures
    from decobench.reports.build import write_report
    from decobench.reports.runs import load_runs

    committed = Path(__file__).resolve().parents[1] / "docs" / "results" / "gpu-stability"
    shutil.copytree(committed / "runs", tmp_path / "runs")
    runs = load_runs(tmp_path).runs
    assert list(figures.untargeted(runs)) == [("gpt2-wikitext", "paper-gpt2", 4)]
    names = sorted(figures._curve_label(r, runs) for r in runs)
    assert names == ["d-sgd+clip1 (γ 0.01)", "d-sgd+clip1 (γ 0.05, warm-up 50)",
                     "deco-sgd+clip1 (γ 0.01)", "deco-sgd+clip1 (γ 0.05, warm-up 50)"]
    text = write_report(tmp_path).markdown.read_text()
    section = text[text.index("## Loss curves of runs without a target"):
                   text.index("## Where the time goes")]
    assert "figures/loss__gpt2-wikitext__paper-gpt2__w4.png" in section
    assert (tmp_path / "figures" / "loss__gpt2-wikitext__paper-gpt2__w4.png").is_file()
    targeted = [r for r in runs if r.label == "d-sgd+clip1"]
    for run in targeted:
        run.summary["target"] = 1000.0
    assert not figures.untargeted(targeted)


def test_the_figure_draws_no_two_labels_alike():
    """The stability figure's 11+ rules: the palette's 10 colours solid, then the same colours
    dashed (the 11th label is the first colour, dashed), each (colour, style) once."""
    from decobench.reports.figures import PALETTE, line_styles

    labels = [f"rule-{i:02d}" for i in range(30)]
    styles = line_styles(list(reversed(labels)))
    assert [styles[x] for x in labels[:11]] == [*((c, "-") for c in PALETTE), (PALETTE[0], "--")]
    assert styles["rule-29"] == (PALETTE[9], "-.")
    assert len(set(styles.values())) == 30
