"""CNN@FashionMNIST: the paper's small CNN (two convolutional and two fully connected
layers) on Fashion-MNIST, top-1 accuracy on the test split."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from decobench.errors import DecobenchError
from decobench.tasks.base import ClassificationTask, TaskData, TaskProfile, TensorData
from decobench.tasks.idx import idx_problem

FMNIST_MEAN, FMNIST_STD = 0.2860, 0.3530
RAW_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
             "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


class PaperCNN(nn.Module):
    """conv5x5(32) → ReLU → maxpool2 → conv5x5(64) → ReLU → maxpool2 → FC(128) → ReLU → FC(classes).

    The paper names "two convolutional and two fully connected layers" without sizes; these
    are the classic LeNet-style sizes (this project's choice). No dropout and no BatchNorm,
    so every worker's forward pass is a pure function of (x, batch).
    """

    def __init__(self, in_channels: int = 1, image_size: int = 28, classes: int = 10,
                 hidden: int = 128) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, kernel_size=5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=5, padding=2)
        self.fc1 = nn.Linear(64 * (image_size // 4) ** 2, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def classification_accuracy(forward: Callable[[Tensor], Tensor], inputs: Tensor,
                            targets: Tensor, chunk: int = 1000) -> float:
    """Top-1 accuracy of ``forward`` over ``inputs`` in chunks."""
    correct = 0
    for start in range(0, len(inputs), chunk):
        logits = forward(inputs[start: start + chunk])
        expected = targets[start: start + chunk].to(logits.device)
        correct += int((logits.argmax(dim=1) == expected).sum())
    return correct / len(inputs)


class CnnFashionMnist(ClassificationTask):
    name = "cnn-fmnist"
    full_train_examples = 60_000   # Fashion-MNIST's training split
    description = "paper CNN (2 conv + 2 FC, 455k parameters) on Fashion-MNIST, top-1 accuracy"
    profiles = {
        "paper": TaskProfile(
            name="paper", batch_size=32, lr=0.03, eval_every=20, max_iters=5000,
            compute_time_s=0.2,
            compute_time_source=(
                "this project's regime choice: T = 0.2 s puts the CNN where the paper's large "
                "models sit on GPUs, b/T ≈ 1 at 200 ms latency and transmission/compute "
                "32d/(a·T) ≈ 3.6 at 20 Mbit/s. The CNN itself takes 16 ms per batch of 32 on a "
                "2-core x86-64 CPU (torch 2.15, measured 2026-11-21) and a few ms on a GPU; "
                "use --compute-time-s or --compute-time measured to simulate those instead"),
        ),
        "cpu": TaskProfile(
            name="cpu", batch_size=32, lr=0.03, eval_every=20, max_iters=5000,
            compute_time_s=0.016,
            compute_time_source=(
                "measured: median wall time of one forward/backward of this CNN on a batch of "
                "32 on a quiet 2-core x86-64 CPU, torch 2.15 (2026-11-21). The CNN is already "
                "CPU-sized, so the model is the paper profile's; use --regime paper-wan to put "
                "it in the paper profile's network regime"),
        ),
    }

    def check_data(self, data_root: Path | None, download: bool,
                   variant: str | None = None) -> None:
        if data_root is None or download:
            return
        raw = Path(data_root) / "FashionMNIST" / "raw"
        missing = [f for f in RAW_FILES if not (raw / f).exists()]
        if missing:
            raise DecobenchError(
                f"--data-root {data_root}: no Fashion-MNIST at {raw} (missing {', '.join(missing)}); "
                "point --data-root at a folder holding FashionMNIST/raw/*-ubyte "
                "(e.g. ../shared/data/fashion-mnist-mini), or omit it to download the data set")
        for name in RAW_FILES:
            problem = idx_problem(raw / name, 3 if "images" in name else 1)
            if problem:
                raise DecobenchError(f"--data-root {data_root}: {raw / name} {problem}; "
                                     "replace it with the original file (or omit --data-root "
                                     "to download the data set)")

    def load_data(self, data_root: Path | None, download: bool, profile: TaskProfile,
                  variant: str | None = None) -> TaskData:
        root = Path(data_root) if data_root is not None else default_data_root()
        (train_x, train_y), (test_x, test_y) = (_read_split(root, train, download)
                                                for train in (True, False))

        def normalise(images: Tensor) -> Tensor:
            return ((images.float() / 255.0 - FMNIST_MEAN) / FMNIST_STD).unsqueeze(1)

        return TensorData(train_inputs=normalise(train_x), train_targets=train_y.long(),
                          test_inputs=normalise(test_x), test_targets=test_y.long(),
                          source=str(root))

    def build_model(self, profile: TaskProfile) -> nn.Module:
        return PaperCNN()

    @torch.no_grad()
    def evaluate(self, forward: Callable[[Tensor], Tensor], data: TaskData) -> float:
        assert isinstance(data, TensorData)
        return classification_accuracy(forward, data.test_inputs, data.test_targets)


def _read_split(root: Path, train: bool, download: bool) -> tuple[Tensor, Tensor]:
    """A split's images [N, 28, 28] (uint8) and labels [N]: read from its IDX files under
    ``root/FashionMNIST/raw`` where they are there (the same tensors torchvision's
    ``FashionMNIST`` gives, without importing torchvision: about 1.4-2 s of every process's
    start, :mod:`decobench.tasks.idx`), else through torchvision, which downloads them."""
    from decobench.tasks.idx import read_idx

    stem = "train" if train else "t10k"
    raw = root / "FashionMNIST" / "raw"
    images, labels = raw / f"{stem}-images-idx3-ubyte", raw / f"{stem}-labels-idx1-ubyte"
    if images.is_file() and labels.is_file():
        return (torch.from_numpy(read_idx(images).copy()),
                torch.from_numpy(read_idx(labels).astype("int64")))
    from torchvision.datasets import FashionMNIST

    split = FashionMNIST(str(root), train=train, download=download)
    return split.data, split.targets


def default_data_root() -> Path:
    """Where data sets are downloaded when ``--data-root`` is not given."""
    return Path.home() / ".cache" / "decobench" / "data"
