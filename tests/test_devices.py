"""--device: where the model and gradients live, checked before training; the auto gradient
engine's fall-back to one worker at a time when the n workers' batches overflow a GPU."""

from __future__ import annotations

import multiprocessing
import os
import signal

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import nn

import decobench.training.gradients as gradients_module
from decobench.cli.main import main
from decobench.errors import DecobenchError
from decobench.training.devices import describe, resolve_device
from decobench.training.flat import FlatLayout
from decobench.training.gradients import WorkerGradients


def _gpus(monkeypatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_auto_takes_the_first_gpu_when_torch_sees_one(monkeypatch):
    _gpus(monkeypatch, 0)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    _gpus(monkeypatch, 2)
    assert resolve_device("auto") == torch.device("cuda", 0)
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)


@pytest.mark.parametrize(("count", "name", "message"), [
    (0, "cuda", "sees no CUDA GPU here"),
    (0, "cuda:0", "sees no CUDA GPU here"),
    (2, "cuda:2", "sees 2 CUDA GPU(s), cuda:0 to cuda:1"),
])
def test_a_gpu_that_is_not_there_is_one_clear_error(monkeypatch, count, name, message):
    _gpus(monkeypatch, count)
    with pytest.raises(DecobenchError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_device(name)


def test_cli_refuses_a_missing_gpu_before_training(fmnist_root, tmp_path, monkeypatch, capsys):
    _gpus(monkeypatch, 0)
    out = tmp_path / "run"
    code = main(["run", "--task", "cnn-fmnist", "--method", "d-sgd", "--trace",
                 "deco52-cnn-fmnist", "--data-root", str(fmnist_root), "--max-iters", "2",
                 "--out", str(out), "--no-progress", "--no-wandb", "--device", "cuda"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--device cuda" in err and "use --device cpu or auto" in err
    assert not out.exists()
    code = main(["run", "--task", "cnn-fmnist", "--method", "d-sgd", "--trace",
                 "deco52-cnn-fmnist", "--data-root", str(fmnist_root), "--max-iters", "2",
                 "--out", str(out), "--no-progress", "--no-wandb", "--device", "gpu"])
    assert code == 2 and "--device" in capsys.readouterr().err


def test_config_records_the_device_used(fmnist_root, tmp_path, monkeypatch):
    _gpus(monkeypatch, 0)
    out = tmp_path / "run"
    assert main(["run", "--task", "cnn-fmnist", "--method", "d-sgd", "--trace",
                 "deco52-cnn-fmnist", "--data-root", str(fmnist_root), "--max-iters", "2",
                 "--out", str(out), "--no-progress", "--no-wandb"]) == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["device"] == "auto" and config["gradients"]["device"] == "cpu"
    assert config["gradients"]["matmul_precision"] == "highest (CPU)"
    assert describe(torch.device("cpu")) == "cpu"


def _model() -> tuple[nn.Module, FlatLayout, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    layout = FlatLayout.of(model)
    return (model, layout, layout.flatten(model), torch.randn(4, 5, 3, 4),
            torch.randint(0, 3, (4, 5)))


def test_auto_takes_the_loop_when_the_workers_batches_overflow_the_gpu(monkeypatch):
    model, layout, params, inputs, targets = _model()
    monkeypatch.setattr(gradients_module, "on_gpu", lambda tensor: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    batched = WorkerGradients(model, layout, F.cross_entropy)

    def overflow(*args):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 96.00 GiB")

    monkeypatch.setattr(batched, "_grouped", overflow)
    choice = batched.select(params, inputs, targets)
    assert choice["engine"] == "loop" and "ran out of GPU memory" in choice["reason"]
    grads, losses = batched(params, inputs, targets)
    reference = WorkerGradients(model, layout, F.cross_entropy, engine="loop")
    reference.select(params, inputs, targets)
    expected, expected_losses = reference(params, inputs, targets)
    assert torch.allclose(grads, expected) and torch.allclose(losses, expected_losses)
    # a batch that fits keeps the batched engine, and an explicit engine is never replaced
    fits = WorkerGradients(model, layout, F.cross_entropy)
    assert fits.select(params, inputs, targets)["engine"] == "grouped"
    asked = WorkerGradients(model, layout, F.cross_entropy, engine="vmap")
    assert asked.select(params, inputs, targets)["engine"] == "vmap"


@pytest.fixture
def restore_precision():
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


def test_matmul_precision_is_tf32_on_a_gpu_and_untouched_on_the_cpu(restore_precision):
    from decobench.training.devices import set_matmul_precision

    assert set_matmul_precision(torch.device("cuda", 0), "auto") == "high"
    assert torch.get_float32_matmul_precision() == "high"
    # a CPU run after a GPU run in the same process (a sweep worker) is back at the default
    assert set_matmul_precision(torch.device("cpu"), "high") == "highest (CPU)"
    assert torch.get_float32_matmul_precision() == "highest"
    assert set_matmul_precision(torch.device("cuda", 0), "highest") == "highest"


def test_a_sweep_runs_one_cell_per_gpu_by_default(monkeypatch):
    from decobench.training.devices import default_jobs

    _gpus(monkeypatch, 0)
    assert default_jobs(16) == 16 and default_jobs(None) == 1
    _gpus(monkeypatch, 2)
    assert default_jobs(16) == 2


def test_each_sweep_worker_sees_its_own_gpu(monkeypatch):
    import decobench.sweeps.cell as sweep_module

    monkeypatch.setattr(torch, "set_num_threads", lambda threads: None)
    monkeypatch.setattr(signal, "signal", lambda *args: None)   # keep this process's Ctrl-C
    monkeypatch.setattr(sweep_module.sys, "platform", "not-linux")   # and no PR_SET_PDEATHSIG
    slots = multiprocessing.get_context("spawn").Value("i", 0)
    seen = []
    for visible in (None, None, None, "4,6", "4,6"):
        if visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        sweep_module.init_worker(1, slots, gpus=2)
        seen.append(os.environ["CUDA_VISIBLE_DEVICES"])
    assert seen == ["0", "1", "0", "6", "4"]     # round robin over what was visible
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    sweep_module.init_worker(1, slots, gpus=0)  # no GPU: nothing set
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
