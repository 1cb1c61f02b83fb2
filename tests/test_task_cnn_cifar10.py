"""CNN@CIFAR-10: a tiny CIFAR-10 written in the real python-pickle format loads through
torchvision's loader with the right shapes, values and normalisation; missing or malformed
files are one clear error before training; every method runs end to end on it."""

import pickle
from pathlib import Path

import pytest
import torch
import yaml

import decobench.tasks
from decobench.cli.main import main
from decobench.errors import DecobenchError
from decobench.methods import method_specs
from decobench.runs.rundir import read_metrics, read_summary
from decobench.tasks.base import parameter_count
from decobench.tasks.cnn_cifar10 import CIFAR10_MEAN, CIFAR10_STD, CnnCifar10, write_cifar_format

N_TRAIN, N_TEST = 40, 20


def _tiny(root: Path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random uint8 images, each test image's label also in its pixel (0, 0, 0) (= 20·label)."""
    g = torch.Generator().manual_seed(0)
    train = torch.randint(0, 256, (N_TRAIN, 3, 32, 32), dtype=torch.uint8, generator=g)
    test = torch.randint(0, 256, (N_TEST, 3, 32, 32), dtype=torch.uint8, generator=g)
    train_labels = torch.arange(N_TRAIN) % 10
    test_labels = torch.randint(0, 10, (N_TEST,), generator=g)
    test[:, 0, 0, 0] = (20 * test_labels).to(torch.uint8)
    train[9, 1, 5, 7] = 200                 # the hand-checked pixel: image 9, green, row 5, col 7
    write_cifar_format(root, train, train_labels, test, test_labels)
    return train, train_labels, test, test_labels


@pytest.fixture
def cifar_root(tmp_path: Path) -> Path:
    _tiny(tmp_path / "cifar")
    return tmp_path / "cifar"


def test_written_files_follow_the_documented_format(tmp_path):
    train, labels, _, _ = _tiny(tmp_path)
    folder = tmp_path / "cifar-10-batches-py"
    assert sorted(p.name for p in folder.iterdir()) == [
        "batches.meta", "data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4",
        "data_batch_5", "test_batch"]
    # the recipe of cs.toronto.edu/~kriz/cifar.html: Python 2 str keys read as bytes
    with open(folder / "data_batch_2", "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    assert batch[b"data"].shape == (8, 3072) and str(batch[b"data"].dtype) == "uint8"
    assert batch[b"labels"] == [8, 9, 0, 1, 2, 3, 4, 5]          # images 8..15
    # row 1 of batch 2 is image 9; 1024 red values, then green, each row-major
    assert batch[b"data"][1, 1024 + 5 * 32 + 7] == 200
    assert (batch[b"data"][1] == train[9].flatten().numpy()).all()
    # the pixels are one raw byte string (a Python 2 str), as in the originals
    assert train[8:16].numpy().tobytes() in (folder / "data_batch_2").read_bytes()
    with open(folder / "batches.meta", "rb") as f:
        meta = pickle.load(f, encoding="bytes")
    assert meta[b"label_names"][0] == b"airplane" and len(meta[b"label_names"]) == 10
    assert meta[b"num_vis"] == 3072
    assert labels.tolist() == [i % 10 for i in range(N_TRAIN)]


def test_load_shapes_values_and_normalisation(tmp_path):
    train, train_labels, test, test_labels = _tiny(tmp_path)
    task = CnnCifar10()
    task.check_data(tmp_path, download=False)
    data = task.load_data(tmp_path, False, task.profile("paper"))
    assert data.num_train == N_TRAIN and data.source == str(tmp_path)
    assert data.train_images.shape == (N_TRAIN, 3, 32, 32) and data.train_images.dtype == torch.uint8
    assert torch.equal(data.train_images, train) and torch.equal(data.train_targets, train_labels)
    assert torch.equal(data.test_images, test) and torch.equal(data.test_targets, test_labels)
    inputs, targets = data.train_batch(torch.tensor([[9, 0], [1, 2]]))
    assert inputs.shape == (2, 2, 3, 32, 32) and inputs.dtype == torch.float32
    assert targets.tolist() == [[9, 0], [1, 2]]
    # hand check: green channel value 200 → (200/255 − 0.4822) / 0.2435 = 1.2407
    assert inputs[0, 0, 1, 5, 7].item() == pytest.approx((200 / 255 - 0.4822) / 0.2435)
    assert inputs[0, 0, 1, 5, 7].item() == pytest.approx(1.2407, abs=1e-4)
    expect = (train[1].float() / 255 - torch.tensor(CIFAR10_MEAN).view(3, 1, 1)) \
        / torch.tensor(CIFAR10_STD).view(3, 1, 1)
    assert torch.allclose(inputs[1, 0], expect)


def test_evaluate_sees_the_normalised_test_images(cifar_root):
    task = CnnCifar10()
    data = task.load_data(cifar_root, False, task.profile("paper"))

    def oracle(images: torch.Tensor) -> torch.Tensor:     # reads the label back from pixel 0
        raw = images[:, 0, 0, 0] * CIFAR10_STD[0] + CIFAR10_MEAN[0]
        return torch.nn.functional.one_hot((raw * 255 / 20).round().long(), 10).float()

    assert task.evaluate(oracle, data) == 1.0
    always_zero = task.evaluate(lambda x: torch.eye(10)[[0] * len(x)], data)
    assert always_zero == pytest.approx(float((data.test_targets == 0).float().mean()))


@pytest.mark.parametrize("name", ["data_batch_3", "test_batch", "batches.meta"])
def test_missing_file_is_named(cifar_root, name):
    (cifar_root / "cifar-10-batches-py" / name).unlink()
    with pytest.raises(DecobenchError, match=f"missing {name}.*cifar-10-python.tar.gz"):
        CnnCifar10().check_data(cifar_root, download=False)


def test_data_root_without_cifar_is_one_line_before_training(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(decobench.tasks.TASKS.registered, "cnn-cifar10", CnnCifar10)
    out = tmp_path / "run"
    assert main(["run", "--task", "cnn-cifar10", "--method", "d-sgd", "--trace",
                 "constant-20mbps-100ms", "--data-root", str(tmp_path), "--out", str(out),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CIFAR-10 python version" in err[0]
    assert "missing data_batch_1, data_batch_2" in err[0]
    assert not out.exists()


def test_malformed_files_are_clear_errors(cifar_root):
    task = CnnCifar10()
    folder = cifar_root / "cifar-10-batches-py"
    (folder / "data_batch_4").write_bytes(b"\x80\x02}(U\x04data")        # truncated
    task.check_data(cifar_root, download=False)       # batches are parsed once, when loaded
    with pytest.raises(DecobenchError, match="not in the python pickle format"):
        task.load_data(cifar_root, False, task.profile("paper"))
    (folder / "batches.meta").write_text("airplane\nautomobile\n")   # the binary version's
    with pytest.raises(DecobenchError, match="batches.meta is not a python pickle"):
        task.check_data(cifar_root, download=False)


def test_labels_outside_the_ten_classes_are_rejected(tmp_path):
    images = torch.zeros(5, 3, 32, 32, dtype=torch.uint8)
    write_cifar_format(tmp_path, images, torch.tensor([0, 1, 2, 3, 10]), images[:2],
                       torch.tensor([0, 1]))
    with pytest.raises(DecobenchError, match="labels outside 0..9"):
        CnnCifar10().load_data(tmp_path, False, CnnCifar10.profiles["cpu"])


def test_parameter_counts_of_both_profiles():
    conv1 = 3 * 32 * 5 * 5 + 32                 # 2,432
    conv2 = 32 * 64 * 5 * 5 + 64                # 51,264
    fc1 = 64 * 8 * 8 * 128 + 128                # 524,416 (32 → 16 → 8 after two 2×2 pools)
    fc2 = 128 * 10 + 10                         # 1,290
    task = CnnCifar10()
    assert set(task.profiles) == {"paper", "cpu"}
    for profile in task.profiles.values():
        assert parameter_count(task, profile) == conv1 + conv2 + fc1 + fc2 == 579_402


def test_targets_are_accuracies():
    task = CnnCifar10()
    task.validate_target(0.6)
    with pytest.raises(DecobenchError, match="not an accuracy"):
        task.validate_target(60)


def _run(out: Path, root: Path, *extra: str) -> Path:
    assert main(["run", "--task", "cnn-cifar10", "--workers", "2", "--batch-size", "2",
                 "--max-iters", "3", "--eval-every", "3", "--no-progress", "--trace",
                 "constant-20mbps-100ms", "--data-root", str(root), "--out", str(out),
                 *extra]) == 0
    return out


@pytest.mark.parametrize("method", sorted(method_specs()))
def test_every_method_runs_end_to_end(tmp_path, cifar_root, monkeypatch, method):
    monkeypatch.setitem(decobench.tasks.TASKS.registered, "cnn-cifar10", CnnCifar10)
    extra = ["--deco-interval", "3"] if method == "deco-sgd" else []
    out = _run(tmp_path / method, cifar_root, "--method", method, *extra)
    summary = read_summary(out)
    assert summary["status"] == "finished" and summary["iterations"] == 3
    assert summary["parameters"] == 579_402 and summary["metric_name"] == "accuracy"
    assert 0.0 <= summary["final_metric"] <= 1.0
    rows = read_metrics(out)
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in rows)


def test_cpu_profile_and_same_seed_same_run(tmp_path, cifar_root, monkeypatch):
    monkeypatch.setitem(decobench.tasks.TASKS.registered, "cnn-cifar10", CnnCifar10)
    out = _run(tmp_path / "a", cifar_root, "--method", "d-sgd", "--profile", "cpu")
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["compute_time_s"] == CnnCifar10.profiles["cpu"].compute_time_s
    assert config["batch_size"] == 2 and config["lr"] == 0.03
    a = read_metrics(out)
    b = read_metrics(_run(tmp_path / "b", cifar_root, "--method", "d-sgd", "--profile", "cpu"))
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
    assert a[0]["sim_time_s"] == pytest.approx(config["compute_time_s"])   # end_0 = T
    assert a[-1]["metric"] == b[-1]["metric"]
