"""The equivalences of docs/design.md §8.8: on a tiny model with the same seed and data,
D-SGD = DD-EF-SGD(δ = 1, τ = 0) = DGA(D = 0) = Accordion(δ_crit = δ_noncrit = 1)
after 20 iterations, with plain SGD and with momentum + weight decay after aggregation;
and each method genuinely differs once its own knob moves away from that point."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from decobench.methods import MethodContext, get_method_spec
from decobench.methods.optimizer import OptimizerConfig
from decobench.training.flat import FlatLayout
from decobench.training.gradients import WorkerGradients

WORKERS, ITERATIONS = 3, 20

AT_DSGD = {
    "d-sgd": {},
    "dd-ef-sgd": {"delta": 1.0, "tau": 0},
    "dga": {"dga_delay": 0},
    "accordion": {"accordion_delta_crit": 1.0, "accordion_delta_noncrit": 1.0},
}
AWAY = {
    "dd-ef-sgd": {"delta": 0.2, "tau": 0},
    "dga": {"dga_delay": 2},
    "accordion": {"accordion_delta_crit": 0.3, "accordion_delta_noncrit": 0.3},
}
OPTIMIZERS = {
    "sgd": OptimizerConfig(lr=0.1),
    "momentum-wd": OptimizerConfig(lr=0.05, momentum=0.9, weight_decay=1e-3),
}


def _train(method: str, options: dict, optimizer: OptimizerConfig) -> torch.Tensor:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))
    layout = FlatLayout.of(model)
    gradients = WorkerGradients(model, layout, F.cross_entropy)
    params = layout.flatten(model)
    spec = get_method_spec(method)
    context = MethodContext(d=layout.d, workers=WORKERS, topology="paper", optimizer=optimizer,
                            param_shapes=tuple(zip(layout.names, layout.shapes, strict=True)),
                            seed=0, iterations_per_epoch=5, max_iters=ITERATIONS)
    instance = spec.build(context, spec.options(**options))
    data = torch.Generator().manual_seed(1)
    for k in range(ITERATIONS):
        x = torch.randn(WORKERS, 6, 5, generator=data)
        y = torch.randint(0, 3, (WORKERS, 6), generator=data)
        g, _ = gradients(instance.worker_params(params), x, y)
        instance.step(k, params, g)
    return instance.evaluation_params(params)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("method", sorted(set(AT_DSGD) - {"d-sgd"}))
def test_method_at_its_dsgd_point_equals_dsgd(method, optimizer):
    reference = _train("d-sgd", {}, OPTIMIZERS[optimizer])
    same = _train(method, AT_DSGD[method], OPTIMIZERS[optimizer])
    assert torch.allclose(same, reference, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(_train(method, AWAY[method], OPTIMIZERS[optimizer]), reference,
                              rtol=1e-5, atol=1e-6)
