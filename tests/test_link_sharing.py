"""The ``shared`` link of a transport model (decobench.clock.link_sharing): collectives on lanes of
their own, sending at a share of the link. Hand-checked schedules, the lanes' bound, a
bandwidth change mid-transfer, agreement with the FIFO link while messages do not overlap
(hypothesis), the model file's new fields, and a simulated run under it."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from decobench.clock.timemodel import ConstantLink, EventClock
from decobench.clock.transport_model import CollectiveCost, TransportModel, load_transport_model
from decobench.errors import DecobenchError
from decobench.netem.trace import Trace

PLAIN = CollectiveCost(latency_multiplier=1.0, goodput=1.0, burst_bits=0.0)


def shared(lanes: int | None = None, cost: CollectiveCost = PLAIN) -> TransportModel:
    return TransportModel("test", all_gather=cost, all_reduce=cost, link_sharing="shared",
                          lanes=lanes)


def deliver_all(clock: EventClock) -> dict:
    """Every stepped message's final timing (the fluid run to the last delivery)."""
    clock._drain_due_before(10**9)
    return {t.iteration: t for t in clock.pop_final()}


def timings(clock: EventClock, steps: list[tuple[float, float, int]], dense: bool = False):
    for compute, bits, tau in steps:
        clock.step(compute, bits, tau, dense)
    return deliver_all(clock)


def test_two_messages_issued_together_share_the_link_and_arrive_together():
    # a = 10 bit/s, b = 1 s, 10 bits each, paper topology (one step: wait b/2, send,
    # wait b/2). Both issued at t = 0 (T = 0, τ = 5: nothing waits):
    #   0.0-0.5 ready notice; 0.5-2.5 both send at 5 bit/s; 2.5-3.0 delivery -> arrive 3.0
    # (the FIFO link: 0 sends 0-1, arrives 2; 1 sends 1-2, arrives 3)
    clock = EventClock(ConstantLink(10.0, 1.0), transport=shared())
    t = timings(clock, [(0.0, 10.0, 5), (0.0, 10.0, 5)])
    assert t[0].arrive_s == pytest.approx(3.0) and t[1].arrive_s == pytest.approx(3.0)
    # times in send order, as the emulated ranks set them: tx_end = arrive - m·l·b
    assert (t[0].tx_start_s, t[0].tx_end_s) == pytest.approx((0.0, 2.0))
    assert (t[1].tx_start_s, t[1].tx_end_s) == pytest.approx((2.0, 2.0))
    fifo = EventClock(ConstantLink(10.0, 1.0),
                      transport=shared().with_link_sharing("fifo"))
    f = timings(fifo, [(0.0, 10.0, 5), (0.0, 10.0, 5)])
    assert (f[0].arrive_s, f[1].arrive_s) == pytest.approx((2.0, 3.0))


def test_a_message_sent_later_slows_the_earlier_one_down():
    # 0 (20 bits) issued at 0 sends from 0.5; 1 (10 bits) issued at 1.0 sends from 1.5.
    # 0 sends 10 bits alone over 0.5-1.5, then both send at 5 bit/s: 0's last 10 bits and
    # 1's 10 bits both end at 3.5, and both arrive at 4.0
    clock = EventClock(ConstantLink(10.0, 1.0), transport=shared())
    t = timings(clock, [(0.0, 20.0, 5), (1.0, 10.0, 5)])
    assert t[0].arrive_s == pytest.approx(4.0) and t[1].arrive_s == pytest.approx(4.0)
    # the same two alone on the link: 0 would have arrived at 0.5 + 2 + 0.5 = 3.0
    alone = timings(EventClock(ConstantLink(10.0, 1.0), transport=shared()), [(0.0, 20.0, 5)])
    assert alone[0].arrive_s == pytest.approx(3.0)


def test_goodput_caps_each_collective_not_the_link():
    # g = 0.5: a lone collective sends at 5 bit/s on a 10 bit/s link (what FIFO charges:
    # 10 bits in 2 s, arrive 0.5 + 2 + 0.5 = 3.0). Two issued together each send at
    # min(0.5, 1/2)·10 = 5 bit/s, so they fill the link and both arrive at 3.0 (a loss of
    # the link's capacity would have sent them at 2.5 bit/s each and delivered at 5.0)
    half = CollectiveCost(latency_multiplier=1.0, goodput=0.5, burst_bits=0.0)
    alone = timings(EventClock(ConstantLink(10.0, 1.0), transport=shared(cost=half)),
                    [(0.0, 10.0, 5)])
    assert alone[0].arrive_s == pytest.approx(3.0)
    t = timings(EventClock(ConstantLink(10.0, 1.0), transport=shared(cost=half)),
                [(0.0, 10.0, 5), (0.0, 10.0, 5)])
    assert (t[0].arrive_s, t[1].arrive_s) == pytest.approx((3.0, 3.0))
    # g = 0.8, three together: each at min(0.8, 1/3)·10 bit/s, 10 bits in 3 s, arrive 4.0;
    # a lone one at 8 bit/s: 10 bits in 1.25 s, arrive 2.25
    most = CollectiveCost(latency_multiplier=1.0, goodput=0.8, burst_bits=0.0)
    t = timings(EventClock(ConstantLink(10.0, 1.0), transport=shared(cost=most)),
                [(0.0, 10.0, 5)] * 3)
    assert [t[k].arrive_s for k in range(3)] == pytest.approx([4.0] * 3)
    alone = timings(EventClock(ConstantLink(10.0, 1.0), transport=shared(cost=most)),
                    [(0.0, 10.0, 5)])
    assert alone[0].arrive_s == pytest.approx(2.25)


def test_shares_fill_the_link_under_unequal_caps():
    """Max-min fairness with caps: an all-gather (g = 0.2) beside an all-reduce (g = 1)
    gets 0.2 of the link and the all-reduce the other 0.8. a = 10 bit/s, b = 1 s, both
    issued at 0 and sending from 0.5: the all-reduce's 8 bits at 8 bit/s end at 1.5
    (arrive 2.0); the all-gather then sends alone at 2 bit/s, its 4 bits at 2 bit/s end at
    2.5 (2 bits by 1.5, 2 more by 2.5), arrive 3.0."""
    from decobench.clock.link_sharing import SharedLink
    from decobench.clock.timing import IterationTiming

    link = SharedLink(ConstantLink(10.0, 1.0))
    for k, (bits, g) in enumerate(((4.0, 0.2), (8.0, 1.0))):
        timing = IterationTiming(iteration=k, start_s=0.0, end_s=0.0, tx_start_s=math.nan,
                                 tx_end_s=math.nan, arrive_s=math.nan, compute_s=0.0,
                                 bubble_s=0.0, bits=bits, staleness=5, link_bits=bits,
                                 latency_factor=1.0)
        link.issue(timing, bits, steps=1, latency_factor=1.0, goodput=g)
    assert link.arrival(1) == pytest.approx(2.0)
    assert link.arrival(0) == pytest.approx(3.0)
    with pytest.raises(DecobenchError, match="goodput must be > 0"):
        link.issue(timing, 1.0, steps=1, latency_factor=1.0, goodput=0.0)


def test_one_lane_is_one_collective_at_a_time():
    # lanes = 1: message 1 starts when 0 is delivered (2.0) and arrives at 4.0
    clock = EventClock(ConstantLink(10.0, 1.0), transport=shared(lanes=1))
    t = timings(clock, [(0.0, 10.0, 5), (0.0, 10.0, 5)])
    assert (t[0].arrive_s, t[1].arrive_s) == pytest.approx((2.0, 4.0))
    assert (t[1].tx_start_s, t[1].tx_end_s) == pytest.approx((2.0, 3.0))
    # two lanes: messages 0 and 1 together (3.0), message 2 waits for 0's lane
    clock = EventClock(ConstantLink(10.0, 1.0), transport=shared(lanes=2))
    t = timings(clock, [(0.0, 10.0, 5)] * 3)
    assert (t[0].arrive_s, t[1].arrive_s) == pytest.approx((3.0, 3.0))
    assert t[2].arrive_s == pytest.approx(5.0)


def test_ring_steps_each_pay_the_round_trip_and_share_across_a_bandwidth_change():
    # ring all-reduce of 2 workers: h = 1, l = 2 -> 2 steps of W/2 bits, each with
    # m·l/(2·2)·b = b/2 before and after (m = 1). a = 10 bit/s until t = 1, then 20.
    # Alone, 20 bits: 0-0.5 wait, 0.5-1.5 send 10 bits (5 at 10, then 5 at 20 -> 1.25),
    # so: 0.5-1.0 sends 5 bits, 1.0-1.25 sends 5 -> step 1 ends 1.25, waits to 1.75,
    # waits to 2.25, sends 10 bits at 20 -> 2.75, waits to 3.25
    trace = Trace(times_s=(0.0, 1.0), bandwidth_bps=(10.0, 20.0), latency_s=(1.0, 1.0))
    clock = EventClock(trace, topology="ring", workers=2, transport=shared())
    t = timings(clock, [(0.0, 20.0, 5)], dense=True)
    assert t[0].arrive_s == pytest.approx(3.25)
    assert t[0].latency_factor == 2.0 and t[0].link_bits == 20.0
    # two of them together: every send at half the rate
    # 0.5-1.0: 2.5 bits each; 1.0-1.75: 7.5 more each (10 bit/s each) -> step 1 ends 1.75;
    # waits to 2.75; 10 bits each at 10 bit/s -> 3.75; wait -> 4.25
    clock = EventClock(trace, topology="ring", workers=2, transport=shared())
    t = timings(clock, [(0.0, 20.0, 5), (0.0, 20.0, 5)], dense=True)
    assert (t[0].arrive_s, t[1].arrive_s) == pytest.approx((4.25, 4.25))


def test_due_messages_hold_compute_back_with_their_shared_arrival():
    # τ = 1, T = 0: iteration 2 waits for message 0, which arrives at 3.0 (shared with 1)
    clock = EventClock(ConstantLink(10.0, 1.0), transport=shared())
    clock.step(0.0, 10.0, 1, False)
    clock.step(0.0, 10.0, 1, False)
    third = clock.step(0.0, 10.0, 1, False)
    assert third.start_s == pytest.approx(3.0) and third.bubble_s == pytest.approx(3.0)
    assert math.isnan(third.arrive_s)                          # not known when stepped


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.floats(0.0, 0.3), st.floats(0.0, 5e6)), min_size=1,
                      max_size=12),
       topology=st.sampled_from(["paper", "ring"]), workers=st.integers(1, 4),
       dense=st.booleans(), m=st.floats(0.5, 3.0), burst=st.floats(0.0, 1e5))
def test_without_overlap_shared_and_fifo_time_every_iteration_alike(steps, topology, workers,
                                                                     dense, m, burst):
    """τ = 0: each message is delivered before the next is sent, so nothing shares the
    link and the two sharings give the same schedule (the paper's D-SGD is unchanged)."""
    cost = CollectiveCost(latency_multiplier=m, goodput=0.9, burst_bits=burst)
    link = ConstantLink(20e6, 0.1)
    clocks = [EventClock(link, topology, workers, shared(cost=cost).with_link_sharing(s))
              for s in ("fifo", "shared")]
    runs = [timings(c, [(t, w, 0) for t, w in steps], dense) for c in clocks]
    assert runs[0].keys() == runs[1].keys() == set(range(len(steps)))
    for k in runs[0]:
        a, b = runs[0][k], runs[1][k]
        assert b.start_s == pytest.approx(a.start_s, rel=1e-9, abs=1e-12)
        assert b.arrive_s == pytest.approx(a.arrive_s, rel=1e-9, abs=1e-12)
        assert b.tx_end_s == pytest.approx(a.tx_end_s, rel=1e-9, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.tuples(st.floats(0.0, 0.2), st.floats(0.0, 4e6), st.integers(0, 4)),
                      min_size=1, max_size=15),
       lanes=st.sampled_from([None, 1, 2, 8]))
def test_shared_link_conserves_work_and_delivers_everything_in_time(steps, lanes):
    """Every message is delivered once, no earlier than it could be alone on the link, and
    the last delivery is no earlier than all the bits at the full rate after the first send."""
    link = ConstantLink(10e6, 0.05)
    clock = EventClock(link, transport=shared(lanes=lanes))
    for compute, bits, tau in steps:
        clock.step(compute, bits, tau, False)
    final = deliver_all(clock)
    assert final.keys() == set(range(len(steps)))
    for t in final.values():
        alone = t.end_s + 0.05 + t.bits / 10e6
        assert t.arrive_s >= alone - 1e-9
        assert t.tx_start_s <= t.tx_end_s <= t.arrive_s
    last = max(t.arrive_s for t in final.values())
    first = min(t.end_s for t in final.values())
    assert last >= first + 0.05 + sum(t.bits for t in final.values()) / 10e6 - 1e-9


def test_a_shared_model_needs_a_link_that_can_integrate_its_rate():
    class RateOnly:                   # the time model's Link: enough for fifo, not for shared
        def transmission_end(self, start_s, bits):
            return start_s + bits / 10.0

        def latency_at(self, t):
            return 1.0

    EventClock(RateOnly(), transport=shared().with_link_sharing("fifo"))
    with pytest.raises(DecobenchError, match="needs a link with capacity_bits.*RateOnly"):
        EventClock(RateOnly(), transport=shared())


def test_model_files_carry_the_sharing_and_older_files_are_fifo(tmp_path):
    model = shared(lanes=8)
    assert not model.ideal and shared().with_link_sharing("fifo").ideal
    (tmp_path / "m.json").write_text(json.dumps(model.to_dict()))
    assert load_transport_model(tmp_path / "m.json") == model
    old = {k: v for k, v in model.to_dict().items() if k not in ("link_sharing", "lanes")}
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert load_transport_model(tmp_path / "old.json").link_sharing == "fifo"
    with pytest.raises(DecobenchError, match="link_sharing must be one of fifo, shared"):
        TransportModel("x", PLAIN, PLAIN, link_sharing="fair")
    with pytest.raises(DecobenchError, match="lanes must be an integer >= 1"):
        shared(lanes=0)


def test_a_simulated_dga_run_under_a_shared_model(tmp_path, fmnist_root):
    """DGA's delayed all-reduces overlap; under the shared link its run completes, every
    message's observation is delivered, and its iterations are slower than under FIFO."""
    import yaml

    from decobench.cli.main import main
    from decobench.runs.rundir import read_metrics

    cost = CollectiveCost(latency_multiplier=2.0, goodput=1.0, burst_bits=0.0)
    for sharing in ("fifo", "shared"):
        (tmp_path / f"{sharing}.json").write_text(json.dumps(
            shared(lanes=8, cost=cost).with_link_sharing(sharing, 8 if sharing == "shared"
                                                         else None).to_dict()))
        assert main(["run", "--task", "cnn-fmnist", "--profile", "cpu", "--workers", "2",
                     "--method", "dga", "--trace", "constant-20mbps-100ms", "--topology",
                     "ring", "--max-iters", "12", "--eval-every", "12", "--data-root",
                     str(fmnist_root), "--transport-model", str(tmp_path / f"{sharing}.json"),
                     "--no-progress", "--no-wandb", "--out", str(tmp_path / sharing)]) == 0
    rows = {s: read_metrics(tmp_path / s) for s in ("fifo", "shared")}
    assert all(math.isfinite(r["sim_time_s"]) for r in rows["shared"])
    assert rows["shared"][-1]["sim_time_s"] > rows["fifo"][-1]["sim_time_s"]
    assert any(r["tau"] >= 1 for r in rows["shared"])               # messages did overlap
    config = yaml.safe_load((tmp_path / "shared" / "config.yaml").read_text())
    assert config["transport"]["link_sharing"] == "shared" and config["transport"]["lanes"] == 8


@pytest.mark.parametrize("comm_layer", [False, True])
def test_calibration_writes_the_sharing_of_the_transport_it_timed(monkeypatch, comm_layer):
    """Kernel latency: lanes of their own (``shared``, the run's lanes); comm-layer latency:
    one collective at a time that holds no latency (``fifo``). The costs are fitted as
    before (timings from a known model: m = 2, g = 1, no burst)."""
    from decobench.clock.topology import topology_factors
    from decobench.emulated import calibrate as calibration

    rate, b, workers = 20e6, 0.1, 2

    def timed(kind, elements, workers_, group, device, timeout_s):
        factors = topology_factors("ring", workers_, dense=kind == "all_reduce")
        fixed = 2.0 * factors.l * b - (factors.l * b if comm_layer else 0.0)
        bits = 0.0 if elements <= 1 else factors.h * 32 * elements
        return fixed + bits / rate

    monkeypatch.setattr(calibration, "_time_once", timed)
    model, timings = calibration.calibrate(workers, "ring", rate, b, comm_layer, None,
                                           torch.device("cpu"), 10.0, lanes=8)
    assert model.all_reduce.latency_multiplier == pytest.approx(2.0, rel=1e-6)
    assert model.all_gather.goodput == pytest.approx(1.0, rel=1e-6)
    if comm_layer:
        assert (model.link_sharing, model.lanes) == ("fifo", None)
    else:
        assert (model.link_sharing, model.lanes) == ("shared", 8)


def test_calibration_starts_each_timed_collective_after_a_barrier(monkeypatch):
    """Both ranks start a timed collective together (back to back, a lone all-gather took
    1.5x its link time on the emulated links): the barrier comes before the clock starts."""
    from types import SimpleNamespace

    from decobench.emulated import calibrate as calibration

    events = []

    class Work:
        def wait(self, timeout):
            events.append("wait")

    def collective(*args, group=None, async_op=False, **kwargs):
        events.append(("collective", group))
        return Work()

    fake = SimpleNamespace(barrier=lambda group=None: events.append(("barrier", group)),
                           all_gather=collective, all_reduce=collective)
    clock = iter([1.0, 1.5])
    monkeypatch.setattr(calibration, "dist", fake)
    monkeypatch.setattr(calibration.time, "monotonic",
                        lambda: events.append("clock") or next(clock))
    for kind in ("all_gather", "all_reduce"):
        events.clear()
        clock = iter([1.0, 1.5])
        assert calibration._time_once(kind, 8, 2, "lane0", torch.device("cpu"), 5.0) == 0.5
        assert events == [("barrier", "lane0"), "clock", ("collective", "lane0"), "wait",
                          "clock"]


def _latest_rank_on(rank: int, store: str, seconds: list[float], out) -> None:
    import torch.distributed as dist

    from decobench.emulated.calibrate import Timing, _latest_rank

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        timings = [Timing("all_gather", float(i), s) for i, s in enumerate(seconds)]
        out.put((rank, [t.seconds for t in _latest_rank(timings, None)]))
    finally:
        dist.destroy_process_group()


def test_calibration_keeps_the_last_ranks_timing(tmp_path):
    """Each timing is the least over the ranks (the rank that joined last waited for no
    one): rank 0 timed (0.25, 0.5, 1.0), rank 1 (0.30, 0.45, 1.2) -> (0.25, 0.45, 1.0) on
    both, over a real 2-rank gloo group. Without a process group the timings stay."""
    import multiprocessing

    from decobench.emulated.calibrate import Timing, _latest_rank

    timings = [Timing("all_gather", 0.0, 0.25), Timing("all_gather", 8.0, 0.5)]
    assert _latest_rank(timings, None) == timings
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    store = str(tmp_path / "store")
    ranks = [ctx.Process(target=_latest_rank_on, args=(r, store, s, out))
             for r, s in enumerate(([0.25, 0.5, 1.0], [0.30, 0.45, 1.2]))]
    for p in ranks:
        p.start()
    got = dict(out.get(timeout=60) for _ in ranks)
    for p in ranks:
        p.join(timeout=60)
    assert got == {0: [0.25, 0.45, 1.0], 1: [0.25, 0.45, 1.0]}
