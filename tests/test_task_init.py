"""``--init``: scratch is the default and builds the same parameters as before the option
existed; pretrained is refused, in one line before training, where no published weights
exist (the CNN tasks, every cpu profile); the default leaves a run's sweep identity as it
was. Loading real weights is never tested (no network): the loaders are faked in
test_task_vit_imagenet.py and test_task_gpt2_wikitext.py."""

import pytest
import torch

import decobench.tasks
from decobench.cli.main import main
from decobench.errors import DecobenchError
from decobench.runs.config import RunConfig, build_run_config
from decobench.runs.identity import ADDED_LATER, identity
from decobench.tasks import TASKS, get_task
from decobench.tasks.base import build_seeded_model

SCRATCH_ABS_SUMS = {
    "cnn-fmnist": (454_922, 4630.947509754777),
    "cnn-cifar10": (579_402, 5198.539560683923),
    "vit-imagenet": (555_592, 9885.626397493274),
    "gpt2-wikitext": (937_472, 14229.336897400075),
}
"""Sum of |parameter| of each task's cpu model built with seed 0, measured before --init
existed (torch 2.14, 2026-11-23)."""


def test_scratch_is_the_default():
    assert RunConfig(task="cnn-fmnist", method="d-sgd", trace="x").init == "scratch"
    assert all(get_task(name).init == "scratch" for name in TASKS.names())
    assert "init" in ADDED_LATER


@pytest.mark.parametrize("name", sorted(SCRATCH_ABS_SUMS))
def test_scratch_builds_the_same_parameters_as_before(name):
    task = get_task(name)
    profile = task.profile("cpu")
    model = build_seeded_model(task, profile, 0)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    count, abs_sum = SCRATCH_ABS_SUMS[name]
    assert flat.numel() == count
    assert float(flat.double().abs().sum()) == pytest.approx(abs_sum, rel=1e-6)
    task.select_init("scratch", profile)                       # explicit scratch: the same
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        direct = task.build_model(profile)                     # the recipe before --init
    again = build_seeded_model(task, profile, 0)
    for a, b, c in zip(model.parameters(), direct.parameters(), again.parameters(), strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)


@pytest.mark.parametrize("name", ["cnn-fmnist", "cnn-cifar10"])
def test_cnn_tasks_have_no_pretrained_weights(name):
    task = get_task(name)
    for profile in task.profiles.values():
        with pytest.raises(DecobenchError, match=f"task {name} has no published pretrained "
                           "weights.*--init scratch"):
            task.select_init("pretrained", profile)
    assert task.init == "scratch"


@pytest.mark.parametrize("name", ["vit-imagenet", "gpt2-wikitext"])
def test_cpu_profiles_have_no_pretrained_weights(name):
    task = get_task(name)
    with pytest.raises(DecobenchError, match="profile 'cpu' .* no published weights.*"
                       "profiles with pretrained weights: paper"):
        task.select_init("pretrained", task.profile("cpu"))
    assert task.init == "scratch"
    with pytest.raises(DecobenchError, match="choose scratch or pretrained"):
        task.select_init("imagenet", task.profile("paper"))


def test_cnn_pretrained_is_one_line_before_training(fmnist_root, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(decobench.tasks.TASKS.registered, "cnn-fmnist", TASKS.get("cnn-fmnist"))
    assert main(["run", "--task", "cnn-fmnist", "--init", "pretrained", "--method", "d-sgd",
                 "--trace", "constant-20mbps-100ms", "--data-root", str(fmnist_root),
                 "--out", str(tmp_path / "x"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("decobench: error: --init pretrained: task "
                                               "cnn-fmnist has no published pretrained")
    assert not (tmp_path / "x").exists()
    with pytest.raises(DecobenchError, match="--init: Input should be 'scratch' or "
                       "'pretrained'"):
        build_run_config({"task": "cnn-fmnist", "method": "d-sgd", "trace": "x",
                          "init": "imagenet"})


def test_default_init_keeps_the_identity_and_pretrained_changes_it():
    base = dict(task="cnn-fmnist", method="d-sgd", trace="constant-20mbps-100ms")
    plain = identity(RunConfig(**base))
    # the identity pinned in tests/test_suite.py (before the emulated backend and --init)
    assert plain == "a343fd3193abb82856f92658387ef3635fa8fde9a708fb32411b6619ce9a3464"
    assert identity(RunConfig(**base, init="scratch")) == plain
    assert identity(RunConfig(**base, init="pretrained")) != plain
