"""DGA (docs/design.md §8.3): the choice of D, hand-checked steps, the workers' agreement on
everything older than D, DGA(D = 0) = D-SGD, and the automatic, once-only choice of D."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError
from torch import nn

from decobench.baselines.dga import DGA_SPEC, dga_delay
from decobench.baselines.dsgd import DSGD_SPEC
from decobench.methods import MethodContext, Observation
from decobench.methods.optimizer import OptimizerConfig
from decobench.training.flat import FlatLayout
from decobench.training.gradients import WorkerGradients

# --- the choice of D ---------------------------------------------------------------------


def test_dga_delay_hand_checked_values():
    # T + lat + c = 1.17 <= 2 · max(0.2, 0.77) = 1.54, but > 0.77: D = 1
    assert dga_delay(0.2, 0.77, 0.2, 20) == 1
    # 0.41 <= 3 · 0.2 = 0.6, but > 2 · 0.2 = 0.4: D = 2
    assert dga_delay(0.2, 0.01, 0.2, 20) == 2
    # compute-bound, no latency: 0.2 <= 1 · 0.2: D = 0
    assert dga_delay(0.2, 0.0, 0.0, 20) == 0


def test_dga_delay_zero_latency_still_overlaps_compute_and_transmission():
    assert dga_delay(0.2, 0.1, 0.0, 20) == 1      # 0.3 > 0.2, 0.3 <= 0.4
    assert dga_delay(0.1, 0.1, 0.0, 20) == 1      # 0.2 <= 2 · 0.1 exactly: boundary counts


def test_dga_delay_cap():
    # 1.011 / 0.01 = 101.1 slots: D = 101 uncapped
    assert dga_delay(0.01, 0.001, 1.0, 200) == 101
    assert dga_delay(0.01, 0.001, 1.0, 20) == 20
    assert dga_delay(0.01, 0.001, 1.0, 0) == 0
    assert dga_delay(0.0, 0.0, 0.0, 20) == 0      # nothing to hide
    assert dga_delay(0.0, 0.0, 0.1, 20) == 20     # latency but no slot to hide it in


def test_dga_delay_is_the_smallest_delay_satisfying_the_inequality():
    values = (0.0, 0.01, 0.1, 0.2, 0.3, 0.77, 1.0, 2.5)
    for t, c, lat in itertools.product(values, repeat=3):
        if max(t, c) == 0:
            continue
        total, slot = t + lat + c, max(t, c)
        brute = next(d for d in range(1000) if total <= (d + 1) * slot)
        assert dga_delay(t, c, lat, 20) == min(brute, 20), (t, c, lat)


def test_dga_delay_rejects_negative_inputs():
    with pytest.raises(ValueError):
        dga_delay(-0.1, 0.1, 0.1, 20)
    with pytest.raises(ValueError):
        dga_delay(0.1, 0.1, float("nan"), 20)
    with pytest.raises(ValueError):
        dga_delay(0.1, 0.1, 0.1, -1)


def test_options_are_validated():
    assert DGA_SPEC.options().dga_delay is None and DGA_SPEC.options().dga_delay_max == 20
    with pytest.raises(ValidationError):
        DGA_SPEC.options(dga_delay=-1)
    with pytest.raises(ValidationError):
        DGA_SPEC.options(delay=2)


# --- hand-checked steps on the quadratic f_i(x) = ½‖x − c_i‖², g_i = x − c_i --------------

C = torch.tensor([[1.0, 2, 3, 4, 5, 6], [-1.0, 0, 1, 0, -1, 2]])


def _quadratic_method(lr=0.5, **options):
    ctx = MethodContext(d=6, workers=2, topology="paper", optimizer=OptimizerConfig(lr=lr))
    return DGA_SPEC.build(ctx, DGA_SPEC.options(**options))


def test_hand_checked_steps_with_delay_one():
    method = _quadratic_method(dga_delay=1)
    x = torch.zeros(6)
    # iteration 0: Δ^j_0 = −0.5 (0 − c_j) = 0.5 c_j, applied locally; nothing due yet
    w = method.worker_params(x)
    r0 = method.step(0, x, w - C)
    assert method.models.tolist() == [[0.5, 1, 1.5, 2, 2.5, 3], [-0.5, 0, 0.5, 0, -0.5, 1]]
    assert x.tolist() == [0.0, 0.5, 1, 1, 1, 2]                   # the average model
    assert (r0.staleness, r0.applied_messages, r0.delta, r0.dense) == (1, 0, 1.0, True)
    assert r0.bits_per_worker == 32 * 6 and r0.log == {"dga_delay": 1}
    # iteration 1: g^0 = −[0.5, 1, 1.5, 2, 2.5, 3], g^1 = [0.5, 0, −0.5, 0, 0.5, −1];
    # Δ^0_1 = [0.25, 0.5, 0.75, 1, 1.25, 1.5], Δ^1_1 = [−0.25, 0, 0.25, 0, −0.25, 0.5];
    # then Δ^j_0 is swapped for mean_i Δ^i_0 = [0, 0.5, 1, 1, 1, 2]
    w = method.worker_params(x)
    r1 = method.step(1, x, w - C)
    assert method.models.tolist() == [[0.25, 1, 1.75, 2, 2.25, 3.5],
                                      [-0.25, 0.5, 1.25, 1, 0.75, 2.5]]
    assert x.tolist() == [0.0, 0.75, 1.5, 1.5, 1.5, 3.0]
    assert (r1.staleness, r1.applied_messages, r1.log) == (1, 1, {})


def test_delay_zero_is_one_averaged_step():
    method = _quadratic_method(dga_delay=0)
    x = torch.zeros(6)
    r = method.step(0, x, method.worker_params(x) - C)
    assert method.models.tolist() == [[0.0, 0.5, 1, 1, 1, 2]] * 2
    assert x.tolist() == [0.0, 0.5, 1, 1, 1, 2] and r.applied_messages == 1


def test_evaluation_params_is_the_mean_of_the_worker_models():
    method = _quadratic_method(dga_delay=2)
    x = torch.zeros(6)
    assert method.evaluation_params(x) is x                     # before any step
    for k in range(4):
        method.step(k, x, method.worker_params(x) - C * (k + 1))
    models = method.models
    assert not torch.allclose(models[0], models[1])
    assert torch.allclose(method.evaluation_params(x), models.mean(dim=0))
    assert torch.equal(x, method.evaluation_params(x))


# --- the workers agree on everything older than D ------------------------------------------


@pytest.mark.parametrize("momentum, weight_decay", [(0.0, 0.0), (0.9, 0.01)])
def test_worker_models_differ_only_by_their_last_d_local_updates(momentum, weight_decay):
    n, d, delay, lr = 3, 7, 3, 0.1
    config = OptimizerConfig(lr=lr, momentum=momentum, weight_decay=weight_decay)
    method = DGA_SPEC.build(MethodContext(d=d, workers=n, topology="paper", optimizer=config),
                            DGA_SPEC.options(dga_delay=delay))
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(d, generator=gen, dtype=torch.float64)
    x = x0.clone()
    velocity = torch.zeros(n, d, dtype=torch.float64)
    local: list[torch.Tensor] = []                 # Δ_s, [n, d], from an independent recurrence
    for t in range(12):
        w = method.worker_params(x)
        g = torch.randn(n, d, generator=gen, dtype=torch.float64)
        velocity = momentum * velocity + g + weight_decay * w
        local.append(-lr * velocity)
        method.step(t, x, g)
        models = method.models
        recent = sum(local[max(0, t + 1 - delay):], torch.zeros(n, d, dtype=torch.float64))
        older = sum((u.mean(dim=0) for u in local[:max(0, t + 1 - delay)]),
                    torch.zeros(d, dtype=torch.float64))
        shared = models - recent                   # w^j_{t+1} − Σ_{s = t+1−D}^{t} Δ^j_s
        for j in range(n):
            assert torch.allclose(shared[j], x0 + older, atol=1e-12), (t, j)
        assert not torch.allclose(models[0], models[1])


# --- DGA(D = 0) = D-SGD on a tiny model ---------------------------------------------------


def _tiny():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))
    layout = FlatLayout.of(model)
    return model, layout, WorkerGradients(model, layout, F.cross_entropy)


def _train(spec, options, optimizer, iterations=20, workers=3):
    model, layout, grads = _tiny()
    params = layout.flatten(model)
    context = MethodContext(d=layout.d, workers=workers, topology="paper", optimizer=optimizer)
    method = spec.build(context, spec.options(**options))
    gen = torch.Generator().manual_seed(1)
    for k in range(iterations):
        x = torch.randn(workers, 6, 5, generator=gen)
        y = torch.randint(0, 3, (workers, 6), generator=gen)
        g, _ = grads(method.worker_params(params), x, y)
        method.step(k, params, g)
    return method.evaluation_params(params)


@pytest.mark.parametrize("optimizer", [
    OptimizerConfig(lr=0.1),
    OptimizerConfig(lr=0.1, momentum=0.9, weight_decay=0.01, schedule="warmup-cosine",
                    warmup_iters=3, total_iters=20),
])
def test_delay_zero_equals_dsgd(optimizer):
    dsgd = _train(DSGD_SPEC, {}, optimizer)
    assert torch.allclose(_train(DGA_SPEC, {"dga_delay": 0}, optimizer), dsgd, atol=1e-6)
    assert not torch.allclose(_train(DGA_SPEC, {"dga_delay": 2}, optimizer), dsgd, atol=1e-4)


# --- automatic D ---------------------------------------------------------------------------


def _probe(iteration, compute_s, transmit_s, latency_s, start_s=0.2):
    tx_end = start_s + transmit_s
    return Observation(iteration=iteration, compute_s=compute_s, link_bits=32 * 6,
                       tx_start_s=start_s, tx_end_s=tx_end, arrive_s=tx_end + latency_s,
                       latency_factor=1.0)


def test_automatic_delay_is_chosen_once_from_the_first_observation():
    method = _quadratic_method()
    x = torch.zeros(6)
    r0 = method.step(0, x, method.worker_params(x) - C)
    assert (r0.staleness, r0.applied_messages, r0.log) == (0, 1, {})   # the probe, D = 0
    method.observe(_probe(0, compute_s=0.2, transmit_s=0.77, latency_s=0.2))
    r1 = method.step(1, x, method.worker_params(x) - C)
    assert r1.staleness == 1 and r1.applied_messages == 0
    assert r1.log["dga_delay"] == 1
    assert r1.log["dga_compute_s"] == 0.2
    assert r1.log["dga_transmit_s"] == pytest.approx(0.77)
    assert r1.log["dga_latency_s"] == pytest.approx(0.2)
    method.observe(_probe(1, compute_s=0.01, transmit_s=0.001, latency_s=5.0))  # would be 20
    for k in range(2, 5):
        r = method.step(k, x, method.worker_params(x) - C)
        assert (r.staleness, r.applied_messages, r.log) == (1, 1, {})
    assert method.delay == 1


def test_fixed_delay_ignores_observations():
    method = _quadratic_method(dga_delay=3)
    method.observe(_probe(0, compute_s=0.2, transmit_s=0.01, latency_s=0.2))
    x = torch.zeros(6)
    r = method.step(0, x, method.worker_params(x) - C)
    assert r.staleness == 3 and r.log == {"dga_delay": 3} and method.delay == 3
