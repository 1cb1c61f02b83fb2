"""Transport models (decobench.clock.transport_model): the event clock's charge with a fitted
model, hand-checked; the calibration fit recovering a known model; loading and identity;
the fidelity's first-plan comparison; a simulated run that uses a model."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decobench.clock.timemodel import ConstantLink, EventClock
from decobench.clock.transport_model import (
    IDEAL,
    CollectiveCost,
    TransportModel,
    load_transport_model,
)
from decobench.emulated.calibrate import Timing, fit_cost
from decobench.emulated.fidelity import first_plan, measured_compute_s, plans_agree
from decobench.errors import DecobenchError
from decobench.planning.estimators import LinkEstimator
from decobench.training.simulated import _observation

SPARSE = CollectiveCost(latency_multiplier=2.0, goodput=0.5, burst_bits=0.4e6)
MODEL = TransportModel("test", all_gather=SPARSE, all_reduce=CollectiveCost(3.0, 1.0, 0.0))


def test_ideal_model_is_the_time_model():
    link = ConstantLink(20e6, 0.1)
    a, b = EventClock(link), EventClock(link, transport=IDEAL)
    for _ in range(5):
        assert a.step(0.05, 2e6, 1, False) == b.step(0.05, 2e6, 1, False)


def test_fitted_model_charges_burst_goodput_and_latency_by_hand():
    # 2 Mbit at 20 Mbit/s: (2 - 0.4) Mbit / 0.5 goodput = 3.2 Mbit at the rate -> 0.16 s;
    # delivered 2 x 1 x 0.1 s later (paper topology: h = l = 1)
    clock = EventClock(ConstantLink(20e6, 0.1), transport=MODEL)
    t = clock.step(0.05, 2e6, 0, False)
    assert t.tx_start_s == pytest.approx(0.05)
    assert t.tx_end_s == pytest.approx(0.05 + 0.16)
    assert t.arrive_s == pytest.approx(0.05 + 0.16 + 0.2)
    assert (t.link_bits, t.latency_factor) == (2e6, 1.0)      # what an estimator divides by
    # the next iteration waits for it (τ = 0): starts at 0.41
    assert clock.step(0.05, 2e6, 0, False).start_s == pytest.approx(0.41)
    # a dense message uses the all-reduce cost: 2 Mbit at the rate, 3 x 0.1 s latency
    dense = EventClock(ConstantLink(20e6, 0.1), transport=MODEL).step(0.05, 2e6, 0, True)
    assert dense.arrive_s - dense.tx_end_s == pytest.approx(0.3)
    # a message inside the burst costs no link time
    small = EventClock(ConstantLink(20e6, 0.1), transport=MODEL).step(0.05, 0.3e6, 0, False)
    assert small.tx_end_s == small.tx_start_s


def test_estimators_read_what_the_transport_delivers():
    """DeCo's â and b̂ on the simulated clock with a model are the transport's, as the
    emulated ranks measure them: â = hW / (tx time), b̂ = m·b."""
    clock = EventClock(ConstantLink(20e6, 0.1), transport=MODEL)
    seen = _observation(clock.step(0.05, 2e6, 0, False))
    estimator = LinkEstimator(alpha=1.0)
    estimator.observe_transfer(seen.link_bits, seen.tx_start_s, seen.tx_end_s, seen.arrive_s,
                               seen.latency_factor)
    estimator.observe_compute(0.05)
    estimate = estimator.estimate()
    assert estimate.bandwidth_bps == pytest.approx(2e6 / 0.16)
    assert estimate.latency_s == pytest.approx(0.2)


@settings(max_examples=50, deadline=None)
@given(m=st.floats(0.5, 4.0), g=st.floats(0.3, 1.5), burst=st.floats(0.0, 1e5),
       rate=st.floats(1e6, 1e9), b=st.floats(0.001, 0.3), n=st.integers(2, 8))
def test_calibration_fit_recovers_the_model_that_made_the_timings(m, g, burst, rate, b, n):
    l_hops = float(n - 1)
    fixed = m * l_hops * b
    sizes = [burst + rate * s * g for s in (0.01, 0.05, 0.25, 1.0)]
    timings = [Timing("all_gather", 0.0, fixed)] + [
        Timing("all_gather", x, fixed + (x - burst) / (g * rate)) for x in sizes]
    cost = fit_cost(timings, rate, b, l_hops, added_latency_s=0.0)
    assert cost.latency_multiplier == pytest.approx(m, rel=1e-6)
    assert cost.goodput == pytest.approx(g, rel=1e-6)
    assert cost.burst_bits == pytest.approx(burst, rel=1e-6, abs=1e-3)


def test_calibration_fit_under_comm_layer_and_a_per_collective_cost():
    # the comm layer adds l·b after the collective; an intercept above the empty
    # collective's time is a per-collective cost, not a negative burst
    rate, b = 20e6, 0.1
    timings = [Timing("all_reduce", 0.0, 0.002)] + [
        Timing("all_reduce", x, 0.002 + 0.03 + x / rate) for x in (1e6, 5e6, 20e6)]
    cost = fit_cost(timings, rate, b, latency_factor=2.0, added_latency_s=0.2)
    assert cost.burst_bits == 0.0 and cost.goodput == pytest.approx(1.0)
    assert cost.latency_multiplier == pytest.approx((0.032 + 0.2) / 0.2)
    with pytest.raises(DecobenchError, match="at least two sizes"):
        fit_cost(timings[:2], rate, b, 2.0, 0.0)
    flat = [Timing("all_reduce", 0.0, 0.1)] + [Timing("all_reduce", x, 0.2) for x in (1e6, 2e6)]
    with pytest.raises(DecobenchError, match="larger collectives did not take longer"):
        fit_cost(flat, rate, b, 2.0, 0.0)


def test_calibration_burst_is_at_most_the_shapers_bucket():
    # the timings of 2026-11-26 (nfqueue, 20 Mbit/s, 100 ms, all-gather of 2 ranks): sized
    # collectives 2.4-3 ms sooner than the empty one plus their link time
    rate, b = 20e6, 0.1
    timings = [Timing("all_gather", 0.0, s) for s in (0.21, 0.2039, 0.204)] + [
        Timing("all_gather", x, s) for x, s in ((2e5, 0.2115), (1e6, 0.2509), (5e6, 0.4554),
                                                (2e7, 1.215))]
    free = fit_cost(timings, rate, b, 1.0, 0.0)
    assert 50e3 < free.burst_bits < 60e3                  # what the line alone says
    bucket = 8.0 * 3028                                   # burst_bytes(20 Mbit/s)
    capped = fit_cost(timings, rate, b, 1.0, 0.0, max_burst_bits=bucket)
    assert capped.burst_bits == bucket and capped.goodput == pytest.approx(free.goodput)
    # the rest of the intercept shortens the fixed cost: same time for every fitted size
    def total(cost, x):
        return cost.latency_multiplier * b + cost.rate_bits(x) / rate

    for x in (1e6, 2e7):
        assert total(capped, x) == pytest.approx(total(free, x), abs=1e-9)
    assert capped.latency_multiplier < free.latency_multiplier
    # but a message smaller than the line's "burst" is no longer free
    assert free.rate_bits(64268) < 1e4 and capped.rate_bits(64268) > 4e4


def test_load_a_model_file_or_run_directory_and_refuse_bad_ones(tmp_path):
    assert load_transport_model("ideal") is IDEAL
    (tmp_path / "transport_model.json").write_text(json.dumps(MODEL.to_dict()))
    assert load_transport_model(tmp_path) == MODEL
    assert load_transport_model(tmp_path / "transport_model.json") == MODEL
    with pytest.raises(DecobenchError, match="no such file .*--calibrate-transport"):
        load_transport_model(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(DecobenchError, match="not JSON"):
        load_transport_model(tmp_path / "bad.json")
    (tmp_path / "odd.json").write_text(json.dumps({"name": "x", "all_gather": {}}))
    with pytest.raises(DecobenchError, match="not a transport model"):
        load_transport_model(tmp_path / "odd.json")
    with pytest.raises(DecobenchError, match="goodput must be in"):
        CollectiveCost(goodput=0.0)


def test_identity_counts_a_model_by_its_numbers(tmp_path):
    from decobench.runs.config import RunConfig
    from decobench.runs.identity import identity

    base = {"task": "cnn-fmnist", "method": "d-sgd", "trace": "constant-20mbps-100ms"}
    plain = identity(RunConfig(**base))
    assert identity(RunConfig(**base, transport_model="ideal")) == plain
    one, other = tmp_path / "a.json", tmp_path / "b.json"
    one.write_text(json.dumps(MODEL.to_dict()))
    other.write_text(json.dumps({**MODEL.to_dict(), "source": "elsewhere"}))
    fitted = identity(RunConfig(**base, transport_model=str(one)))
    assert fitted != plain
    changed = {**MODEL.to_dict(), "all_gather": {**MODEL.to_dict()["all_gather"], "goodput": 0.6}}
    other.write_text(json.dumps(changed))
    assert identity(RunConfig(**base, transport_model=str(other))) != fitted


def test_first_plans_compare_delta_and_tau():
    rows = [{"iteration": 2, "delta": 0.01, "tau": 0},
            {"iteration": 3, "delta": 0.2, "tau": 3, "plan_phi": 7.0},
            {"iteration": 9, "delta": 0.3, "tau": 2, "plan_phi": 5.0}]
    assert first_plan(rows) == (0.2, 3)
    assert first_plan([{"iteration": 1, "delta": 1.0, "tau": 0}]) is None
    assert plans_agree((0.21, 3), (0.2, 3)) is True
    assert plans_agree((0.23, 3), (0.2, 3)) is False
    assert plans_agree((0.2, 4), (0.2, 3)) is False
    assert plans_agree(None, (0.2, 3)) is None


def test_a_simulated_run_with_a_model_is_slower_and_says_so(tmp_path, fmnist_root):
    import yaml

    from decobench.cli.main import main
    from decobench.runs.rundir import read_summary

    (tmp_path / "model.json").write_text(json.dumps(MODEL.to_dict()))
    common = ["run", "--task", "cnn-fmnist", "--profile", "cpu", "--workers", "2",
              "--method", "d-sgd", "--trace", "constant-20mbps-100ms", "--max-iters", "3",
              "--eval-every", "3", "--data-root", str(fmnist_root), "--no-progress",
              "--no-wandb"]
    assert main([*common, "--out", str(tmp_path / "ideal")]) == 0
    assert main([*common, "--transport-model", str(tmp_path / "model.json"),
                 "--out", str(tmp_path / "fitted")]) == 0
    ideal, fitted = read_summary(tmp_path / "ideal"), read_summary(tmp_path / "fitted")
    assert fitted["sim_time_s"] > ideal["sim_time_s"]
    config = yaml.safe_load((tmp_path / "fitted" / "config.yaml").read_text())
    assert config["transport"]["all_reduce"]["latency_multiplier"] == 3.0
    assert "transport" not in yaml.safe_load((tmp_path / "ideal" / "config.yaml").read_text())
    assert main([*common, "--backend", "emulated", "--transport-model",
                 str(tmp_path / "model.json"), "--out", str(tmp_path / "emu")]) == 2


def test_fidelity_T_is_the_time_rank_0_did_not_wait():
    # the wait logged with iteration k is spent between t_k and t_{k+1}
    rows = [{"iteration": 0, "sim_time_s": 0.2, "wait_s": 0.0},
            {"iteration": 1, "sim_time_s": 1.0, "wait_s": 0.5},
            {"iteration": 2, "sim_time_s": 1.6, "wait_s": 0.0},
            {"iteration": 3, "sim_time_s": 1.7, "wait_s": 0.2},
            {"iteration": 4, "sim_time_s": 2.0, "wait_s": 9.0}]    # after t_K: not counted
    assert measured_compute_s(rows, warmup=1) == pytest.approx((2.0 - 1.0 - 0.7) / 3)
    with pytest.raises(DecobenchError, match="fidelity needs more than 4 logged iterations"):
        measured_compute_s(rows, warmup=4)


def test_fidelity_replays_rank_0s_time_not_waiting_iteration_by_iteration():
    from decobench.emulated.fidelity import measured_compute_times

    # T_r = t_r - t_{r-1} - wait_{r-1}, t_0 = 0: the rows' times and waits by hand
    rows = [{"iteration": 1, "sim_time_s": 0.2, "wait_s": 0.0},
            {"iteration": 2, "sim_time_s": 1.0, "wait_s": 0.5},
            {"iteration": 3, "sim_time_s": 1.6, "wait_s": 0.0},
            {"iteration": 4, "sim_time_s": 1.7, "wait_s": 0.2}]
    assert measured_compute_times(rows) == pytest.approx((0.2, 0.8, 0.1, 0.1))
    with pytest.raises(DecobenchError, match="iteration 2 has none"):
        measured_compute_times([rows[0], rows[2]])


def test_the_own_plan_run_takes_the_ranks_agreed_t_hat_samples_where_reported():
    from decobench.emulated.fidelity import measured_compute_times, planning_compute_times

    rows = [{"iteration": 1, "sim_time_s": 0.2, "wait_s": 0.0},
            {"iteration": 2, "sim_time_s": 1.0, "wait_s": 0.5},
            {"iteration": 3, "sim_time_s": 1.6, "wait_s": 0.0,    # iteration 2's report
             "reported_work_s": 0.9, "reported_work_iteration": 2},
            {"iteration": 4, "sim_time_s": 1.7, "wait_s": 0.2,
             "reported_work_s": 0.15, "reported_work_iteration": 3}]
    assert measured_compute_times(rows) == pytest.approx((0.2, 0.8, 0.1, 0.1))
    assert planning_compute_times(rows) == pytest.approx((0.2, 0.9, 0.15, 0.1))


def _one_worker_clock(latency_s, compute_times, report="arrival"):
    """A started one-worker simulated transport on a 1 Gbit/s link of ``latency_s`` with
    the given T_k (T = 0.5 s after them), and an empty payload (no bits to send)."""
    import torch

    from decobench.compression.compressors import Compressed
    from decobench.netem.trace import Trace
    from decobench.training.simulated import SimulatedTransport

    trace = Trace(times_s=(0.0,), bandwidth_bps=(1e9,), latency_s=(latency_s,))
    transport = SimulatedTransport(lambda d: trace, "paper", 1, 0.5,
                                   compute_times=compute_times, report=report)
    transport.start(4)
    return transport, Compressed(values=torch.zeros(1, 4), indices=None, d=4,
                                 bits_per_worker=0, delta=1.0)


def test_a_simulated_clock_charges_replayed_compute_times_then_the_constant():
    from decobench.methods import Sent

    transport, payload = _one_worker_clock(0.0, (0.1, 0.3))
    ends = [transport.complete(k, Sent(payload=payload, staleness=0), 9.0).sim_time_s
            for k in range(4)]
    assert ends == pytest.approx([0.1, 0.4, 0.9, 1.4])


def test_network_plan_takes_the_emulated_network_and_the_simulated_compute_time():
    from types import SimpleNamespace

    from decobench.emulated.fidelity import network_plan
    from decobench.planning.phi import get_phi
    from decobench.planning.planner import plan

    options = SimpleNamespace(phi="paper", tau_max=32, delta_min=1e-4, kappa=1.0,
                              planner="paper")
    emulated = [{"iteration": 1, "delta": 0.01, "tau": 0},
                {"iteration": 3, "delta": 0.03, "tau": 8, "plan_bandwidth_mbps": 20.7,
                 "plan_latency_ms": 201.6, "plan_compute_ms": 32.7}]
    simulated = [{"iteration": 2, "delta": 0.04, "tau": 6, "plan_bandwidth_mbps": 22.2,
                  "plan_latency_ms": 201.7, "plan_compute_ms": 41.7}]
    expected = plan(454922, 2, 0.0417, 20.7e6, 0.2016, topology="ring",
                    phi=get_phi("paper"))
    got = network_plan(emulated, simulated, options, 454922, 2, "ring")
    assert got == (expected.delta, expected.staleness)
    # with the emulated T̂ instead, the plan moves: the check is not the emulated plan again
    assert got != (lambda p: (p.delta, p.staleness))(
        plan(454922, 2, 0.0327, 20.7e6, 0.2016, topology="ring", phi=get_phi("paper")))
    assert network_plan(emulated[:1], simulated, options, 454922, 2, "ring") is None
    assert network_plan(emulated, simulated, SimpleNamespace(), 454922, 2, "ring") is None
    # deco-sgd-robust plans from windows of samples, not from one â and b̂: no such plan
    from decobench.methods.robust import RobustDecoOptions

    assert network_plan(emulated, simulated, RobustDecoOptions(), 454922, 2, "ring") is None


def test_fidelity_reads_the_emulated_runs_link_counters(tmp_path):
    """Drops and retransmitted segments come from the run's qdisc_stats.json; a run without
    the file, or from before the TCP counters were read, has none (printed '-')."""
    from decobench.emulated.fidelity import link_counters

    assert link_counters(tmp_path) == (None, None)
    (tmp_path / "qdisc_stats.json").write_text(json.dumps({"drops": 2, "links": {}}))
    assert link_counters(tmp_path) == (2, None)
    (tmp_path / "qdisc_stats.json").write_text(json.dumps(
        {"drops": 0, "links": {}, "retransmitted_segments": 5, "tcp": {}}))
    assert link_counters(tmp_path) == (0, 5)


def test_fidelity_first_plans_by_hand():
    """first_plan: (δ, τ) of the first row carrying plan_* fields, in iteration order;
    network_plan: the planner on the emulated first â, b̂ and the simulated first T̂, here
    the planner's hand-checked case (d = 10^6, 4 workers, paper topology: â = 100 Mbit/s,
    b̂ = 200 ms, T̂ = 100 ms -> δ 0.28125, τ 3; tests/test_methods.py)."""
    from decobench.emulated.fidelity import first_plan, network_plan
    from decobench.methods.options import DecoOptions

    emulated = [{"iteration": 4, "delta": 0.5, "tau": 1, "plan_phi": 1.0},
                {"iteration": 3, "delta": 0.2, "tau": 2, "plan_bandwidth_mbps": 100.0,
                 "plan_latency_ms": 200.0, "plan_compute_ms": 30.0},
                {"iteration": 1, "delta": 0.01, "tau": 0}]
    planned = [{"iteration": 2, "delta": 0.3, "tau": 3, "plan_bandwidth_mbps": 90.0,
                "plan_latency_ms": 210.0, "plan_compute_ms": 100.0}]
    assert first_plan(emulated) == (0.2, 2) and first_plan(planned) == (0.3, 3)
    assert first_plan([{"iteration": 1, "delta": 0.01, "tau": 0}]) is None
    assert network_plan(emulated, planned, DecoOptions(), 1_000_000, 4, "paper") == (0.28125, 3)
    assert network_plan(emulated, planned, None, 1_000_000, 4, "paper") is None
    assert network_plan(emulated[2:], planned, DecoOptions(), 1_000_000, 4, "paper") is None


def test_a_simulated_observation_carries_the_freshest_iterations_compute_time():
    """As an emulated rank reports it (the header's iteration, not the message's): iteration
    0's one-off costs must not be the first plan's T̂ when fidelity replays measured T_k."""
    from decobench.methods import Sent

    transport, payload = _one_worker_clock(0.25, (0.1, 0.3, 0.2, 0.05))
    seen = {}
    for k in range(4):
        for observation in transport.observations(k):
            seen[observation.iteration] = (k, observation.compute_s)
        transport.complete(k, Sent(payload=payload, staleness=8), 9.0)
    # iteration 0 ends at 0.1 s and its message arrives at 0.35 s (l = 1 for one worker):
    # after iteration 1 starts (0.1 s), by iteration 2's start (0.4 s), where the freshest
    # T is iteration 1's 0.3 s, not iteration 0's 0.1 s; iteration 1's arrives at 0.65 s
    assert seen[0] == (2, pytest.approx(0.3))
    assert 1 not in seen


@pytest.mark.parametrize("tau, expected", [
    # τ = 0: message s is consumed at s, reported in s + 1 with T_{s+1}, observed at s + 2
    (0, {2: (0, 0.3), 3: (1, 0.2), 4: (2, 0.05), 5: (3, 0.07), 6: (4, 0.09), 7: (5, 0.11)}),
    # τ = 2: consumed at s + 2, reported in s + 3 (T_{s+3}), that consumed at s + 5,
    # observed at s + 6
    (2, {6: (0, 0.05), 7: (1, 0.07)}),
])
def test_next_message_reports_reach_the_method_as_the_emulated_ranks_headers_do(tau, expected):
    from decobench.methods import Sent
    from decobench.training.simulated import SimulatedTransport

    transport, payload = _one_worker_clock(0.25, (0.1, 0.3, 0.2, 0.05, 0.07, 0.09, 0.11, 0.13),
                                           report="next-message")
    seen = {}
    for k in range(8):
        for observation in transport.observations(k):
            assert k not in seen, "one report per iteration here"
            seen[k] = (observation.iteration, observation.compute_s)
        sent = Sent(payload=payload, staleness=tau)
        transport.submit(k, sent, 0.0)
        transport.due(k)
        transport.complete(k, sent, 9.0)
    assert seen == {k: (s, pytest.approx(t)) for k, (s, t) in expected.items()}
    with pytest.raises(ValueError, match="report must be one of arrival, next-message"):
        SimulatedTransport(lambda d: None, "paper", 1, 0.5, report="soon")
