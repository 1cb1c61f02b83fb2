"""Network conditions relative to a task: the regime ratios S/(a·T) and b/T."""

import math

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from decobench.cli.main import main
from decobench.clock.regime import (
    latency_ratio,
    map_trace,
    parse_regime,
    ratio_trace,
    transmission_ratio,
)
from decobench.errors import DecobenchError
from decobench.netem.trace import Trace, load_trace
from decobench.runs.rundir import read_metrics, read_summary


def test_ratios_hand_checked():
    # d = 1e6 parameters → S = 32e6 bits; a = 16 Mbit/s; T = 0.5 s → ρ = 2 / 0.5 = 4
    assert transmission_ratio(1_000_000, 16e6, 0.5) == pytest.approx(4.0)
    assert latency_ratio(0.2, 0.5) == pytest.approx(0.4)


def test_ratio_trace_is_the_constant_condition():
    trace = ratio_trace(4.0, 0.4, d=1_000_000, compute_s=0.5)
    assert trace.bandwidth_bps == (16e6,) and trace.latency_s == (pytest.approx(0.2),)
    with pytest.raises(DecobenchError):
        ratio_trace(0.0, 0.4, d=10, compute_s=1.0)


@given(scale_d=st.floats(1e-4, 1e3), scale_t=st.floats(1e-3, 1e2))
def test_mapping_keeps_both_ratios_and_the_iterations_of_every_change(scale_d, scale_t):
    ref = load_trace("wan-200ms-lowbw-varying")
    d_ref, t_ref = 454_922, 0.2
    d, t = max(1, round(d_ref * scale_d)), t_ref * scale_t
    mapped = map_trace(ref, reference_d=d_ref, reference_compute_s=t_ref, d=d, compute_s=t,
                       name="mapped")
    for i in range(len(ref.times_s)):
        assert transmission_ratio(d, mapped.bandwidth_bps[i], t) == pytest.approx(
            transmission_ratio(d_ref, ref.bandwidth_bps[i], t_ref), rel=1e-9)
        assert latency_ratio(mapped.latency_s[i], t) == pytest.approx(
            latency_ratio(ref.latency_s[i], t_ref), rel=1e-9)
        assert mapped.times_s[i] / t == pytest.approx(ref.times_s[i] / t_ref, rel=1e-9)


def test_mapping_onto_the_reference_itself_is_the_identity():
    ref = Trace(times_s=(0, 5), bandwidth_bps=(20e6, 10e6), latency_s=(0.2, 0.1))
    same = map_trace(ref, reference_d=10, reference_compute_s=0.2, d=10, compute_s=0.2, name="x")
    assert (same.times_s, same.bandwidth_bps, same.latency_s) == (
        ref.times_s, ref.bandwidth_bps, ref.latency_s)


def test_parse_regime_aliases_and_errors():
    assert parse_regime("paper-wan") == ("paper", "wan-200ms-lowbw-varying")
    assert parse_regime("cpu:my.csv") == ("cpu", "my.csv")
    with pytest.raises(DecobenchError, match="PROFILE:TRACE"):
        parse_regime("nonsense")


RUN = ["run", "--task", "cnn-fmnist", "--method", "deco-sgd", "--workers", "2",
       "--batch-size", "16", "--max-iters", "8", "--eval-every", "8", "--no-progress"]


def _run(tmp_path, fmnist_root, name, *extra):
    out = tmp_path / name
    assert main([*RUN, "--data-root", str(fmnist_root), "--out", str(out), *extra]) == 0
    return out


def test_regime_on_the_reference_profile_equals_the_trace(tmp_path, fmnist_root):
    a = _run(tmp_path, fmnist_root, "trace", "--trace", "wan-200ms-lowbw-varying")
    b = _run(tmp_path, fmnist_root, "regime", "--regime", "paper-wan")
    times = [[r["sim_time_s"] for r in read_metrics(x)] for x in (a, b)]
    assert times[0] == times[1]
    assert (b / "trace.csv").exists() and not (a / "trace.csv").exists()
    network = yaml.safe_load((b / "config.yaml").read_text())["network"]
    assert network["kind"] == "regime" and network["reference_profile"] == "paper"
    assert read_summary(b)["network"] == "regime"


def test_cpu_profile_in_the_paper_regime_runs_at_the_same_iterations(tmp_path, fmnist_root):
    """T = 16 ms instead of 200 ms: every simulated time scales by k = 0.08 exactly."""
    paper = _run(tmp_path, fmnist_root, "paper", "--regime", "paper-wan")
    cpu = _run(tmp_path, fmnist_root, "cpu", "--regime", "paper-wan", "--profile", "cpu")
    k = 0.016 / 0.2
    for p, c in zip(read_metrics(paper), read_metrics(cpu), strict=True):
        assert c["sim_time_s"] == pytest.approx(k * p["sim_time_s"], rel=1e-9)
        assert (c["delta"], c["tau"]) == (pytest.approx(p["delta"], rel=1e-9), p["tau"])
    network = yaml.safe_load((cpu / "config.yaml").read_text())["network"]
    assert network["mean_transmission_ratio"] == pytest.approx(
        transmission_ratio(454_922, load_trace("wan-200ms-lowbw-varying").mean_bandwidth_bps(),
                           0.2))


def test_ratios_give_a_constant_network(tmp_path, fmnist_root):
    out = _run(tmp_path, fmnist_root, "ratios", "--transmission-ratio", "4",
               "--latency-ratio", "1", "--method", "d-sgd")
    rows = read_metrics(out)
    # D-SGD: T + S/a + b = T (1 + ρ + λ) = 0.2 · 6 per iteration
    steps = [b["sim_time_s"] - a["sim_time_s"] for a, b in zip(rows, rows[1:], strict=False)]
    assert steps == [pytest.approx(0.2 * 6)] * (len(rows) - 1)
    assert math.isclose(rows[0]["latency_ms"], 200.0)


@pytest.mark.parametrize("extra,message", [
    ([], "exactly one of --trace, --regime"),
    (["--trace", "wan-200ms-lowbw-varying", "--regime", "paper-wan"], "got --trace, --regime"),
    (["--transmission-ratio", "4"], "together"),
    (["--regime", "paper-wan", "--compute-time", "measured"], "T must be fixed"),
    (["--regime", "gpu:wan-200ms-lowbw-varying"], "no profile 'gpu'"),
])
def test_bad_network_conditions_fail_before_training(tmp_path, fmnist_root, capsys, extra,
                                                     message):
    out = tmp_path / "bad"
    assert main([*RUN, "--data-root", str(fmnist_root), "--out", str(out), *extra]) == 2
    assert message in capsys.readouterr().err and not out.exists()


def test_shaped_ratio_trace_keeps_the_means_and_the_shape():
    """A two-row shape (10 Mbit/s, 100 ms for 5 s; 30 Mbit/s, 300 ms for 5 s: means 20 Mbit/s
    and 200 ms) at ρ = 4, λ = 1 for d = 1000, T = 0.1 s, read against a reference T = 0.2 s:
    times halve (k = 0.5), a = 32,000 / (4 · 0.1) = 80 kbit/s on average and b = 0.1 s."""
    from decobench.clock.regime import shaped_ratio_trace, transmission_ratio
    from decobench.netem.trace import Trace

    shape = Trace(times_s=(0.0, 5.0), bandwidth_bps=(10e6, 30e6), latency_s=(0.1, 0.3),
                  name="shape")
    trace = shaped_ratio_trace(shape, 4.0, 1.0, d=1000, compute_s=0.1, reference_compute_s=0.2)
    assert trace.times_s == (0.0, 2.5)
    assert trace.bandwidth_bps == pytest.approx((40e3, 120e3))
    assert trace.latency_s == pytest.approx((0.05, 0.15))
    assert transmission_ratio(1000, trace.mean_bandwidth_bps(), 0.1) == pytest.approx(4.0)
    assert trace.mean_latency_s() == pytest.approx(0.1)


def test_ratio_shape_needs_the_ratios():
    from decobench.runs.config import RunConfig

    with pytest.raises(ValueError, match="--ratio-shape shapes the network"):
        RunConfig(task="cnn-fmnist", method="d-sgd", trace="constant-20mbps-100ms",
                  ratio_shape="deco52-cnn-fmnist")
