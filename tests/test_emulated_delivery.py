"""The delivery-delay layer: arrive = tx_end + l·b(tx_end) (comm-layer) or tx_end (kernel)."""

import pytest

from decobench.clock.timemodel import ConstantLink
from decobench.emulated.delivery import DeliveryDelay
from decobench.errors import DecobenchError
from decobench.netem.trace import Trace


def test_comm_layer_adds_ring_latency_factor_times_b():
    link = ConstantLink(20e6, 0.1)
    three = DeliveryDelay(link, "comm-layer", "ring", workers=3)
    # ring all-gather: l = n - 1 = 2 hops; ring all-reduce: l = 2 (n - 1) = 4 hops
    assert three.arrival_s(5.0, dense=False) == pytest.approx(5.0 + 2 * 0.1)
    assert three.arrival_s(5.0, dense=True) == pytest.approx(5.0 + 4 * 0.1)
    paper = DeliveryDelay(link, "comm-layer", "paper", workers=3)
    assert paper.arrival_s(5.0, dense=True) == pytest.approx(5.1)


def test_kernel_mechanism_adds_nothing():
    delay = DeliveryDelay(ConstantLink(20e6, 0.1), "kernel", "ring", workers=2)
    assert delay.arrival_s(3.25, dense=True) == 3.25
    assert delay.added_latency_s(3.25, dense=False) == 0.0


def test_latency_is_read_at_transmission_end_on_the_trace_clock():
    # 100 ms until t = 10 s, then 300 ms
    trace = Trace(times_s=(0.0, 10.0), bandwidth_bps=(20e6, 20e6), latency_s=(0.1, 0.3))
    delay = DeliveryDelay(trace, "comm-layer", "ring", workers=2)
    assert delay.arrival_s(9.5, dense=False) == pytest.approx(9.6)     # l = 1, b = 0.1
    assert delay.arrival_s(10.5, dense=False) == pytest.approx(10.8)   # l = 1, b = 0.3
    assert delay.arrival_s(10.5, dense=True) == pytest.approx(11.1)    # l = 2


def test_unknown_mechanism_is_an_error():
    with pytest.raises(DecobenchError, match="latency mechanism"):
        DeliveryDelay(ConstantLink(1e6, 0.0), "netem-ish", "ring", workers=2)  # type: ignore[arg-type]
