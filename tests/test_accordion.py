"""Accordion (docs/design.md §8.2): hand-checked per-layer Top-k steps with error
feedback, the critical-regime detector, and the equivalence with D-SGD at δ = 1."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError
from torch import nn

from decobench.baselines.accordion import (
    ACCORDION_SPEC,
    detection_interval,
    learning_rate_decayed,
    model_layers,
    norm_change_ratio,
)
from decobench.baselines.dsgd import DSGD_SPEC
from decobench.methods import MethodContext
from decobench.methods.optimizer import OptimizerConfig
from decobench.training.flat import FlatLayout
from decobench.training.gradients import WorkerGradients

QUADRATIC_SHAPES = (("w", (2, 2)), ("b", (2,)))


def _accordion(context, **options):
    return ACCORDION_SPEC.build(context, ACCORDION_SPEC.options(**options))


def _context(d, workers, shapes, optimizer=None, **extra):
    return MethodContext(d=d, workers=workers, topology="paper",
                         optimizer=optimizer or OptimizerConfig(lr=0.5), param_shapes=shapes,
                         **extra)


def test_hand_checked_layerwise_topk_steps_with_error_feedback():
    """2 workers, f_i(x) = ½‖x − c_i‖² (g_i = x − c_i); w is 2x2 (Top-2 of 4), b goes dense."""
    method = _accordion(_context(6, 2, QUADRATIC_SHAPES), accordion_delta_crit=0.5)
    x = torch.zeros(6)
    c = torch.tensor([[1.0, 2, 3, 4, 5, 6], [4.0, 0, -1, 0.5, -1, 2]])
    r0 = method.step(0, x, x - c)
    # g0 = [-1,-2,-3,-4 | -5,-6] keeps w[2], w[3]; g1 = [-4,0,1,-0.5 | 1,-2] keeps w[0], w[2]
    # u = [-2, 0, -1, -2 | -2, -4]; x1 = -0.5 u
    assert x.tolist() == [1.0, 0.0, 0.5, 1.0, 1.0, 2.0]
    assert method.error_feedback.memory.tolist() == [[-1.0, -2, 0, 0, 0, 0],
                                                      [0.0, 0, 0, -0.5, 0, 0]]
    # W(2, 4) = min(2 (32 + 2), 32·2 + 4, 32·4) = 68, plus 32 bits for each of the 2 biases
    assert r0.bits_per_worker == 132
    assert r0.delta == pytest.approx(4 / 6)
    assert not r0.dense and r0.staleness == 0 and r0.applied_messages == 1
    # Second step (window 1 is not checked: still critical); the residual comes back.
    # p0 = [-1,-4,-2.5,-3 | -4,-4] keeps w[1], w[3]; p1 = [-3,0,1.5,0 | 2,0] keeps w[0], w[2]
    method.step(1, x, x - c)
    assert x.tolist() == [1.75, 1.0, 0.125, 1.75, 1.5, 3.0]
    assert method.error_feedback.memory.tolist() == [[-1.0, 0, -2.5, 0, 0, 0],
                                                      [0.0, 0, 0, 0, 0, 0]]


DETECTOR_SHAPES = (("w", (2, 2)), ("v", (1, 2)), ("b", (2,)))


def _layer_gradients(w, v, worker1_scale=100.0):
    """Worker 0 gets [w | v | 0]; worker 1 something large the detector must ignore."""
    row = torch.tensor([*w, *v, 0.0, 0.0])
    return torch.stack([row, worker1_scale * torch.ones(8)])


def test_detector_switches_each_layer_on_its_windowed_norm_change():
    method = _accordion(_context(8, 2, DETECTOR_SHAPES), accordion_delta_crit=1.0,
                        accordion_delta_noncrit=0.25, accordion_window_iters=2,
                        accordion_interval=1)
    x = torch.zeros(8)
    stream = [([1, 0, 0, 0], [0, 1])] * 2 + [([1, 0, 0, 0], [0, 3])] * 2 \
        + [([1.5, 0, 0, 0], [0, 3])] * 2 + [([1.5, 0, 0, 0], [0, 3])] * 2
    results = [method.step(k, x, _layer_gradients(w, v)) for k, (w, v) in enumerate(stream)]
    counts = [r.log["accordion_critical_layers"] for r in results]
    # window 0 (its 0-1): both critical. Window 1: N_w 2 -> 2 (r = 0), N_v 2 -> 6 (r = 2).
    # Window 2: N_w 2 -> 3 (r = 0.5 >= η: critical), N_v 6 -> 6. Window 3: nothing changes.
    assert counts == [2, 2, 2, 2, 1, 1, 1, 1]
    first = results[1].log["accordion_check"]
    assert first["reason"] == "first_window" and first["window"] == 0
    assert first["layers"]["w"] == {"norm": 2.0, "ratio": None, "critical": True, "delta": 1.0}
    second = results[3].log["accordion_check"]["layers"]
    assert second["w"] == {"norm": 2.0, "ratio": 0.0, "critical": False, "delta": 0.25}
    assert second["v"] == {"norm": 6.0, "ratio": 2.0, "critical": True, "delta": 1.0}
    third = results[5].log["accordion_check"]["layers"]
    assert (third["w"]["ratio"], third["w"]["critical"]) == (0.5, True)
    assert (third["v"]["ratio"], third["v"]["critical"]) == (0.0, False)
    assert [r.log["accordion_check"]["layers"]["w"]["critical"] for r in results[7:]] == [False]
    # Iteration 4: w Top-1 of 4 (min(1·(32 + 2), 32 + 4, 128) = 34), v whole (64), b dense (64).
    assert results[4].bits_per_worker == 34 + 64 + 64 and results[4].delta == 5 / 8
    # Iteration 6: w whole (128), v Top-1 of 2 (min(1·(32 + 1), 32 + 2, 64) = 33), b 64.
    assert results[6].bits_per_worker == 128 + 33 + 64 and results[6].delta == 7 / 8
    assert "accordion_check" not in results[2].log
    # Iterations 0-3: everything whole -> one dense all-reduce.
    assert results[0].dense and results[0].bits_per_worker == 32 * 8 and results[0].delta == 1.0


def test_detector_stays_non_critical_while_the_norm_is_steady():
    method = _accordion(_context(8, 2, DETECTOR_SHAPES), accordion_delta_crit=0.5,
                        accordion_delta_noncrit=0.25, accordion_window_iters=3,
                        accordion_interval=1)
    x = torch.zeros(8)
    counts = []
    for k in range(12):
        grad = _layer_gradients([1.0, -2.0, 0.5, 0.25], [1.0 + 0.1 * (k % 3), 2.0])
        counts.append(method.step(k, x, grad).log["accordion_critical_layers"])
    assert counts == [2] * 6 + [0] * 6


def test_learning_rate_decay_forces_critical_until_the_next_check():
    # Cosine decay to 0 over 5 iterations: γ_t < γ_{t-1} for t = 1..5, constant (0) after.
    cosine = OptimizerConfig(lr=0.5, schedule="warmup-cosine", warmup_iters=0, total_iters=5)
    method = _accordion(_context(8, 2, DETECTOR_SHAPES, optimizer=cosine),
                        accordion_delta_crit=0.5, accordion_delta_noncrit=0.25,
                        accordion_window_iters=2, accordion_interval=1)
    x = torch.zeros(8)
    results = [method.step(k, x, _layer_gradients([1, 0, 0, 0], [0, 1])) for k in range(8)]
    counts = [r.log["accordion_critical_layers"] for r in results]
    # The check at the end of iteration 3 decides "steady" (r = 0), but the decay at 4 forces
    # critical again until the check at the end of 5; from 6 on no decay, non-critical.
    assert counts == [2, 2, 2, 2, 2, 2, 0, 0]
    assert results[3].log["accordion_check"]["layers"]["w"]["critical"] is False
    assert results[3].log["accordion_check"]["lr_decay"] is True
    forced = results[4].log["accordion_check"]
    assert forced["reason"] == "lr_decay" and forced["layers"]["v"]["critical"] is True
    assert "accordion_check" not in results[2].log         # already critical: nothing forced


def test_warm_up_increase_is_not_a_decay():
    warmup = OptimizerConfig(lr=0.5, schedule="warmup", warmup_iters=3)
    assert not any(learning_rate_decayed(warmup, t) for t in range(10))
    cosine = OptimizerConfig(lr=0.5, schedule="warmup-cosine", warmup_iters=3, total_iters=10)
    assert [learning_rate_decayed(cosine, t) for t in range(6)] == [False] * 4 + [True] * 2


def test_interval_shrinks_so_the_budget_holds_ten_checks():
    assert detection_interval(10, 5, None) == 10
    assert detection_interval(10, 5, 1000) == 10           # 200 windows: 20 checks at I = 10
    assert detection_interval(10, 5, 200) == 4             # 40 windows
    assert detection_interval(10, 5, 30) == 1              # 6 windows: as often as possible
    method = _accordion(_context(6, 2, QUADRATIC_SHAPES, iterations_per_epoch=2, max_iters=40))
    log = method.step(0, torch.zeros(6), torch.ones(2, 6)).log
    assert log["accordion_window_iters"] == 2 and log["accordion_interval_windows"] == 2
    assert "accordion_window_iters" not in method.step(1, torch.zeros(6), torch.ones(2, 6)).log


def test_norm_change_ratio_and_layers():
    assert norm_change_ratio(None, 3.0) == math.inf
    assert norm_change_ratio(0.0, 3.0) == math.inf
    assert norm_change_ratio(4.0, 3.0) == 0.25
    layers = model_layers((("a", (3, 2)), ("s", ()), ("c", (4,)), ("k", (2, 1, 1))), 13)
    assert [(la.offset, la.size, la.compressed) for la in layers] == [
        (0, 6, True), (6, 1, False), (7, 4, False), (11, 2, True)]
    assert model_layers((), 7)[0].size == 7


def test_options_reject_ratios_outside_zero_one():
    for bad in ({"accordion_delta_crit": 0.0}, {"accordion_delta_noncrit": 1.5},
                {"accordion_interval": 0}, {"accordion_window_iters": 0}):
        with pytest.raises(ValidationError):
            ACCORDION_SPEC.options(**bad)
    assert ACCORDION_SPEC.options(accordion_delta_crit=1.0, accordion_delta_noncrit=1.0)


def _tiny():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))
    layout = FlatLayout.of(model)
    return model, layout, WorkerGradients(model, layout, F.cross_entropy)


def _train(spec, options, iterations=20, workers=3):
    model, layout, grads = _tiny()
    params = layout.flatten(model)
    context = MethodContext(d=layout.d, workers=workers, topology="paper",
                            optimizer=OptimizerConfig(lr=0.1, momentum=0.9),
                            param_shapes=tuple(zip(layout.names, layout.shapes, strict=True)),
                            iterations_per_epoch=3, max_iters=iterations)
    method = spec.build(context, spec.options(**options))
    gen = torch.Generator().manual_seed(1)
    logs = []
    for k in range(iterations):
        x = torch.randn(workers, 6, 5, generator=gen)
        y = torch.randint(0, 3, (workers, 6), generator=gen)
        g, _ = grads(params, x, y)
        logs.append(method.step(k, params, g).log)
    return params, logs


def test_accordion_with_delta_one_is_dsgd():
    dsgd, _ = _train(DSGD_SPEC, {})
    whole, _ = _train(ACCORDION_SPEC, {"accordion_delta_crit": 1.0,
                                       "accordion_delta_noncrit": 1.0})
    assert torch.allclose(dsgd, whole, atol=1e-6)
    compressed, _ = _train(ACCORDION_SPEC, {"accordion_delta_crit": 0.5,
                                            "accordion_delta_noncrit": 0.25})
    assert not torch.allclose(dsgd, compressed, atol=1e-3)


def test_check_log_is_json_and_names_every_compressed_layer():
    _, logs = _train(ACCORDION_SPEC, {"accordion_delta_crit": 0.5, "accordion_delta_noncrit": 0.25,
                                      "accordion_interval": 1})
    checks = [log["accordion_check"] for log in logs if "accordion_check" in log]
    assert len(checks) == 6                                # 20 iterations, windows of 3
    for check in checks:
        assert set(check["layers"]) == {"0.weight", "2.weight"}
        for layer in check["layers"].values():
            assert isinstance(layer["norm"], float) and layer["norm"] > 0
    assert checks[0]["reason"] == "first_window" and checks[1]["reason"] == "ratio"
    json.dumps(logs, allow_nan=False)


def test_regimes_travel_as_a_bitmap():
    from decobench.baselines.accordion import regimes_from_bytes, regimes_to_bytes

    flags = [True, False, False, True, True, False, False, False, True]
    data = regimes_to_bytes(flags)
    assert data == bytes([0b00011001, 0b00000001])               # bit l of byte l // 8
    assert regimes_from_bytes(data, len(flags)) == flags
    with pytest.raises(ValueError, match="cannot hold the regimes of 17 layers"):
        regimes_from_bytes(data, 17)


def test_ranks_adopt_worker_zeros_regimes_from_the_message():
    """Two one-worker processes (first_worker 0 and 1) whose messages go through the emulated
    backend's encoder and decoder end every iteration with the same k_l, regimes and
    parameters as one process holding both workers: only worker 0's process runs the
    detector, and its regimes reach the other process as control bytes."""
    from decobench.emulated.comm import encode_message, received
    from decobench.methods import Due

    shapes = (("a", (20, 10)), ("a.bias", (10,)), ("b", (10, 30)), ("c", (64,)))
    d = sum(math.prod(s) for _, s in shapes)
    options = {"accordion_delta_crit": 0.3, "accordion_delta_noncrit": 0.05,
               "accordion_window_iters": 2, "accordion_interval": 1, "accordion_eta": 0.3}
    full = _accordion(_context(d, 2, shapes, max_iters=16), **options)
    ranks = [_accordion(_context(d, 2, shapes, max_iters=16, gradient_rows=1,
                                 first_worker=r), **options) for r in range(2)]
    x_full = torch.zeros(d)
    x_rank = [torch.zeros(d), torch.zeros(d)]
    generator = torch.Generator().manual_seed(3)
    scale = torch.ones(d)
    seen_regimes = set()
    for t in range(16):
        if t % 4 == 0:                               # layer a's gradient changes size
            scale[:200] = float(torch.rand(1, generator=generator)) * 4 + 0.1
        g = torch.randn(2, d, generator=generator) * scale
        step = full.step(t, x_full, g)
        sent = [ranks[r].send(t, x_rank[r], g[r: r + 1]) for r in range(2)]
        outgoing = [encode_message(s.payload, {"iteration": float(t)}, r, 2, s.control)
                    for r, s in enumerate(sent)]
        assert all(o.buffer.numel() == outgoing[0].buffer.numel() for o in outgoing)
        for r in range(2):
            gathered = ([o.buffer.clone() for o in outgoing] if not outgoing[r].dense
                        else sum(o.buffer for o in outgoing))
            _, controls, update = received(outgoing[r], gathered, d, 2, torch.device("cpu"))
            ranks[r].receive(t, x_rank[r], [Due(t, update, controls[0])])
            assert sent[r].payload.bits_per_worker == step.bits_per_worker
            assert ranks[r].detector.critical == full.detector.critical
            assert torch.equal(x_rank[r], x_full)
        seen_regimes.add(tuple(full.detector.critical))
    assert (True, False) in seen_regimes and (False, False) in seen_regimes, seen_regimes
    assert not any(ranks[1].detector._window_sum)        # rank 1 never ran the detector
