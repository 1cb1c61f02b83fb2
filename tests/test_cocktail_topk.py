"""The DeCo paper's static strategy, cocktail-sgd-topk (docs/design.md §8.5: Top-k
DD-EF-SGD with (δ, τ) frozen at DeCo's first plan)."""

import torch

from decobench.methods import MethodContext, Observation, get_method_spec
from decobench.methods.optimizer import OptimizerConfig
from decobench.methods.options import DecoOptions, PlannerOptions


def _observation(k, bits=1e6, bandwidth=1e8, latency=0.05, compute=0.01):
    return Observation(iteration=k, compute_s=compute, link_bits=bits, tx_start_s=0.0,
                       tx_end_s=bits / bandwidth, arrive_s=bits / bandwidth + latency,
                       latency_factor=1.0)


def _build(name, context, **options):
    spec = get_method_spec(name)
    return spec.build(context, spec.options(**options))


def test_same_as_deco_sgd_until_deco_replans_then_frozen():
    """d = 10^6, 4 workers: the probe (δ 0.01, τ 0), then the planner's hand-checked plan
    (0.28125, 3) from â = 100 Mbit/s, b̂ = 200 ms, T̂ = 100 ms (tests/test_methods.py). Until
    DeCo-SGD re-plans, both methods send the same Top-k messages and hold the same x; on a
    much faster link DeCo-SGD re-plans to (1, 1) at iteration 11 while the static strategy
    keeps (0.28125, 3)."""
    context = MethodContext(d=1_000_000, workers=4, topology="paper",
                            optimizer=OptimizerConfig(lr=0.01))
    static = _build("cocktail-sgd-topk", context, estimator_alpha=1.0)
    deco = _build("deco-sgd", context, estimator_alpha=1.0, deco_interval=10)
    xs, xd = torch.zeros(1_000_000), torch.zeros(1_000_000)
    generator = torch.Generator().manual_seed(0)
    for k in range(10):
        g = torch.randn(4, 1_000_000, generator=generator)
        a, b = static.step(k, xs, g), deco.step(k, xd, g)
        assert (a.delta, a.staleness, a.bits_per_worker) == (b.delta, b.staleness,
                                                             b.bits_per_worker)
        assert torch.equal(xs, xd)
        # W(δ) = min(k (32 + ⌈log2 d⌉), 32 k + d, 32 d), ⌈log2 10^6⌉ = 20: packed indices
        # for the probe (10^4 · 52), the d-bit mask for the plan (32 · 281,250 + 10^6)
        expected = (0.01, 0, 520_000) if k == 0 else (0.28125, 3, 10_000_000)
        assert (a.delta, a.staleness, a.bits_per_worker) == expected
        observation = _observation(k, bandwidth=1e8 if k == 0 else 1e12,
                                   latency=0.2 if k == 0 else 0.01, compute=0.1)
        static.observe(observation)
        deco.observe(observation)
    g = torch.randn(4, 1_000_000, generator=generator)
    for k in (10, 11, 500):
        kept = static.step(k, xs, g)
        assert (kept.delta, kept.staleness) == (0.28125, 3)
        assert "plan_bandwidth_mbps" not in kept.log
    # DeCo-SGD planned first at iteration 1, so it re-plans at 1 + F = 11
    assert (deco.step(10, xd, g).delta, deco.step(11, xd, g).delta) == (0.28125, 1.0)


def test_options_are_the_planners_with_deco_sgds_defaults():
    options = get_method_spec("cocktail-sgd-topk").options
    assert list(options.model_fields) == list(PlannerOptions.model_fields)
    for name in PlannerOptions.model_fields:
        assert options.model_fields[name].default == DecoOptions.model_fields[name].default
