"""The update rules of docs/design.md §2.5: hand-checked steps for each rule, the equivalences
that must hold (the defaults are the paper's pipeline; D-SGD's momentum moves onto the
workers without changing its steps), and one-line refusals before training."""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from decobench.cli.main import main
from decobench.clock.wire import topk_wire_bits
from decobench.compression.compressors import DenseCompressor, TopKCompressor
from decobench.compression.layerwise import Layer, LayerTopKCompressor, model_layers
from decobench.methods import MethodContext, get_method_spec
from decobench.methods.controllers import StaticController
from decobench.methods.ddefsgd import DDEFSGD, topk_compressor
from decobench.methods.optimizer import OptimizerConfig
from decobench.methods.rules import UpdateRules, clip_rows, step_bound_scale
from decobench.runs.config import build_run_config
from decobench.runs.identity import identity
from decobench.runs.runner import prepare
from decobench.runs.trajectory import not_reusable

SHAPES = (("w", (2, 2)), ("b", (2,)))


def _method(optimizer, rules=None, delta=0.5, tau=0, d=2, workers=1, shapes=(),
            compressor=None):
    context = MethodContext(d=d, workers=workers, topology="paper", optimizer=optimizer,
                            param_shapes=shapes, rules=rules or UpdateRules())
    return DDEFSGD(context, compressor or topk_compressor(context),
                   StaticController(delta, tau))


def _steps(method, gradient, iterations, d=2):
    x = torch.zeros(d)
    for k in range(iterations):
        method.step(k, x, gradient.clone().reshape(1, -1))
    return x


def test_clip_rows_scales_only_rows_above_the_norm():
    g = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    clipped = clip_rows(g, 1.0)
    assert torch.allclose(clipped, torch.tensor([[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]]))
    assert torch.equal(g, torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]]))  # not modified


def test_step_bound_scale_by_hand():
    assert step_bound_scale(1.0, 0) == 1.0                      # D-SGD keeps its step
    assert step_bound_scale(0.5, 1) == pytest.approx(0.5)       # Φ = 1 + 0.5/(0.5·0.5) = 3
    assert step_bound_scale(0.5, 0) == pytest.approx(1 / math.sqrt(2))
    # DeCo's first GPT-2 plan: Φ_paper(0.0084, 4) = 4 + 0.9916/(0.0084·0.9916^4) ≈ 126.0
    assert 1 / step_bound_scale(0.0084, 4) == pytest.approx(11.27, abs=0.01)


def test_layer_topk_keeps_each_tensors_share_where_global_topk_does_not():
    """w = [4, −1, 0.5, 3], b = [0.1, −0.2], δ = 0.5: global Top-3 takes 4, 3, −1 (all of
    w); per tensor w keeps 2 (4, 3) and b keeps 1 (−0.2)."""
    p = torch.tensor([[4.0, -1.0, 0.5, 3.0, 0.1, -0.2]])
    layer = LayerTopKCompressor(model_layers(SHAPES, 6)).compress(p, 0.5)
    assert sorted(layer.indices[0].tolist()) == [0, 3, 5]
    assert sorted(TopKCompressor().compress(p, 0.5).indices[0].tolist()) == [0, 1, 3]
    # W(2, 4) = min(2·34, 2·32 + 4, 4·32) = 68; W(1, 2) = min(33, 34, 64) = 33
    assert layer.bits_per_worker == 68 + 33 == topk_wire_bits(2, 4) + topk_wire_bits(1, 2)
    compressor = LayerTopKCompressor(model_layers(SHAPES, 6))
    assert compressor.size(0.5, 6).bits_per_worker == 101
    assert compressor.size(0.5, 6).delta == pytest.approx(3 / 6)
    assert compressor.size(1.0, 6).dense
    assert compressor.compress(p, 1.0).dense
    assert compressor.layers[1] == Layer("b", 4, 2, True)       # 1-D tensors are compressed too


def test_ef_in_update_units_keeps_each_residuals_step_under_warm_up():
    """g = [4, 1.5], Top-1, γ_t = 0.25, 0.5, 0.75 (warm-up over 4).
    Gradient units: e grows 1.5 per step; at t = 2, p = [4, 4.5] flushes e: x = [−3, −3.375].
    Update units: p = e + γ_t g stays [γ_t·4, ...] ahead: x = −(1 + 2 + 3, 0) = [−6, 0]."""
    optimizer = OptimizerConfig(lr=1.0, schedule="warmup", warmup_iters=4)
    g = torch.tensor([4.0, 1.5])
    gradient = _method(optimizer)
    assert torch.allclose(_steps(gradient, g, 3), torch.tensor([-3.0, -3.375]))
    assert torch.allclose(gradient.error_feedback.memory, torch.tensor([[4.0, 0.0]]))
    update = _method(optimizer, UpdateRules(ef_units="update"))
    assert torch.allclose(_steps(update, g, 3), torch.tensor([-6.0, 0.0]))
    assert torch.allclose(update.error_feedback.memory, torch.tensor([[0.0, 2.25]]))


def test_update_units_weight_decay_and_momentum_match_gradient_units_at_a_constant_step():
    """Dense (no residual), γ constant: x ← x − γ v either way, wd entering as γ·wd·x."""
    optimizer = OptimizerConfig(lr=0.1, momentum=0.9, weight_decay=0.01)
    a = _method(optimizer, delta=1.0, compressor=DenseCompressor())
    b = _method(optimizer, UpdateRules(ef_units="update"), delta=1.0,
                compressor=DenseCompressor())
    xa, xb = torch.ones(2), torch.ones(2)
    for k, g in enumerate(torch.randn(5, 2, generator=torch.Generator().manual_seed(0))):
        a.step(k, xa, g.reshape(1, -1))
        b.step(k, xb, g.reshape(1, -1))
    assert torch.allclose(xa, xb, atol=1e-6)


def test_step_bound_scales_the_gradient_by_s_of_the_plan():
    """δ = 0.5, τ = 0: Φ_paper = 1, s = 1/√2; g = [4, 1], γ = 1 → x = −[4/√2, 0],
    e = [0, 1/√2]."""
    method = _method(OptimizerConfig(lr=1.0), UpdateRules(step_bound="theorem-1"))
    x = _steps(method, torch.tensor([4.0, 1.0]), 1)
    assert torch.allclose(x, torch.tensor([-4 / math.sqrt(2), 0.0]))
    assert torch.allclose(method.error_feedback.memory, torch.tensor([[0.0, 1 / math.sqrt(2)]]))
    dense = _method(OptimizerConfig(lr=1.0), UpdateRules(step_bound="theorem-1"), delta=1.0,
                    compressor=DenseCompressor())
    assert torch.allclose(_steps(dense, torch.tensor([4.0, 1.0]), 1), torch.tensor([-4.0, -1.0]))


def test_momentum_correction_by_hand():
    """DGC, μ = 0.5, γ = 1, Top-1, g = [4, 1.5]:
    t=0: u = [4, 1.5], p = [4, 1.5] → send [4, 0], e = [0, 1.5], u masked → [0, 1.5]
    t=1: u = [4, 2.25], p = [4, 3.75] → send [4, 0], e = [0, 3.75], u → [0, 2.25]
    t=2: u = [4, 2.625], p = [4, 6.375] → send [0, 6.375], e = [4, 0], u → [4, 0]
    applied without momentum: x = [−8, −6.375]."""
    method = _method(OptimizerConfig(lr=1.0, momentum=0.5),
                     UpdateRules(momentum_correction=True))
    x = _steps(method, torch.tensor([4.0, 1.5]), 3)
    assert torch.allclose(x, torch.tensor([-8.0, -6.375]))
    assert torch.allclose(method.rules.velocity, torch.tensor([[4.0, 0.0]]))
    assert torch.allclose(method.error_feedback.memory, torch.tensor([[4.0, 0.0]]))
    assert method.optimizer.config.momentum == 0.0


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(0.0, 0.95))
def test_dense_momentum_correction_is_momentum_after_aggregation(seed, mu):
    """Without compression the workers' momenta average to the aggregated momentum: D-SGD's
    steps do not change (up to float rounding)."""
    optimizer = OptimizerConfig(lr=0.1, momentum=mu)
    plain = _method(optimizer, delta=1.0, d=3, workers=2, compressor=DenseCompressor())
    corrected = _method(optimizer, UpdateRules(momentum_correction=True), delta=1.0, d=3,
                        workers=2, compressor=DenseCompressor())
    xa, xb = torch.zeros(3), torch.zeros(3)
    for k, g in enumerate(torch.randn(6, 2, 3, generator=torch.Generator().manual_seed(seed))):
        plain.step(k, xa, g)
        corrected.step(k, xb, g)
    assert torch.allclose(xa, xb, atol=1e-5)


def test_default_rules_change_nothing():
    assert UpdateRules().changed() == () and UpdateRules().describe() == "paper pipeline"
    rules = UpdateRules(ef_units="update", clip_norm=1.0, momentum_correction=True)
    assert rules.describe() == "--ef-units update, --clip-norm 1.0, --momentum-correction"
    optimizer = OptimizerConfig(lr=0.1, momentum=0.9)
    a, b = _method(optimizer, d=6, shapes=SHAPES), _method(optimizer, UpdateRules(), d=6)
    assert isinstance(a.compressor, TopKCompressor)
    g = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    xa, xb = torch.zeros(6), torch.zeros(6)
    for k in range(4):
        a.step(k, xa, g[k:k + 1])
        b.step(k, xb, g[k:k + 1])
    assert torch.equal(xa, xb)


def _config(**values):
    return build_run_config({"task": "cnn-fmnist", "trace": "wan-200ms-lowbw-varying",
                             "method": "deco-sgd", **values})


def test_run_flags_resolve_over_the_profile_and_keep_old_identities():
    assert identity(_config()) == identity(_config(topk_scope=None, clip_norm=None))
    assert identity(_config()) != identity(_config(clip_norm=1.0))
    run = prepare(_config(ef_units="update", clip_norm=2.0, momentum=0.9,
                          momentum_correction="on"))
    assert run.rules == UpdateRules(ef_units="update", clip_norm=2.0, momentum_correction=True)
    assert prepare(_config(clip_norm=0.0)).rules == UpdateRules()      # 0 = off
    assert prepare(_config()).rules == UpdateRules()


def test_layer_topk_runs_train_their_own_trajectory():
    assert "layer-wise Top-k" in not_reusable(prepare(_config(topk_scope="layer")))
    assert not_reusable(prepare(_config(ef_units="update"))) is None


def test_methods_declare_the_rules_they_implement():
    assert get_method_spec("dga").rules == frozenset({"clip_norm"})
    assert "step_bound" not in get_method_spec("accordion").rules
    assert "topk_scope" not in get_method_spec("cocktail-sgd").rules
    for name in ("d-sgd", "dd-ef-sgd", "deco-sgd", "deco-sgd-robust", "cocktail-sgd-topk",
                 "static-mean-plan"):
        assert len(get_method_spec(name).rules) == 5, name


@pytest.mark.parametrize(("flags", "says"), [
    (["--method", "dga", "--ef-units", "update"],
     "--ef-units: method dga does not implement this update rule"),
    (["--method", "accordion", "--step-bound", "theorem-1", "--clip-norm", "1"],
     "--step-bound: method accordion does not implement"),
    (["--method", "deco-sgd", "--momentum-correction", "on"],
     "--momentum-correction on moves momentum μ onto the workers, and this run's μ is 0"),
    (["--method", "deco-sgd", "--clip-norm", "-1"], "--clip-norm: Input should be greater"),
])
def test_bad_rules_are_refused_in_one_line(capsys, flags, says):
    assert main(["run", "--task", "cnn-fmnist", "--trace", "wan-200ms-lowbw-varying",
                 *flags]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and says in error[0], error


SMALL = ["--task", "cnn-fmnist", "--workers", "2", "--batch-size", "16", "--max-iters", "6",
         "--eval-every", "3", "--no-progress", "--no-wandb", "--trace",
         "wan-200ms-lowbw-varying", "--method", "deco-sgd", "--deco-interval", "3"]


def _metrics(out):
    return [json.loads(line) | {"wall_time_s": None}
            for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_a_run_with_every_rule_changed_trains_and_records_them(tmp_path, fmnist_root):
    rules = ["--topk-scope", "layer", "--ef-units", "update", "--clip-norm", "0.5",
             "--step-bound", "theorem-1", "--momentum", "0.9", "--momentum-correction", "on"]
    runs = {}
    for name, extra in (("paper", ["--momentum", "0.9"]), ("rules", rules),
                        ("again", rules)):
        out = tmp_path / name
        assert main(["run", *SMALL, *extra, "--data-root", str(fmnist_root),
                     "--out", str(out)]) == 0
        runs[name] = _metrics(out)
    assert runs["rules"] == runs["again"]                # deterministic
    assert runs["rules"] != runs["paper"]
    config = yaml.safe_load((tmp_path / "rules" / "config.yaml").read_text())
    assert config["update_rules"] == {"topk_scope": "layer", "ef_units": "update",
                                      "clip_norm": 0.5, "step_bound": "theorem-1",
                                      "momentum_correction": True}
    assert "update_rules" not in yaml.safe_load((tmp_path / "paper" / "config.yaml").read_text())


@pytest.mark.parametrize("name", ["deco-sgd", "accordion"])
def test_a_checkpoint_from_before_the_rules_resumes_with_the_papers(name):
    """A method pickled before the update rules existed (no ``rules`` on it or its context)
    loads and steps as the paper's pipeline."""
    import pickle

    optimizer = OptimizerConfig(lr=0.1)
    spec = get_method_spec(name)
    old = spec.build(MethodContext(d=6, workers=2, topology="paper", optimizer=optimizer,
                                   param_shapes=SHAPES), spec.options())
    new = pickle.loads(pickle.dumps(old))
    g = torch.randn(3, 2, 6, generator=torch.Generator().manual_seed(2))
    xa, xb = torch.zeros(6), torch.zeros(6)
    old.step(0, xa, g[0])
    del old.__dict__["rules"]
    object.__delattr__(old.context, "rules")          # as a dataclass of the old code
    assert "rules" not in old.context.__dict__
    resumed = pickle.loads(pickle.dumps(old))
    new.step(0, xb, g[0])
    for k in (1, 2):
        resumed.step(k, xa, g[k])
        new.step(k, xb, g[k])
    assert resumed.rules.rules == UpdateRules() and torch.equal(xa, xb)
