"""The grouped gradient engine (issue 16): one forward/backward over n·B samples gives the
same per-worker gradients as vmap (and as n separate passes) on the shipped models and on
each rule's own layer, and the engine falls back, saying why, where it cannot be trusted."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from decobench.training.allocator import keep_freed_memory
from decobench.training.flat import FlatLayout
from decobench.training.gradients import WorkerGradients
from decobench.training.grouped_gradients import GroupedGradients, unsupported


def _per_worker_loop(model, loss_fn, inputs, targets):
    """Reference: n plain forward/backward passes, one per worker."""
    rows = []
    for x, y in zip(inputs, targets, strict=True):
        model.zero_grad()
        loss_fn(model(x), y).backward()
        rows.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    return torch.stack(rows)


def _close(a, b, rtol=1e-4):
    scale = b.abs().amax(dim=1, keepdim=True).clamp_min(1e-12)
    return float(((a - b).abs() / scale).max()) <= rtol


def _grouped(model, loss_fn, inputs, targets):
    layout = FlatLayout.of(model)
    engine = GroupedGradients(model, layout, loss_fn, dict(model.named_buffers()))
    return engine(layout.flatten(model), inputs, targets)


def test_linear_rule_hand_checked():
    """y = Wx + b, f_i = mean of y over worker i's two samples: ∂f_i/∂W is the mean of
    worker i's inputs and ∂f_i/∂b = 1."""
    model = nn.Linear(2, 1)
    x = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[-1.0, 0.0], [5.0, 8.0]]])   # [n=2, B=2, 2]
    grads, _ = _grouped(model, lambda out, _: out.mean(), x, torch.zeros(2, 2))
    assert torch.equal(grads, torch.tensor([[2.0, 3.0, 1.0], [2.0, 4.0, 1.0]]))


class _Mixed(nn.Module):
    """Every rule at once: embedding (with padding), conv (stride, dilation, groups),
    layer norm, linear, a broadcast parameter of leading size 1, a batch-shared call."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(7, 6, padding_idx=0)
        self.pos = nn.Embedding(5, 6)
        self.shift = nn.Parameter(torch.randn(1, 5, 6))
        self.conv = nn.Conv1d(6, 4, kernel_size=3, stride=2, padding=2, dilation=2, groups=2)
        self.norm = nn.LayerNorm(4)
        self.head = nn.Linear(4, 3)

    def forward(self, tokens):
        h = self.emb(tokens) + self.pos(torch.arange(tokens.shape[1]).unsqueeze(0)) + self.shift
        h = self.conv(h.transpose(1, 2)).transpose(1, 2)
        return self.head(torch.tanh(self.norm(h))).mean(1)


def test_every_rule_matches_separate_passes():
    torch.manual_seed(0)
    model = _Mixed()
    tokens = torch.randint(0, 7, (3, 4, 5))
    tokens[0, 0, :2] = 0                                 # padding rows get no gradient
    targets = torch.randint(0, 3, (3, 4))
    grads, losses = _grouped(model, F.cross_entropy, tokens, targets)
    reference = _per_worker_loop(model, F.cross_entropy, tokens, targets)
    assert _close(grads, reference)
    assert torch.allclose(losses, torch.stack([F.cross_entropy(model(t), y)
                                               for t, y in zip(tokens, targets, strict=True)]))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 4), b=st.integers(1, 3), channels=st.sampled_from([1, 2, 4]),
       stride=st.integers(1, 2), padding=st.integers(0, 2), kernel=st.integers(1, 3),
       bias=st.booleans(), seed=st.integers(0, 1000))
def test_conv_and_linear_rules_property(n, b, channels, stride, padding, kernel, bias, seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(channels, 4, kernel, stride=stride, padding=padding,
                                    bias=bias), nn.ReLU(), nn.Flatten(),
                          nn.LazyLinear(3, bias=bias))
    x = torch.randn(n, b, channels, 6, 6)
    model(x[0])                                          # materialise the lazy layer
    y = torch.randint(0, 3, (n, b))
    grads, _ = _grouped(model, F.cross_entropy, x, y)
    assert _close(grads, _per_worker_loop(model, F.cross_entropy, x, y))


@pytest.mark.parametrize("task_name", ["cnn-fmnist", "vit-imagenet", "gpt2-wikitext"])
def test_shipped_models_choose_the_grouped_engine_and_match_vmap(task_name):
    from decobench.cli.bench import _probe_batch
    from decobench.tasks import get_task
    from decobench.tasks.base import build_seeded_model

    task = get_task(task_name)
    model = build_seeded_model(task, task.profiles["cpu"], 0)
    layout = FlatLayout.of(model)
    params = layout.flatten(model)
    x, y = _probe_batch(task, model, 3, 2, torch.Generator().manual_seed(1))
    if task_name == "gpt2-wikitext":
        x, y = x[..., :16], y[..., :16]
    gradients = WorkerGradients(model, layout, task.loss)
    assert gradients.select(params, x, y)["engine"] == "grouped"
    grouped, grouped_loss = gradients(params, x, y)
    vmapped, vmapped_loss = WorkerGradients(model, layout, task.loss, engine="vmap")(params, x, y)
    assert _close(grouped, vmapped, rtol=1e-4)
    assert torch.allclose(grouped_loss, vmapped_loss, rtol=1e-6)


class _Tied(nn.Module):
    """Uses a layer's weight outside the layer's forward: no hook sees that use."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return F.linear(self.fc(x), self.fc.weight)


class _Wide(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3))
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(x * self.scale)


@pytest.mark.parametrize(("model", "fragment"), [
    (_Tied(), "differ from vmap's"),
    (_Wide(), "owns parameters without a per-worker gradient rule (scale)"),
])
def test_falls_back_to_vmap_saying_why(model, fragment):
    layout = FlatLayout.of(model)
    params = layout.flatten(model)
    x, y = torch.randn(2, 4, 3), torch.randint(0, 2, (2, 4))
    gradients = WorkerGradients(model, layout, F.cross_entropy)
    chosen = gradients.select(params, x, y)
    assert chosen["engine"] == "vmap" and fragment in chosen["reason"], chosen
    grads, _ = gradients(params, x, y)
    assert _close(grads, _per_worker_loop(model, F.cross_entropy, x, y))


def test_per_worker_models_and_unsupported_options_fall_back():
    model = nn.Sequential(nn.Linear(3, 2))
    layout = FlatLayout.of(model)
    stacked = layout.flatten(model).repeat(2, 1)
    gradients = WorkerGradients(model, layout, F.cross_entropy)
    chosen = gradients.select(stacked, torch.randn(2, 4, 3), torch.randint(0, 2, (2, 4)))
    assert chosen == {"engine": "vmap", "reason": "one model per worker: the workers' "
                      "forward passes differ"}
    circular = nn.Conv2d(1, 1, 3, padding=1, padding_mode="circular")
    assert "padding" in unsupported(circular, FlatLayout.of(circular))
    with pytest.raises(ValueError, match="unknown gradient engine"):
        WorkerGradients(model, layout, F.cross_entropy, engine="fast")


@pytest.mark.parametrize(("method", "engine", "reason"), [
    ("d-sgd", "grouped", "matched vmap on a probe batch"),
    ("dga", "vmap", "one model per worker"),
])
def test_config_yaml_says_which_engine_and_why(tmp_path, fmnist_root, method, engine, reason):
    import yaml

    from decobench.cli.main import main

    out = tmp_path / method
    assert main(["run", "--task", "cnn-fmnist", "--method", method, "--workers", "2",
                 "--trace", "constant-1gbps-10ms", "--max-iters", "2", "--eval-every", "2",
                 "--data-root", str(fmnist_root), "--out", str(out), "--no-wandb",
                 "--no-progress"]) == 0
    gradients = yaml.safe_load((out / "config.yaml").read_text())["gradients"]
    assert gradients["engine"] == engine and reason in gradients["reason"], gradients
    assert gradients["allocator"] == keep_freed_memory()


def test_forcing_grouped_on_a_model_without_rules_is_one_line():
    model = _Wide()
    with pytest.raises(ValueError, match="without a per-worker gradient rule"):
        WorkerGradients(model, FlatLayout.of(model), F.cross_entropy, engine="grouped")
