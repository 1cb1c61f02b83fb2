"""Measurement estimators â, b̂, T̂ (docs/design.md §5.1)."""

from __future__ import annotations

import math

import pytest

from decobench.clock.timemodel import ConstantLink, EventClock
from decobench.clock.topology import topology_factors
from decobench.clock.wire import wire_bits
from decobench.errors import DecobenchError
from decobench.planning.estimators import Ewma, LinkEstimator, NetworkEstimate
from decobench.planning.planner import plan


def test_ewma() -> None:
    e = Ewma(0.5)
    assert e.value is None
    assert e.update(4.0) == 4.0  # first sample sets the value
    assert e.update(2.0) == 3.0  # 0.5 * 2 + 0.5 * 4
    assert e.update(3.0) == 3.0
    assert e.value == 3.0
    one = Ewma(1.0)
    one.update(1.0)
    assert one.update(7.0) == 7.0  # alpha = 1: last sample
    for bad in (0.0, -0.1, 1.5, math.nan):
        with pytest.raises(DecobenchError):
            Ewma(bad)
    with pytest.raises(DecobenchError):
        e.update(math.inf)


def test_link_estimator_hand_values() -> None:
    est = LinkEstimator(alpha=0.5)
    assert not est.ready()
    with pytest.raises(DecobenchError, match="bandwidth, latency, compute time"):
        est.estimate()
    # 300 bits on the link in 3 s -> 100 bit/s; (arrive - tx_end) / l = 1.5 / 3 = 0.5 s
    est.observe_transfer(300.0, tx_start_s=1.0, tx_end_s=4.0, arrive_s=5.5, latency_factor=3.0)
    assert not est.ready()
    est.observe_compute(0.25)
    assert est.ready()
    assert est.estimate() == NetworkEstimate(bandwidth_bps=100.0, latency_s=0.5, compute_s=0.25)
    # second transfer: 200 bit/s, latency 0.25 s; compute 0.75 -> averages with alpha 0.5
    est.observe_transfer(200.0, tx_start_s=4.0, tx_end_s=5.0, arrive_s=5.75, latency_factor=3.0)
    est.observe_compute(0.75)
    assert est.estimate() == NetworkEstimate(150.0, 0.375, 0.5)


def test_zero_duration_and_zero_factor_transfers_are_skipped() -> None:
    est = LinkEstimator(alpha=0.5)
    est.observe_transfer(0.0, 2.0, 2.0, 2.0, latency_factor=0.0)  # one worker under ring
    est.observe_compute(0.1)
    assert not est.ready()
    est.observe_transfer(100.0, 0.0, 1.0, 1.2, latency_factor=1.0)
    est.observe_transfer(0.0, 3.0, 3.0, 3.4, latency_factor=1.0)  # latency only
    e = est.estimate()
    assert e.bandwidth_bps == 100.0
    assert e.latency_s == pytest.approx(0.3)  # 0.5 * 0.4 + 0.5 * 0.2


def test_a_shapers_burst_is_taken_out_of_the_bandwidth_sample() -> None:
    """A 232,050-bit probe of which a 23,168-bit token bucket passed at line rate, the rest
    at 20 Mbit/s: 208,882 bits in 10.4441 ms. With the burst taken out the sample is the
    link's 20 Mbit/s; without it 22.2 Mbit/s (what the emulated DeCo-SGD read). A transfer
    no larger than the burst says nothing about â; b̂ is unchanged."""
    duration = (232_050 - 23_168) / 20e6
    est = LinkEstimator(alpha=1.0)
    est.observe_compute(0.04)
    est.observe_transfer(232_050.0, 1.0, 1.0 + duration, 1.2 + duration, latency_factor=1.0,
                         burst_bits=23_168.0)
    assert est.estimate().bandwidth_bps == pytest.approx(20e6)
    assert est.estimate().latency_s == pytest.approx(0.2)
    plain = LinkEstimator(alpha=1.0)
    plain.observe_transfer(232_050.0, 1.0, 1.0 + duration, 1.2, latency_factor=1.0)
    assert plain._bandwidth.value == pytest.approx(22.218e6, rel=1e-4)
    est.observe_transfer(20_000.0, 2.0, 2.001, 2.2, latency_factor=1.0, burst_bits=23_168.0)
    assert est.estimate().bandwidth_bps == pytest.approx(20e6)        # no sample
    assert est.estimate().latency_s == pytest.approx(0.199)
    for bad in (-1.0, math.nan):
        with pytest.raises(DecobenchError, match="burst bits"):
            est.observe_transfer(1.0, 0.0, 1.0, 1.0, latency_factor=1.0, burst_bits=bad)


def test_a_fitted_burst_reaches_the_estimator_from_the_clock() -> None:
    """The simulated clock charges (hW − B)/(g·a) and reports the burst with the transfer,
    so DeCo's estimator reads g·a from a transport model with a burst: 20 Mbit/s, 100 ms,
    B = 24,224 bits, g = 1, a 232,050-bit message."""
    from decobench.clock.transport_model import CollectiveCost, TransportModel
    from decobench.training.simulated import _observation

    cost = CollectiveCost(latency_multiplier=2.0, goodput=1.0, burst_bits=24_224.0)
    clock = EventClock(ConstantLink(20e6, 0.1), topology="ring", workers=2,
                       transport=TransportModel("t", all_gather=cost, all_reduce=cost))
    timing = clock.step(0.04, 232_050.0, 0, dense=False)
    assert timing.burst_bits == 24_224.0
    est = LinkEstimator(alpha=1.0)
    observation = _observation(timing)
    est.observe_transfer(observation.link_bits, observation.tx_start_s, observation.tx_end_s,
                         observation.arrive_s, observation.latency_factor,
                         observation.burst_bits)
    assert est._bandwidth.value == pytest.approx(20e6)
    assert (observation.arrive_s - observation.tx_end_s) == pytest.approx(0.2)


def test_link_estimator_rejects_out_of_order_observations() -> None:
    est = LinkEstimator()
    with pytest.raises(DecobenchError):
        est.observe_transfer(10.0, 2.0, 1.0, 3.0, 1.0)  # tx_end before tx_start
    with pytest.raises(DecobenchError):
        est.observe_transfer(10.0, 1.0, 2.0, 1.5, 1.0)  # arrives before tx_end
    with pytest.raises(DecobenchError):
        est.observe_compute(-1.0)
    with pytest.raises(DecobenchError):
        LinkEstimator(alpha=0.0)


@pytest.mark.parametrize("topology,workers", [("paper", 4), ("ring", 4), ("ring", 8)])
def test_estimates_from_the_clock_recover_a_constant_link(topology: str, workers: int) -> None:
    # On a constant link the estimators recover a and b exactly from the clock's timings,
    # whatever the queueing, because they use service time (txe - txs), not end -> txe.
    a, b, T, d = 1e8, 0.2, 0.1, 1_000_000
    clock = EventClock(ConstantLink(a, b), topology, workers)
    est = LinkEstimator()
    for k in range(30):
        delta = 0.05 if k % 3 else 1.0
        dense = delta >= 1
        f = topology_factors(topology, workers, dense)
        row = clock.step(T, wire_bits(delta, d), staleness=2, dense=dense)
        est.observe_transfer(f.h * row.bits, row.tx_start_s, row.tx_end_s, row.arrive_s, f.l)
        est.observe_compute(row.compute_s)
    e = est.estimate()
    assert e.bandwidth_bps == pytest.approx(a, rel=1e-9)
    assert e.latency_s == pytest.approx(b, rel=1e-9)
    assert e.compute_s == pytest.approx(T)
    # and planning from the estimates gives the plan made from the truth
    from_estimates = plan(d, workers, e.compute_s, e.bandwidth_bps, e.latency_s, topology=topology)
    from_truth = plan(d, workers, T, a, b, topology=topology)
    assert (from_estimates.delta, from_estimates.staleness) == (
        from_truth.delta,
        from_truth.staleness,
    )
