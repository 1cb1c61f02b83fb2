"""vit-imagenet: a tiny ImageNet-style class-per-folder tree (PNGs and JPEGs written here)
read by the real ImageFolder pipeline, clear errors for missing data, the timm ViTs of both
profiles (parameter counts, vmap), end-to-end runs of every method on the tree, and
--init pretrained with timm.create_model faked (no download)."""

from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml
from PIL import Image
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from torchvision.transforms import functional as TF

import decobench.tasks
from decobench.cli.main import main
from decobench.errors import DecobenchError
from decobench.methods import method_specs
from decobench.runs.rundir import read_metrics, read_summary
from decobench.tasks.base import build_seeded_model, parameter_count
from decobench.tasks.standins import build_standins
from decobench.tasks.vit_imagenet import (
    ImageFolderData,
    VitImageNet,
    open_rgb,
    write_image_folder,
)
from decobench.training.flat import FlatLayout
from decobench.training.gradients import WorkerGradients

CLASSES = ["n01440764", "n01443537", "n01484850"]
SOLID = (10, 200, 90)


def _tree(root: Path, train_per_class: int = 4, val_per_class: int = 2,
          val_classes: list[str] = CLASSES) -> Path:
    """3 classes of random 40x40 RGB PNGs; the first training image is a solid colour."""
    gen = torch.Generator().manual_seed(0)
    for split, per_class, classes in (("train", train_per_class, CLASSES),
                                      ("val", val_per_class, val_classes)):
        labels = torch.arange(len(classes)).repeat_interleave(per_class)
        images = torch.randint(0, 256, (len(labels), 40, 40, 3), dtype=torch.uint8,
                               generator=gen)
        if split == "train":
            images[0] = torch.tensor(SOLID, dtype=torch.uint8)
        write_image_folder(root / split, images, labels, classes)
    return root


@pytest.fixture
def tree(tmp_path) -> Path:
    return _tree(tmp_path / "imagenet")


@pytest.fixture
def task() -> VitImageNet:
    return VitImageNet()


def test_tree_loads_lazily_with_shapes_labels_and_normalisation(tree, task):
    data = task.load_data(tree, False, task.profiles["cpu"])
    assert isinstance(data, ImageFolderData)
    assert data.num_train == 12 and data.num_classes == 3 and task.num_classes == 3
    assert data.train.classes == CLASSES and len(data.val) == 6
    indices = torch.tensor([[0, 5, 11], [4, 8, 1]])
    inputs, targets = data.train_batch(indices)
    assert inputs.shape == (2, 3, 3, 32, 32) and inputs.dtype == torch.float32
    assert targets.tolist() == [[0, 1, 2], [1, 2, 0]]
    # a solid colour survives resize + centre crop unchanged, then ImageNet mean/std
    expected = [(c / 255 - m) / s for c, m, s in zip(SOLID, IMAGENET_DEFAULT_MEAN,
                                                     IMAGENET_DEFAULT_STD, strict=True)]
    assert torch.allclose(inputs[0, 0].mean(dim=(1, 2)), torch.tensor(expected), atol=0.02)
    assert float(inputs[0, 0].std(dim=(1, 2)).max()) < 0.02
    # any image: shorter side to 32 / 0.875 = 36 (bicubic), centre 32x32, ImageNet mean/std
    image = Image.open(data.train.samples[5][0]).convert("RGB")
    reference = TF.normalize(TF.to_tensor(TF.center_crop(
        TF.resize(image, 36, interpolation=TF.InterpolationMode.BICUBIC), 32)),
        IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD)
    assert torch.allclose(inputs[0, 1], reference, atol=1e-6)
    assert torch.equal(data.train_batch(indices)[0], inputs)   # deterministic decoding


def test_a_split_that_fits_is_decoded_once_and_gives_the_same_tensors(tree, task,
                                                                      monkeypatch):
    decoded: list[str] = []
    real_open = open_rgb

    def counting_open(path, min_side):
        decoded.append(path)
        return real_open(path, min_side)

    monkeypatch.setattr("decobench.tasks.vit_imagenet.open_rgb", counting_open)
    kept = task.load_data(tree, False, task.profiles["cpu"])
    fresh = replace(kept, keep_decoded_bytes=0)       # nothing fits: decode every time
    indices = torch.tensor([[0, 5, 11], [4, 5, 0]])
    first = kept.train_batch(indices)[0]
    assert len(decoded) == 4 and kept.kept_images == 4   # 0 and 5 twice: decoded once
    assert torch.equal(kept.train_batch(indices)[0], first) and len(decoded) == 4
    assert torch.equal(fresh.train_batch(indices)[0], first) and len(decoded) == 10
    assert fresh.kept_images == 0
    evaluate = task.evaluate
    forward = torch.nn.Flatten()
    model = torch.nn.Sequential(forward, torch.nn.Linear(3 * 32 * 32, 3))
    assert evaluate(model, kept) == evaluate(model, fresh)
    assert kept.kept_images == 4 + 6                    # the 6 validation images kept too
    # the budget counts every image a run can touch: 12 training images of 3x32x32 float32
    one = 3 * 32 * 32 * 4
    tight = replace(kept, keep_decoded_bytes=12 * one - 1)
    tight.train_batch(indices)
    assert tight.kept_images == 0
    roomy = replace(kept, keep_decoded_bytes=12 * one)
    roomy.train_batch(indices)
    assert roomy.kept_images == 4


def test_paper_profile_pipeline_gives_224_pixels(tree, task):
    inputs, _ = task.load_data(tree, False, task.profiles["paper"]).train_batch(
        torch.tensor([[0]]))
    assert inputs.shape == (1, 1, 3, 224, 224)


def test_val_labels_follow_train_classes_when_val_lacks_a_class(tmp_path, task):
    root = _tree(tmp_path / "imagenet", val_classes=CLASSES[1:])
    data = task.load_data(root, False, task.profiles["cpu"])
    assert data.val.classes == CLASSES
    assert sorted(set(data.val.targets)) == [1, 2]     # not renumbered to 0, 1


def test_evaluation_uses_an_evenly_spaced_capped_subset(tree, task):
    data = task.load_data(tree, False, task.profiles["cpu"])
    assert data.eval_indices() == list(range(6))        # fewer images than the cap: all
    capped = replace(data, eval_images=3, eval_batch=2)
    assert capped.eval_indices() == [0, 2, 4]           # one per class (val sorted by class)

    def always(label):
        return lambda x: torch.nn.functional.one_hot(
            torch.full((len(x),), label), 3).float()

    assert task.evaluate(always(0), data) == pytest.approx(2 / 6)
    assert task.evaluate(always(2), capped) == pytest.approx(1 / 3)


def test_jpeg_is_decoded_at_reduced_scale_and_loaded(tmp_path, task):
    path = tmp_path / "big.JPEG"
    Image.new("RGB", (500, 375), (200, 30, 30)).save(path, quality=95)
    small = open_rgb(str(path), min_side=36)
    assert small.mode == "RGB" and small.size == (63, 47)      # 1/8 scale, both sides >= 36
    assert open_rgb(str(path), min_side=256).size == (500, 375)  # 1/2 would be too small
    root = tmp_path / "jpeg"
    for split in ("train", "val"):
        for cls in CLASSES:
            (root / split / cls).mkdir(parents=True)
            Image.new("RGB", (500, 375), (200, 30, 30)).save(root / split / cls / "x.JPEG")
    data = task.load_data(root, False, task.profiles["cpu"])
    assert data.num_train == 3 and data.train_batch(torch.tensor([[2]]))[1].item() == 2


@pytest.mark.parametrize("layout,message", [
    (None, "needs --data-root"),
    ("nothing", "no train/ folder"),
    ("no-val", "no val/ folder"),
    ("empty-train-class", "class folders without images (n01443537)"),
    ("unknown-val-class", "val/ has class folders that train/ lacks (n99999999)"),
    ("no-classes", "has no class folders"),
])
def test_missing_or_malformed_data_says_how_to_get_imagenet(tmp_path, task, layout, message):
    root = None if layout is None else tmp_path / "imagenet"
    if layout in ("no-val", "empty-train-class", "unknown-val-class"):
        _tree(root)
    if layout == "no-val":
        for f in (root / "val").rglob("*.png"):
            f.unlink()
        for d in sorted((root / "val").iterdir()):
            d.rmdir()
        (root / "val").rmdir()
    elif layout == "empty-train-class":
        for f in (root / "train" / CLASSES[1]).iterdir():
            f.unlink()
    elif layout == "unknown-val-class":
        (root / "val" / "n99999999").mkdir()
        Image.new("RGB", (8, 8)).save(root / "val" / "n99999999" / "a.png")
    elif layout == "no-classes":
        (root / "train").mkdir(parents=True)
        (root / "val").mkdir()
    with pytest.raises(DecobenchError) as err:
        task.check_data(root, root is None)
    assert message in str(err.value) and "\n" not in str(err.value)
    if layout != "unknown-val-class":
        assert "image-net.org" in str(err.value) and "ILSVRC2012" in str(err.value)
    with pytest.raises(DecobenchError):
        task.load_data(root, root is None, task.profiles["cpu"])


def test_parameter_counts_of_both_profiles(tree, task):
    assert parameter_count(task, task.profiles["paper"]) == 86_567_656   # ViT-B/16, 1000 cls
    assert parameter_count(task, task.profiles["cpu"]) == 555_592
    task.load_data(tree, False, task.profiles["cpu"])                     # head: 3 classes
    assert parameter_count(task, task.profiles["cpu"]) == 555_592 - 97 * (1000 - 3)


def test_models_have_no_dropout_and_explicit_attention(task):
    with torch.device("meta"):
        model = task.build_model(task.profiles["paper"])
    assert model.patch_embed.img_size == (224, 224) and len(model.blocks) == 12
    assert all(not b.attn.fused_attn for b in model.blocks)
    assert all(m.p == 0 for m in model.modules() if isinstance(m, torch.nn.Dropout))


def test_vmap_gradients_match_the_per_worker_loop(tree, task):
    profile = task.profiles["cpu"]
    data = task.load_data(tree, False, profile)
    model = build_seeded_model(task, profile, 0)
    layout = FlatLayout.of(model)
    inputs, targets = data.train_batch(torch.tensor([[0, 5], [7, 11]]))
    fast, loss = WorkerGradients(model, layout, task.loss)(layout.flatten(model), inputs,
                                                          targets)
    slow, loss_loop = WorkerGradients(model, layout, task.loss, vectorise=False)(
        layout.flatten(model), inputs, targets)
    assert task.vectorise and fast.shape == (2, layout.d)
    assert torch.allclose(fast, slow, atol=1e-6) and torch.allclose(loss, loss_loop)
    assert not torch.allclose(fast[0], fast[1])


def _run(tree: Path, out: Path, *extra: str) -> Path:
    assert main(["run", "--task", "vit-imagenet", "--profile", "cpu", "--workers", "2",
                 "--batch-size", "2", "--max-iters", "3", "--eval-every", "3",
                 "--no-progress", "--trace", "constant-20mbps-100ms", "--data-root",
                 str(tree), "--out", str(out), *extra]) == 0
    return out


@pytest.mark.parametrize("method", sorted(method_specs()))
def test_end_to_end_run_with_every_method(tree, tmp_path, monkeypatch, method):
    monkeypatch.setitem(decobench.tasks.TASKS.registered, "vit-imagenet", VitImageNet)
    extra = ["--deco-interval", "3"] if method == "deco-sgd" else []
    out = _run(tree, tmp_path / method, "--method", method, *extra)
    summary = read_summary(out)
    assert summary["status"] == "finished" and summary["iterations"] == 3
    assert summary["parameters"] == 555_592 - 97 * (1000 - 3)
    assert 0.0 <= summary["final_metric"] <= 1.0 and summary["metric_name"] == "accuracy"
    rows = read_metrics(out)
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert all(r["loss"] == r["loss"] for r in rows) and rows[-1]["metric"] is not None


def test_same_seed_same_metrics(tree, tmp_path, monkeypatch):
    monkeypatch.setitem(decobench.tasks.TASKS.registered, "vit-imagenet", VitImageNet)
    runs = [read_metrics(_run(tree, tmp_path / name, "--method", "d-sgd", *seed))
            for name, seed in (("a", []), ("b", []), ("c", ["--seed", "1"]))]
    losses = [[r["loss"] for r in rows] for rows in runs]
    assert losses[0] == losses[1] and losses[0] != losses[2]


def test_cli_rejects_missing_data_root_before_training(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(decobench.tasks.TASKS.registered, "vit-imagenet", VitImageNet)
    assert main(["run", "--task", "vit-imagenet", "--method", "d-sgd", "--no-progress",
                 "--trace", "constant-20mbps-100ms", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "image-net.org" in err[0]
    assert not (tmp_path / "x").exists()


def test_cifar10_standin_tree(cifar10_root, tmp_path, task):
    root = build_standins(cifar10_root, tmp_path / "standin", limit=30).imagenet
    assert sorted(p.name for p in (root / "train").iterdir())[:2] == [
        "cifar10-standin-0-airplane", "cifar10-standin-1-automobile"]
    data = task.load_data(root, False, task.profiles["cpu"])
    assert "STAND-IN" in data.source and "not ImageNet" in data.source
    assert data.num_train == 30 and len(data.val) == 30 and data.num_classes == 10
    inputs, _ = data.train_batch(torch.tensor([[0, 1]]))
    assert inputs.shape == (1, 2, 3, 32, 32)
    (r_mean, g_mean, _), (r_std, g_std, _) = IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
    grey_as_red = inputs[..., 1, :, :] * g_std / r_std + (g_mean - r_mean) / r_std
    assert not torch.allclose(inputs[..., 0, :, :], grey_as_red, atol=1e-2)  # colour images


# --- --init pretrained (timm.create_model is faked: no download, no weights) -------------

def _fake_timm(monkeypatch, fail: Exception | None = None) -> list:
    """Record every timm.create_model call; return a small ViT at 224 pixels (or raise
    ``fail`` for pretrained=True, as an offline download does)."""
    import timm

    real, calls = timm.create_model, []

    def fake(name, pretrained=False, **kwargs):
        calls.append((name, pretrained, kwargs))
        if pretrained and fail is not None:
            raise fail
        return real("vit_tiny_patch16_224", pretrained=False, num_classes=kwargs["num_classes"],
                    img_size=224, patch_size=32, embed_dim=32, depth=1, num_heads=2)

    monkeypatch.setattr(timm, "create_model", fake)
    return calls


def test_pretrained_loads_timm_in21k_weights_with_the_tasks_head(tree, task, monkeypatch):
    from decobench.tasks.vit_imagenet import NO_DROPOUT

    calls = _fake_timm(monkeypatch)
    paper = task.profiles["paper"]
    assert "augreg_in21k" in task.pretrained_weights(paper)
    assert task.pretrained_weights(task.profiles["cpu"]) is None
    task.select_init("pretrained", paper)
    data = task.load_data(tree, False, paper)
    model = build_seeded_model(task, paper, 0)
    assert calls == [("vit_base_patch16_224.augreg_in21k", True, {"num_classes": 3, **NO_DROPOUT})]
    assert model.head.out_features == 3 and all(not b.attn.fused_attn for b in model.blocks)
    # inputs normalised as the AugReg weights were trained: mean = std = 0.5 per channel
    inputs, _ = data.train_batch(torch.tensor([[0]]))
    expected = [(c / 255 - 0.5) / 0.5 for c in SOLID]
    assert torch.allclose(inputs[0, 0].mean(dim=(1, 2)), torch.tensor(expected), atol=0.02)
    # a fresh task is scratch: pretrained=False, ImageNet's mean and std
    fresh = VitImageNet()
    build_seeded_model(fresh, paper, 0)
    assert calls[-1][:2] == ("vit_base_patch16_224", False)
    scratch_inputs, _ = fresh.load_data(tree, False, paper).train_batch(torch.tensor([[0]]))
    assert not torch.allclose(scratch_inputs, inputs, atol=0.1)


def test_pretrained_run_end_to_end_records_init(tree, tmp_path, monkeypatch):
    monkeypatch.setitem(decobench.tasks.TASKS.registered, "vit-imagenet", VitImageNet)
    calls = _fake_timm(monkeypatch)
    out = tmp_path / "pretrained"
    assert main(["run", "--task", "vit-imagenet", "--profile", "paper", "--init", "pretrained",
                 "--method", "d-sgd", "--workers", "2", "--batch-size", "1", "--max-iters", "2",
                 "--eval-every", "2", "--no-progress", "--trace", "constant-20mbps-100ms",
                 "--data-root", str(tree), "--out", str(out)]) == 0
    assert [c[0] for c in calls if c[1]] == ["vit_base_patch16_224.augreg_in21k"]
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["init"] == "pretrained" and read_summary(out)["status"] == "finished"


def test_pretrained_download_failure_is_one_line(tree, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(decobench.tasks.TASKS.registered, "vit-imagenet", VitImageNet)
    _fake_timm(monkeypatch, OSError("We couldn't connect to 'https://huggingface.co'\nmore"))
    assert main(["run", "--task", "vit-imagenet", "--profile", "paper", "--init", "pretrained",
                 "--method", "d-sgd", "--workers", "2", "--batch-size", "1", "--max-iters", "2",
                 "--no-progress", "--trace", "constant-20mbps-100ms", "--data-root", str(tree),
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "could not load timm vit_base_patch16_224.augreg_in21k" in err[0]
    assert "OSError: We couldn't connect" in err[0] and "HF_HOME" in err[0]


def test_pretrained_with_the_cpu_profile_is_rejected_before_training(tree, tmp_path,
                                                                     monkeypatch, capsys):
    monkeypatch.setitem(decobench.tasks.TASKS.registered, "vit-imagenet", VitImageNet)
    calls = _fake_timm(monkeypatch)
    assert main(["run", "--task", "vit-imagenet", "--profile", "cpu", "--init", "pretrained",
                 "--method", "d-sgd", "--no-progress", "--trace", "constant-20mbps-100ms",
                 "--data-root", str(tree), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "profile 'cpu' of task vit-imagenet has no published weights" in err[0]
    assert "profiles with pretrained weights: paper" in err[0]
    assert not (tmp_path / "x").exists() and calls == []
