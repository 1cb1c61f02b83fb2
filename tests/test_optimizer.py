import math

import torch

from decobench.methods.optimizer import OptimizerConfig, SharedOptimizer, learning_rate


def test_plain_sgd_step():
    x = torch.tensor([1.0, 2.0])
    SharedOptimizer(OptimizerConfig(lr=0.5)).step(x, torch.tensor([2.0, -2.0]), 0)
    assert x.tolist() == [0.0, 3.0]


def test_momentum_and_weight_decay_after_aggregation():
    # v1 = u + wd x = 1 + 0.1*1 = 1.1; x = 1 - 0.1*1.1 = 0.89
    # v2 = 0.9*1.1 + 1 + 0.1*0.89 = 2.079; x = 0.89 - 0.2079 = 0.6821
    opt = SharedOptimizer(OptimizerConfig(lr=0.1, momentum=0.9, weight_decay=0.1))
    x = torch.tensor([1.0], dtype=torch.float64)
    opt.step(x, torch.tensor([1.0], dtype=torch.float64), 0)
    assert math.isclose(float(x), 0.89)
    opt.step(x, torch.tensor([1.0], dtype=torch.float64), 1)
    assert math.isclose(float(x), 0.6821)


def test_warmup_cosine_schedule():
    cfg = OptimizerConfig(lr=1.0, schedule="warmup-cosine", warmup_iters=4, total_iters=14)
    assert [learning_rate(cfg, t) for t in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert math.isclose(learning_rate(cfg, 9), 0.5)     # half-way through the cosine
    assert math.isclose(learning_rate(cfg, 14), 0.0, abs_tol=1e-12)


def test_warmup_then_constant():
    cfg = OptimizerConfig(lr=0.2, schedule="warmup", warmup_iters=2)
    assert [learning_rate(cfg, t) for t in range(4)] == [0.1, 0.2, 0.2, 0.2]
