"""Methods on the shared pipeline: equivalences, hand-checked steps, DeCo's controller."""

import torch
import torch.nn.functional as F
from torch import nn

from decobench.methods import MethodContext, Observation, get_method_spec
from decobench.methods.controllers import DecoController
from decobench.methods.optimizer import OptimizerConfig
from decobench.planning.estimators import LinkEstimator
from decobench.planning.phi import phi_paper
from decobench.training.flat import FlatLayout
from decobench.training.gradients import WorkerGradients


def _tiny(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))
    layout = FlatLayout.of(model)
    return model, layout, WorkerGradients(model, layout, F.cross_entropy)


def _context(layout, workers, lr=0.1):
    return MethodContext(d=layout.d, workers=workers, topology="paper",
                         optimizer=OptimizerConfig(lr=lr))


def test_vectorised_gradients_match_per_worker_autograd():
    model, layout, grads = _tiny()
    x = torch.randn(3, 8, 5)
    y = torch.randint(0, 3, (3, 8))
    g, loss = grads(layout.flatten(model), x, y)
    for i in range(3):
        model.zero_grad()
        li = F.cross_entropy(model(x[i]), y[i])
        li.backward()
        ref = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        assert torch.allclose(g[i], ref, atol=1e-6)
        assert torch.isclose(loss[i], li)


def test_per_worker_parameter_stacks_are_supported():
    model, layout, grads = _tiny()
    flat = layout.flatten(model)
    stack = torch.stack([flat, flat * 0.5])
    x, y = torch.randn(2, 4, 5), torch.randint(0, 3, (2, 4))
    g_stack, _ = grads(stack, x, y)
    g_shared, _ = grads(flat, x, y)
    assert torch.allclose(g_stack[0], g_shared[0]) and not torch.allclose(g_stack[1], g_shared[1])


def _train(method_name, options, iterations=20, workers=3):
    model, layout, grads = _tiny()
    params = layout.flatten(model)
    spec = get_method_spec(method_name)
    method = spec.build(_context(layout, workers), spec.options(**options))
    gen = torch.Generator().manual_seed(1)
    for k in range(iterations):
        x = torch.randn(workers, 6, 5, generator=gen)
        y = torch.randint(0, 3, (workers, 6), generator=gen)
        g, _ = grads(params, x, y)
        method.step(k, params, g)
    return params


def test_dsgd_equals_dd_ef_sgd_with_delta_one_tau_zero():
    a = _train("d-sgd", {})
    b = _train("dd-ef-sgd", {"delta": 1.0, "tau": 0})
    assert torch.allclose(a, b, atol=1e-6)
    assert not torch.allclose(a, _train("dd-ef-sgd", {"delta": 0.2, "tau": 0}))


def test_dsgd_step_is_mean_gradient_step():
    """Two workers, six parameters, quadratic f_i(x) = ½‖x − c_i‖²: g_i = x − c_i."""
    spec = get_method_spec("d-sgd")
    ctx = MethodContext(d=6, workers=2, topology="paper", optimizer=OptimizerConfig(lr=0.5))
    method = spec.build(ctx, spec.options())
    x = torch.zeros(6)
    c = torch.tensor([[1.0, 2, 3, 4, 5, 6], [-1.0, 0, 1, 0, -1, 2]])
    result = method.step(0, x, x - c)
    # u = mean(x - c) = -[0, 1, 2, 2, 2, 4]; x1 = 0 - 0.5 u
    assert x.tolist() == [0.0, 0.5, 1.0, 1.0, 1.0, 2.0]
    assert result.bits_per_worker == 6 * 32 and result.dense and result.staleness == 0


def test_dd_ef_sgd_hand_checked_delayed_sparse_steps():
    """δ = 1/6 (k = 1), τ = 1 on the same quadratic: the first update lands one iteration late."""
    spec = get_method_spec("dd-ef-sgd")
    ctx = MethodContext(d=6, workers=2, topology="paper", optimizer=OptimizerConfig(lr=1.0))
    method = spec.build(ctx, spec.options(delta=1 / 6, tau=1))
    x = torch.zeros(6)
    c = torch.tensor([[0.0, 0, 0, 0, 0, 4], [0.0, 0, 0, 0, -2, 0]])
    r0 = method.step(0, x, x - c)                     # nothing due yet
    assert x.tolist() == [0.0] * 6 and r0.applied_messages == 0
    # iteration 0 sent worker 0: -4 at index 5, worker 1: +2 at index 4; mean = (-2 @5, +1 @4)
    r1 = method.step(1, x, x - c)
    assert r1.applied_messages == 1
    assert x.tolist() == [0.0, 0, 0, 0, -1.0, 2.0]
    # k = 1, d = 6: min(1 * (32 + 3), 32 + 6, 192) = 35 bits
    assert r1.bits_per_worker == 35 and r1.staleness == 1


def _observation(k, bits=1e6, bandwidth=1e8, latency=0.05, compute=0.01):
    return Observation(iteration=k, compute_s=compute, link_bits=bits, tx_start_s=0.0,
                       tx_end_s=bits / bandwidth, arrive_s=bits / bandwidth + latency,
                       latency_factor=1.0)


def test_deco_controller_plans_from_measurements_every_interval():
    ctrl = DecoController(d=1_000_000, workers=4, topology="paper", phi=phi_paper, interval=10,
                          tau_max=32, delta_min=1e-4, kappa=1.0, initial_delta=0.01,
                          estimator=LinkEstimator(alpha=1.0))
    first = ctrl.schedule(0)
    assert (first.delta, first.staleness) == (0.01, 0)          # before any measurement
    assert ctrl.log() == {}
    ctrl.observe(_observation(0, bandwidth=1e8, latency=0.2, compute=0.1))
    s = ctrl.schedule(1)
    assert (s.delta, s.staleness) == (0.28125, 3)                 # planner's hand-checked case
    assert ctrl.log()["plan_bandwidth_mbps"] == 100.0
    ctrl.observe(_observation(1, bandwidth=1e12, latency=0.01, compute=0.1))
    assert ctrl.schedule(5) == s                                  # not re-planned before F
    s2 = ctrl.schedule(11)
    assert (s2.delta, s2.staleness) == (1.0, 1)                   # bandwidth so high: dense
    assert [r.iteration for r in ctrl.history] == [1, 11]


def test_deco_warns_once_when_its_plan_is_held_across_a_bandwidth_change():
    """Plan at â = 100 Mbit/s (α = 1: â is the last measurement); 55 Mbit/s (1.8x) says
    nothing, 45 Mbit/s (2.2x) puts one warning naming --deco-interval in the next log, and a
    later change says nothing more. The static strategy (PLAN_ONCE) never warns."""
    from decobench.methods.controllers import PLAN_ONCE

    def controller(interval):
        return DecoController(d=1_000_000, workers=4, topology="paper", phi=phi_paper,
                              interval=interval, tau_max=32, delta_min=1e-4, kappa=1.0,
                              initial_delta=0.01, estimator=LinkEstimator(alpha=1.0))

    for interval in (100, PLAN_ONCE):
        ctrl = controller(interval)
        ctrl.schedule(0)
        ctrl.observe(_observation(0, bandwidth=1e8, latency=0.2, compute=0.1))
        ctrl.schedule(1)
        assert "warning" not in ctrl.log()                        # the plan's own row
        ctrl.observe(_observation(1, bandwidth=5.5e7, latency=0.2, compute=0.1))
        ctrl.schedule(2)
        assert "warning" not in ctrl.log()                        # 1.8x: below 2x
        ctrl.observe(_observation(2, bandwidth=4.5e7, latency=0.2, compute=0.1))
        ctrl.schedule(3)
        warning = ctrl.log().get("warning")
        if interval == PLAN_ONCE:
            assert warning is None
            continue
        assert warning == ("DeCo's plan (made at â = 100 Mbit/s) is held for F = 100 "
                           "iterations, but the bandwidth estimate is now 45 Mbit/s (2.2x); "
                           "a smaller --deco-interval re-plans sooner (the paper suggests a "
                           "smaller F for dynamic networks, its §4.2)")
        assert "warning" not in ctrl.log()                        # once
        ctrl.observe(_observation(3, bandwidth=1e6, latency=0.2, compute=0.1))
        ctrl.schedule(4)
        assert "warning" not in ctrl.log()                        # and only once a run
