"""The offline stand-ins (benchmark/tasks/standins.py): built from the Fashion-MNIST slice,
read by the real loaders (torchvision's CIFAR10 for cnn-cifar10, the ImageFolder pipeline
of vit-imagenet), byte-identical on every build, labelled as stand-ins in data_source."""

import io
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image
from torchvision.datasets import FashionMNIST

import decobench.tasks
from decobench.cli import main
from decobench.errors import DecobenchError
from decobench.rundir import read_summary
from decobench.tasks.base import STANDIN_MARKER, standin_label
from decobench.tasks.cnn_cifar10 import CnnCifar10, LocalCIFAR10
from decobench.tasks.standins import CLASS_NAMES, build_standins, png_bytes, rgb32
from decobench.tasks.standins import main as standins_main
from decobench.tasks.vit_imagenet import VitImageNet

LIMIT = 40      # the first 40 images of each split hold all 10 classes in both splits


@pytest.fixture(scope="module")
def built(fmnist_root, tmp_path_factory) -> Path:
    return build_standins(fmnist_root, tmp_path_factory.mktemp("s") / "standins", LIMIT).out


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_layout_and_labels(built):
    assert sorted(p.name for p in built.iterdir()) == ["README.txt", "cifar10", "imagenet"]
    assert sorted(p.name for p in (built / "cifar10" / "cifar-10-batches-py").iterdir()) == [
        "batches.meta", "data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4",
        "data_batch_5", "test_batch"]
    for root, name in ((built / "cifar10", "CIFAR-10"), (built / "imagenet", "ImageNet")):
        label = standin_label(root)
        assert label.startswith("STAND-IN: built from Fashion-MNIST (fashion-mnist-mini, "
                                f"{LIMIT} train / {LIMIT} test images), not {name}")
        assert "not comparable" in label
    assert (built / "README.txt").read_text().startswith("STAND-IN data sets built from "
                                                         "Fashion-MNIST, NOT CIFAR-10")
    assert standin_label(built / "nothing-here") is None
    assert CLASS_NAMES[0] == "fmnist-standin-0-t-shirt-top"
    assert CLASS_NAMES[9] == "fmnist-standin-9-ankle-boot"


def test_cifar_standin_is_read_by_torchvision_with_the_fmnist_pixels(built, fmnist_root):
    source = FashionMNIST(str(fmnist_root), train=True)
    # torchvision's CIFAR10 code, MD5 sums off (they are the originals')
    data = LocalCIFAR10(str(built / "cifar10"), train=True)
    assert data.classes == list(CLASS_NAMES) and len(data) == LIMIT
    assert data.targets == source.targets[:LIMIT].tolist()
    image = torch.from_numpy(data.data[7])                  # [32, 32, 3]
    assert torch.equal(image[2:30, 2:30, 1], source.data[7])          # the 28x28 image
    assert int(image[:2].sum()) == 0 and int(image[:, 30:].sum()) == 0   # black border
    assert torch.equal(image[..., 0], image[..., 2])                  # grey in R, G, B
    with open(built / "cifar10" / "cifar-10-batches-py" / "batches.meta", "rb") as f:
        meta = pickle.load(f, encoding="bytes")
    assert meta[b"label_names"][3] == b"fmnist-standin-3-dress"


def test_cifar_standin_loads_in_the_task_with_a_stand_in_source(built):
    task = CnnCifar10()
    task.check_data(built / "cifar10", False)
    data = task.load_data(built / "cifar10", False, task.profile("cpu"))
    assert data.num_train == LIMIT and len(data.test_targets) == LIMIT
    assert data.source.startswith(f"{built / 'cifar10'}; STAND-IN: built from Fashion-MNIST")


def test_imagenet_standin_is_read_by_the_vit_loader(built, fmnist_root):
    task = VitImageNet()
    task.check_data(built / "imagenet", False)
    data = task.load_data(built / "imagenet", False, task.profile("cpu"))
    assert data.num_train == LIMIT and len(data.val) == LIMIT
    assert data.train.classes == list(CLASS_NAMES) and task.num_classes == 10
    assert "not ImageNet" in data.source and data.source.startswith(str(built / "imagenet"))
    inputs, targets = data.train_batch(torch.tensor([[0, 1]]))
    assert inputs.shape == (1, 2, 3, 32, 32)
    # the PNG holds exactly the CIFAR stand-in's pixels (lossless), RGB
    test = FashionMNIST(str(fmnist_root), train=False)
    path, label = data.val.samples[0]
    index = int(Path(path).stem.split("_")[1])
    with Image.open(path) as png:
        assert png.mode == "RGB" and png.size == (32, 32)
        pixels = torch.from_numpy(np.array(png)).permute(2, 0, 1)
    assert torch.equal(pixels, rgb32(test.data[index: index + 1])[0])
    assert label == int(test.targets[index])


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


def test_two_builds_are_byte_identical(fmnist_root, tmp_path, built):
    again = build_standins(fmnist_root, tmp_path / "again", LIMIT).out
    assert _tree(again) == _tree(built)
    smaller = build_standins(fmnist_root, tmp_path / "smaller", 20).out
    assert _tree(smaller) != _tree(built)


def test_existing_output_needs_overwrite_and_must_be_a_standin(fmnist_root, tmp_path):
    out = build_standins(fmnist_root, tmp_path / "s", 20).out
    with pytest.raises(DecobenchError, match="already exists and is not empty"):
        build_standins(fmnist_root, out, 20)
    build_standins(fmnist_root, out, 20, overwrite=True)
    assert standin_label(out / "imagenet") is not None
    assert not (tmp_path / "s.partial").exists()
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(DecobenchError, match="refusing to replace"):
        build_standins(fmnist_root, other, 20, overwrite=True)
    assert (other / "notes.txt").read_text() == "keep me"
    with pytest.raises(DecobenchError, match="--limit 0"):
        build_standins(fmnist_root, tmp_path / "z", 0)


def test_cli_builds_and_reports_bad_input_in_one_line(fmnist_root, tmp_path, capsys):
    assert main(["data", "standins", "--out", str(tmp_path / "cli"), "--fmnist-root",
                 str(fmnist_root), "--limit", "20"]) == 0
    assert "STAND-IN" in capsys.readouterr().out
    assert standin_label(tmp_path / "cli" / "cifar10") is not None
    assert main(["data", "standins", "--out", str(tmp_path / "x"), "--fmnist-root",
                 str(tmp_path / "no-fmnist")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no Fashion-MNIST" in err[0] and err[0].startswith("decobench: ")
    assert not (tmp_path / "x").exists()
    assert standins_main(["--out", str(tmp_path / "m"), "--fmnist-root", str(fmnist_root),
                          "--limit", "20"]) == 0
    assert _tree(tmp_path / "m") == _tree(tmp_path / "cli")


def test_a_run_on_the_standin_is_labelled_in_config_yaml(built, tmp_path, monkeypatch):
    monkeypatch.setitem(decobench.tasks.TASKS.registered, "cnn-cifar10", CnnCifar10)
    out = tmp_path / "run"
    assert main(["run", "--task", "cnn-cifar10", "--profile", "cpu", "--method", "d-sgd",
                 "--workers", "2", "--batch-size", "4", "--max-iters", "2", "--eval-every", "2",
                 "--trace", "constant-20mbps-100ms", "--data-root", str(built / "cifar10"),
                 "--out", str(out), "--no-progress"]) == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert "STAND-IN: built from Fashion-MNIST" in config["data_source"]
    assert "not CIFAR-10" in config["data_source"] and config["init"] == "scratch"
    assert read_summary(out)["status"] == "finished"
    assert (built / "cifar10" / STANDIN_MARKER).is_file()
