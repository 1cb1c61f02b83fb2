"""The offline ImageNet stand-in (benchmark/tasks/standins.py): built from the slice of the
real CIFAR-10, read by vit-imagenet's ImageFolder pipeline with the CIFAR pixels unchanged,
byte-identical on every build, labelled as a stand-in in data_source."""

import io
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

import decobench.tasks
from decobench.cli.main import main
from decobench.errors import DecobenchError
from decobench.runs.rundir import read_summary
from decobench.tasks.base import STANDIN_MARKER, standin_label
from decobench.tasks.cnn_cifar10 import LocalCIFAR10
from decobench.tasks.standins import CLASS_NAMES, build_standins, png_bytes
from decobench.tasks.vit_imagenet import VitImageNet

LIMIT = 40      # the first 40 images of each split hold all 10 classes in both splits


@pytest.fixture(scope="module")
def built(cifar10_root, tmp_path_factory) -> Path:
    return build_standins(cifar10_root, tmp_path_factory.mktemp("s") / "standins", LIMIT).out


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_layout_and_labels(built):
    assert sorted(p.name for p in built.iterdir()) == ["README.txt", "imagenet"]
    label = standin_label(built / "imagenet")
    assert label.startswith(f"STAND-IN: built from CIFAR-10 (cifar10-mini, {LIMIT} train / "
                            f"{LIMIT} test images), not ImageNet")
    assert "not comparable" in label
    assert (built / "README.txt").read_text().startswith("STAND-IN data set built from "
                                                         "CIFAR-10, NOT ImageNet")
    assert standin_label(built / "nothing-here") is None
    assert CLASS_NAMES[0] == "cifar10-standin-0-airplane"
    assert CLASS_NAMES[9] == "cifar10-standin-9-truck"
    assert sorted(p.name for p in (built / "imagenet" / "train").iterdir()) == list(CLASS_NAMES)


def test_imagenet_standin_holds_the_cifar_pixels_and_is_read_by_the_vit_loader(built,
                                                                               cifar10_root):
    task = VitImageNet()
    task.check_data(built / "imagenet", False)
    data = task.load_data(built / "imagenet", False, task.profile("cpu"))
    assert data.num_train == LIMIT and len(data.val) == LIMIT
    assert data.train.classes == list(CLASS_NAMES) and task.num_classes == 10
    assert "not ImageNet" in data.source and data.source.startswith(str(built / "imagenet"))
    inputs, _ = data.train_batch(torch.tensor([[0, 1]]))
    assert inputs.shape == (1, 2, 3, 32, 32)
    assert task.data_kind(data) == "stand-in"
    # each PNG holds exactly the CIFAR-10 image (lossless, RGB): natural images, in colour
    test = LocalCIFAR10(str(cifar10_root), train=False)
    for path, label in data.val.samples[:5]:
        index = int(Path(path).stem.split("_")[1])
        with Image.open(path) as png:
            assert png.mode == "RGB" and png.size == (32, 32)
            pixels = np.array(png)
        assert np.array_equal(pixels, test.data[index]) and label == test.targets[index]
    assert not np.array_equal(test.data[0][..., 0], test.data[0][..., 2])   # not grey


def test_png_encoder_round_trips_through_pil():
    rng = np.random.default_rng(0)
    for shape in ((1, 1, 3), (32, 32, 3), (200, 150, 3)):   # 90,200 raw bytes: 2 blocks
        image = rng.integers(0, 256, shape, dtype=np.uint8)
        data = png_bytes(image)
        with Image.open(io.BytesIO(data)) as png:
            png.load()
            assert png.mode == "RGB" and np.array_equal(np.asarray(png), image)
    assert len(png_bytes(np.zeros((32, 32, 3), np.uint8))) == 3172
    with pytest.raises(ValueError, match="uint8"):
        png_bytes(np.zeros((4, 4), np.uint8))


def test_two_builds_are_byte_identical(cifar10_root, tmp_path, built):
    again = build_standins(cifar10_root, tmp_path / "again", LIMIT).out
    assert _tree(again) == _tree(built)
    smaller = build_standins(cifar10_root, tmp_path / "smaller", 20).out
    assert _tree(smaller) != _tree(built)


def test_existing_output_needs_overwrite_and_must_be_a_standin(cifar10_root, tmp_path):
    out = build_standins(cifar10_root, tmp_path / "s", 20).out
    with pytest.raises(DecobenchError, match="already exists and is not empty"):
        build_standins(cifar10_root, out, 20)
    build_standins(cifar10_root, out, 20, overwrite=True)
    assert standin_label(out / "imagenet") is not None
    assert not (tmp_path / "s.partial").exists()
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(DecobenchError, match="refusing to replace"):
        build_standins(cifar10_root, other, 20, overwrite=True)
    assert (other / "notes.txt").read_text() == "keep me"
    with pytest.raises(DecobenchError, match="--limit 0"):
        build_standins(cifar10_root, tmp_path / "z", 0)


def test_cli_builds_and_reports_bad_input_in_one_line(cifar10_root, tmp_path, capsys):
    assert main(["data", "standins", "--out", str(tmp_path / "cli"), "--cifar10-root",
                 str(cifar10_root), "--limit", "20"]) == 0
    assert "STAND-IN" in capsys.readouterr().out
    assert standin_label(tmp_path / "cli" / "imagenet") is not None
    assert main(["data", "standins", "--out", str(tmp_path / "x"), "--cifar10-root",
                 str(tmp_path / "no-cifar")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CIFAR-10 python version" in err[0]
    assert err[0].startswith("decobench: ") and "--download" in err[0]
    assert not (tmp_path / "x").exists()


def test_a_run_on_the_standin_is_labelled_in_config_yaml(built, tmp_path, monkeypatch):
    monkeypatch.setitem(decobench.tasks.TASKS.registered, "vit-imagenet", VitImageNet)
    out = tmp_path / "run"
    assert main(["run", "--task", "vit-imagenet", "--profile", "cpu", "--method", "d-sgd",
                 "--workers", "2", "--batch-size", "4", "--max-iters", "2", "--eval-every", "2",
                 "--trace", "constant-20mbps-100ms", "--data-root", str(built / "imagenet"),
                 "--out", str(out), "--no-progress"]) == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert "STAND-IN: built from CIFAR-10" in config["data_source"]
    assert "not ImageNet" in config["data_source"] and config["data_kind"] == "stand-in"
    assert read_summary(out)["status"] == "finished"
    assert (built / "imagenet" / STANDIN_MARKER).is_file()


def test_cifar10_runs_on_the_real_slice_and_say_so(cifar10_root, tmp_path):
    """CNN@CIFAR-10 reads the slice of the real CIFAR-10 (no stand-in): 4,660 training
    images of 50,000, so its data are a 'slice', never a 'stand-in'."""
    out = tmp_path / "run"
    assert main(["run", "--task", "cnn-cifar10", "--profile", "cpu", "--method", "d-sgd",
                 "--workers", "2", "--batch-size", "4", "--max-iters", "2", "--eval-every", "2",
                 "--trace", "constant-20mbps-100ms", "--data-root", str(cifar10_root),
                 "--out", str(out), "--no-progress"]) == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["data_kind"] == "slice" and config["train_examples"] == 4660
    assert "STAND-IN" not in config["data_source"]
