"""The communication layer's pure parts: dense header slots survive a summing all-reduce,
the gathered sparse messages aggregate exactly as Compressed.mean() does on the simulated
backend, lost ranks are named from the transport's message, and the consensus observation."""

import json
import math

import pytest
import torch

from decobench.compression import codec
from decobench.compression.compressors import TopKCompressor
from decobench.emulated.comm import (
    _dense_header_slots,
    _dense_headers,
    encode_message,
    from_words,
    lost_ranks_in,
    mean_update,
)
from decobench.emulated.transport import SentRecord, consensus_observation


def test_dense_header_slots_come_back_exactly_after_a_sum():
    n = 3
    headers = [{"iteration": 7.0, "flags": float(r), "obs_tx_start_s": 1234.567891234 + r,
                "obs_compute_s": 0.0123456789} for r in range(n)]
    total = sum(_dense_header_slots(h, r, n) for r, h in enumerate(headers))
    back = _dense_headers(total, n)
    for r in range(n):
        assert back[r]["iteration"] == 7.0 and back[r]["flags"] == float(r)
        assert abs(back[r]["obs_tx_start_s"] - (1234.567891234 + r)) < 1e-9
        assert abs(back[r]["obs_compute_s"] - 0.0123456789) < 1e-12
        assert math.isnan(back[r]["obs_arrive_s"])          # missing fields stay NaN


def test_gathered_sparse_messages_average_like_the_simulated_backend():
    torch.manual_seed(0)
    n, d, delta = 3, 1000, 0.02
    p = torch.randn(n, d)
    together = TopKCompressor().compress(p, delta)          # what the simulation sends
    expected = torch.zeros(d)
    together.mean().add_to(expected)
    decoded = []
    for r in range(n):
        row = TopKCompressor().compress(p[r: r + 1], delta)
        out = encode_message(row, {"iteration": 0.0}, rank=r, workers=n)
        exact = codec.HEADER_BYTES + codec.payload_bytes(row.values.numel(), d)
        assert exact <= 4 * out.buffer.numel() < exact + 4       # fp32 words, ≤ 3 bytes pad
        header, payload = codec.unframe(from_words(out.buffer))
        k = int(header["k"])
        decoded.append(codec.decode_sparse(payload[: codec.payload_bytes(k, d)], k, d))
    got = torch.zeros(d)
    mean_update(decoded, d, torch.device("cpu")).add_to(got)
    assert torch.equal(got, expected)


def test_dense_message_carries_the_vector_and_this_ranks_slot_only():
    g = torch.arange(6, dtype=torch.float32).reshape(1, 6)
    from decobench.compression.compressors import DenseCompressor

    out = encode_message(DenseCompressor().compress(g), {"iteration": 4.0}, rank=1, workers=2)
    assert out.dense and torch.equal(out.buffer[:6], g[0])
    slots = out.buffer[6:].reshape(2, 2, len(codec.HEADER_FIELDS))
    assert torch.all(slots[0] == 0) and slots[1, 0, 0] == 4.0


def test_lost_rank_is_named_from_the_address_in_the_error():
    addresses = ["10.77.3.1", "10.77.3.2", "10.77.3.3"]
    message = ("[gloo/transport/tcp/pair.cc:534] Read error [10.77.3.3]:41234: "
               "Connection reset by peer")
    assert lost_ranks_in(message, addresses, own_rank=0) == (2,)
    assert lost_ranks_in("Connection closed by peer", addresses, own_rank=0) == ()


def test_consensus_observation_is_the_slowest_rank_and_same_everywhere():
    sent = {4: SentRecord(staleness=1, dense=False, bits=1000)}
    headers = [
        {"obs_iteration": 4.0, "obs_compute_s": 0.02, "obs_tx_start_s": 1.0,
         "obs_tx_end_s": 1.5, "obs_arrive_s": 1.6},
        {"obs_iteration": 4.0, "obs_compute_s": 0.03, "obs_tx_start_s": 1.1,
         "obs_tx_end_s": 1.4, "obs_arrive_s": 1.7},
    ]
    obs = consensus_observation(headers, sent, workers=2, topology="ring")
    assert obs is not None
    assert (obs.iteration, obs.compute_s, obs.tx_start_s, obs.tx_end_s, obs.arrive_s) == (
        4, 0.03, 1.1, 1.5, 1.7)
    assert obs.link_bits == 1000 and obs.latency_factor == 1.0      # ring, n = 2: h = l = 1
    # ranks disagreeing on what they report, or nothing reported: no observation
    assert consensus_observation([headers[0], {**headers[1], "obs_iteration": 3.0}], sent,
                                  2, "ring") is None
    assert consensus_observation([{"obs_iteration": math.nan}] * 2, sent, 2, "ring") is None
    # on links decobench's shaper shapes, the token bucket at tx_start, at most the message
    assert obs.burst_bits == 0.0
    at = []
    shaped = consensus_observation(headers, sent, 2, "ring",
                                   burst_bits_at=lambda t: at.append(t) or 300.0)
    assert shaped.burst_bits == 300.0 and at == [1.1]
    assert consensus_observation(headers, sent, 2, "ring", lambda t: 5000.0).burst_bits == 1000


def test_a_message_the_codec_would_resize_is_an_error():
    """A method charging bits the codec does not send (e.g. Rand-k's 32k) fails loudly."""
    import torch

    from decobench.clock.wire import topk_wire_bits
    from decobench.compression.compressors import Compressed
    from decobench.emulated.comm import encode_message
    from decobench.errors import DecobenchError

    values, indices = torch.ones(1, 5), torch.arange(5).reshape(1, 5)
    honest = Compressed(values=values, indices=indices, d=1000,
                        bits_per_worker=topk_wire_bits(5, 1000), delta=0.005)
    assert encode_message(honest, {"iteration": 0.0, "flags": 0.0}, 0, 2).k == 5
    randk = Compressed(values=values, indices=indices, d=1000, bits_per_worker=32 * 5,
                       delta=0.005)
    with pytest.raises(DecobenchError, match="messages are 160 bits but the wire codec"):
        encode_message(randk, {"iteration": 0.0, "flags": 0.0}, 0, 2)


def test_fidelity_replays_the_emulated_schedule_through_the_run():
    from decobench.emulated.fidelity import replayed
    from decobench.methods.controllers import Schedule
    from decobench.runs.config import RunConfig
    from decobench.runs.runner import prepare

    rows = [{"iteration": 2, "delta": 0.2, "tau": 1}, {"iteration": 1, "delta": 0.01, "tau": 0},
            {"iteration": 2, "metric": 0.5}]
    run = prepare(RunConfig(task="cnn-fmnist", method="deco-sgd",
                            trace="constant-20mbps-100ms"))
    assert replayed(run, rows).replay == (Schedule(0.01, 0), Schedule(0.2, 1))
    for method in ("d-sgd", "accordion"):         # decisions that never read the network
        plain = prepare(RunConfig(task="cnn-fmnist", method=method,
                                  trace="constant-20mbps-100ms"))
        assert replayed(plain, rows) is plain


def test_fidelity_simulates_the_schedule_with_rank_0s_times_and_plans_from_the_ranks_samples(
        tmp_path):
    from decobench.clock.transport_model import TransportModel
    from decobench.emulated.fidelity import simulated_runs
    from decobench.methods.controllers import Schedule

    model = tmp_path / "transport_model.json"
    cost = {"latency_multiplier": 2.0, "goodput": 1.0, "burst_bits": 0.0}
    model.write_text(json.dumps(TransportModel.from_dict(
        {"name": "fitted", "all_gather": cost, "all_reduce": cost}).to_dict()))
    rows = [{"iteration": 1, "sim_time_s": 0.2, "wait_s": 0.0, "delta": 0.01, "tau": 0},
            {"iteration": 2, "sim_time_s": 1.0, "wait_s": 0.5, "delta": 0.01, "tau": 0},
            {"iteration": 3, "sim_time_s": 1.6, "wait_s": 0.0, "delta": 0.2, "tau": 1,
             "reported_work_s": 0.9, "reported_work_iteration": 2}]
    config = {"task": "cnn-fmnist", "method": "deco-sgd", "trace": "constant-20mbps-100ms",
              "backend": "simulated", "compute_time_s": 0.3, "max_iters": 3}
    runs = simulated_runs(config, rows, str(model), tmp_path, "deco-sgd")
    assert sorted(runs) == ["simulated", "simulated-ideal", "simulated-own-plan"]
    schedule = (Schedule(0.01, 0), Schedule(0.01, 0), Schedule(0.2, 1))
    for name in ("simulated", "simulated-ideal"):      # the time-model check
        assert runs[name].replay == schedule and runs[name].report == "arrival"
        assert runs[name].compute_times == pytest.approx((0.2, 0.8, 0.1))  # t_r − t_{r−1} − wait_{r−1}
    own = runs["simulated-own-plan"]                   # the first-plan check
    assert own.replay is None and own.report == "next-message"
    assert own.compute_times == pytest.approx((0.2, 0.9, 0.1))   # iteration 2: the ranks' 0.9
    assert runs["simulated"].transport.name == own.transport.name == "fitted"
    assert runs["simulated-ideal"].transport.ideal
    assert own.out == tmp_path / "simulated-own-plan" / "deco-sgd"


@pytest.mark.parametrize("dense", [False, True], ids=["all-gather", "all-reduce"])
def test_every_ranks_control_bytes_come_back_beside_the_message(dense):
    """Control bytes (Sent.control) travel outside the payload: the payload stays ⌈W/8⌉
    bytes, and each rank's bytes come back in its own place on every rank."""
    from decobench.compression.compressors import DenseCompressor
    from decobench.emulated.comm import received

    torch.manual_seed(1)
    n, d = 3, 200
    p = torch.randn(n, d)
    controls = [bytes([r, 255 - r]) for r in range(n)]
    outgoing = []
    for r in range(n):
        row = (DenseCompressor().compress(p[r: r + 1]) if dense
               else TopKCompressor().compress(p[r: r + 1], 0.05))
        outgoing.append(encode_message(row, {"iteration": 2.0}, rank=r, workers=n,
                                       control=controls[r]))
    if not dense:
        exact = codec.HEADER_BYTES + 2 + codec.payload_bytes(10, d)
        assert exact <= 4 * outgoing[0].buffer.numel() < exact + 4
    gathered = (sum(o.buffer for o in outgoing) if dense
                else [o.buffer.clone() for o in outgoing])
    headers, got, update = received(outgoing[0], gathered, d, n, torch.device("cpu"))
    assert got == controls
    assert [h["control_bytes"] for h in headers] == [2.0] * n
    expected = torch.zeros(d)
    together = (DenseCompressor().compress(p) if dense
                else TopKCompressor().compress(p, 0.05))
    together.mean().add_to(expected)
    total = torch.zeros(d)
    update.add_to(total)
    assert torch.allclose(total, expected, rtol=0, atol=1e-6)
