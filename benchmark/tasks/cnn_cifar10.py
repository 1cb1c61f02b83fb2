"""CNN@CIFAR-10: the paper's small CNN (two convolutional and two fully connected layers,
:class:`~decobench.tasks.cnn_fmnist.PaperCNN`) on 3×32×32 CIFAR-10 images, top-1 accuracy
on the 10,000-image test split.

Data: the "CIFAR-10 python version" (https://www.cs.toronto.edu/~kriz/cifar.html), read by
``torchvision.datasets.CIFAR10``. Without ``--data-root`` torchvision downloads it to
:func:`default_data_root` and verifies its MD5 sums; with ``--data-root DIR`` the batches
in ``DIR/cifar-10-batches-py/`` are read by the same torchvision loader with the MD5 check
off (:class:`LocalCIFAR10`), so a local copy, a subset or a test's small files in the same
format load too. Images stay ``uint8`` in memory (a quarter of float32's 600 MB for the
training split) and are normalised per batch.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn
from torchvision.datasets import CIFAR10

from decobench.errors import DecobenchError
from decobench.tasks.base import ClassificationTask, TaskData, TaskProfile, standin_label
from decobench.tasks.cnn_fmnist import PaperCNN, classification_accuracy, default_data_root

BASE_FOLDER = CIFAR10.base_folder                     # "cifar-10-batches-py"
TRAIN_FILES = tuple(name for name, _ in CIFAR10.train_list)   # data_batch_1 .. data_batch_5
TEST_FILES = tuple(name for name, _ in CIFAR10.test_list)     # test_batch
META_FILE = CIFAR10.meta["filename"]                  # batches.meta
DATA_FILES = (*TRAIN_FILES, *TEST_FILES, META_FILE)
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
           "truck")
"""The label names of batches.meta, in label order (cs.toronto.edu/~kriz/cifar.html)."""
PARSE_ERRORS = (pickle.UnpicklingError, EOFError, KeyError, IndexError, ValueError, TypeError,
                AttributeError, ImportError)
"""What unpickling a file that is not a CIFAR-10 batch raises (as torchvision reads it)."""

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
"""Per-channel (R, G, B) mean and standard deviation of all pixels of the 50,000 training
images scaled to [0, 1], to 4 digits: 0.49140, 0.48216, 0.44653 and 0.24703, 0.24349,
0.26159 as computed in facebookarchive/fb.resnet.torch issue #180 and
akamaster/pytorch_resnet_cifar10 issue #9 (fb.resnet.torch's datasets/cifar10.lua rounds
them on the 0-255 scale: 125.3, 123.0, 113.9 and 63.0, 62.1, 66.7). The std 0.2023, 0.1994,
0.2010 often copied from kuangliu/pytorch-cifar is not the pixel std (its issue #19)."""


class LocalCIFAR10(CIFAR10):
    """torchvision's CIFAR-10 loader with the MD5 check off: the files must exist (checked
    by :meth:`CnnCifar10.check_data`) and be in the python pickle format, but may hold any
    number of images (a local subset, or a test's small files). Setting the checksums to
    ``None`` is torchvision's own "existence only" mode of ``check_integrity``; the file
    lists are CIFAR10's, so the layout is exactly the one the download produces."""

    train_list = [[name, None] for name, _ in CIFAR10.train_list]
    test_list = [[name, None] for name, _ in CIFAR10.test_list]
    meta = {**CIFAR10.meta, "md5": None}


def normalise(images: Tensor) -> Tensor:
    """``uint8`` images ``[..., 3, H, W]`` → float32 standardised per channel."""
    mean = torch.tensor(CIFAR10_MEAN).view(3, 1, 1)
    std = torch.tensor(CIFAR10_STD).view(3, 1, 1)
    return (images.float() / 255.0 - mean) / std


@dataclass(frozen=True)
class Cifar10Data(TaskData):
    """CIFAR-10 held as ``uint8`` ``[N, 3, 32, 32]`` images and ``int64`` labels; batches
    are normalised (:func:`normalise`) as they are drawn."""

    train_images: Tensor
    train_targets: Tensor
    test_images: Tensor
    test_targets: Tensor
    source: str

    @property
    def num_train(self) -> int:
        return len(self.train_targets)

    def train_batch(self, indices: Tensor) -> tuple[Tensor, Tensor]:
        return normalise(self.train_images[indices]), self.train_targets[indices]


def split_tensors(dataset: CIFAR10) -> tuple[Tensor, Tensor]:
    """(uint8 images [N, 3, 32, 32], int64 labels [N]) of a loaded torchvision split."""
    images = torch.from_numpy(np.ascontiguousarray(dataset.data)).permute(0, 3, 1, 2)
    labels = torch.as_tensor(dataset.targets, dtype=torch.long)
    if len(images) == 0 or len(labels) != len(images):
        raise DecobenchError(f"CIFAR-10 at {dataset.root} ({'train' if dataset.train else 'test'}"
                             f" split): {len(images)} images, {len(labels)} labels")
    if int(labels.min()) < 0 or int(labels.max()) >= len(CLASSES):
        raise DecobenchError(f"CIFAR-10 at {dataset.root}: labels outside 0..9")
    return images.contiguous(), labels


def _meta_problem(path: Path) -> str | None:
    """What is wrong with ``batches.meta`` (a small pickle, read whole), or None. The large
    batch files are parsed once, by :meth:`CnnCifar10.load_data`."""
    try:
        with open(path, "rb") as f:
            meta = pickle.load(f, encoding="latin1")   # Python 2 pickles, as torchvision
    except PARSE_ERRORS as exc:
        return f"{path.name} is not a python pickle: {type(exc).__name__}"
    names = meta.get(CIFAR10.meta["key"]) if isinstance(meta, dict) else None
    if not isinstance(names, list) or len(names) != len(CLASSES):
        return f"{path.name} has no list of {len(CLASSES)} label_names"
    return None


def _py2_str(value: str | bytes) -> bytes:
    """A Python 2 ``str`` as pickle protocol 2 writes it (SHORT_BINSTRING or BINSTRING)."""
    raw = value.encode("ascii") if isinstance(value, str) else value
    if len(raw) < 256:
        return pickle.SHORT_BINSTRING + bytes([len(raw)]) + raw
    return pickle.BINSTRING + len(raw).to_bytes(4, "little") + raw


def _py2_array(array: np.ndarray) -> bytes:
    """A 2-D ``uint8`` numpy array as numpy under Python 2 pickled it (protocol 2):
    ``_reconstruct(ndarray, (0,), "b")`` then ``__setstate__((1, shape, dtype("u1"), False,
    raw bytes))``, the raw bytes a Python 2 ``str``."""
    def ints(*values: int) -> bytes:
        return b"".join(pickle.dumps(v, protocol=2)[2:-1] for v in values)

    def glob(module: str, name: str) -> bytes:
        return pickle.GLOBAL + f"{module}\n{name}\n".encode()

    return (glob("numpy.core.multiarray", "_reconstruct") + glob("numpy", "ndarray")
            + ints(0) + pickle.TUPLE1 + _py2_str("b") + pickle.TUPLE3 + pickle.REDUCE
            + pickle.MARK + ints(1, *array.shape) + pickle.TUPLE2
            + glob("numpy", "dtype") + _py2_str("u1") + ints(0, 1) + pickle.TUPLE3 + pickle.REDUCE
            + pickle.MARK + ints(3) + _py2_str("|") + pickle.NONE * 3 + ints(-1, -1, 0)
            + pickle.TUPLE + pickle.BUILD
            + pickle.NEWFALSE + _py2_str(np.ascontiguousarray(array).tobytes())
            + pickle.TUPLE + pickle.BUILD)


def _py2_pickle(entry: dict[str, object]) -> bytes:
    """``entry`` pickled as Python 2 wrote the CIFAR batches: a protocol-2 dict whose keys,
    strings and lists of strings are Python 2 ``str`` and whose array is numpy's Python 2
    form; ints and lists of ints are the same in both Pythons."""
    def value(v: object) -> bytes:
        if isinstance(v, str):
            return _py2_str(v)
        if isinstance(v, np.ndarray):
            return _py2_array(v)
        if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
            return pickle.EMPTY_LIST + pickle.MARK + b"".join(map(_py2_str, v)) + pickle.APPENDS
        return pickle.dumps(v, protocol=2)[2:-1]          # without PROTO 2 … STOP

    items = b"".join(_py2_str(k) + value(v) for k, v in entry.items())
    return (pickle.PROTO + b"\x02" + pickle.EMPTY_DICT + pickle.MARK + items + pickle.SETITEMS
            + pickle.STOP)


def write_cifar_format(root: Path, train_images: Tensor, train_labels: Tensor,
                       test_images: Tensor, test_labels: Tensor,
                       label_names: Sequence[str] = CLASSES) -> Path:
    """Write ``uint8`` images ``[N, 3, 32, 32]`` and labels ``[N]`` as the CIFAR-10 python
    version under ``root/cifar-10-batches-py/``; returns that folder. ``label_names`` go
    into ``batches.meta`` (default: CIFAR-10's; a stand-in names its own classes).

    The format of cs.toronto.edu/~kriz/cifar.html: each batch is a pickled dict with
    ``data`` (uint8 numpy ``[N, 3072]``, each row a 32×32 image, the 1024 red values first,
    then green, then blue, each channel row-major), ``labels`` (list of ints in 0..9),
    ``batch_label`` and ``filenames``; the training images are spread over five
    ``data_batch_*`` files, the test images in ``test_batch``; ``batches.meta`` holds
    ``label_names``, ``num_cases_per_batch`` and ``num_vis`` (3072). Like the originals,
    the files are Python 2 protocol-2 pickles (:func:`_py2_pickle`): keys and names are
    Python 2 ``str``, text under torchvision's ``encoding="latin1"`` and ``b"data"`` etc.
    under the ``encoding="bytes"`` of the recipe on the CIFAR page; the pixels are stored
    raw, so a batch of 10,000 images takes 30.7 MB as the originals do.
    """
    folder = Path(root) / BASE_FOLDER
    folder.mkdir(parents=True, exist_ok=True)

    def dump(name: str, entry: dict[str, object]) -> None:
        (folder / name).write_bytes(_py2_pickle(entry))

    def batch(name: str, label: str, images: Tensor, labels: Tensor, first: int) -> None:
        if images.dtype != torch.uint8 or tuple(images.shape[1:]) != (3, 32, 32):
            raise ValueError(f"images must be uint8 [N, 3, 32, 32], got {images.dtype} "
                             f"{tuple(images.shape)}")
        dump(name, {"batch_label": label,
                    "labels": [int(v) for v in labels],
                    "data": images.reshape(len(images), 3072).numpy(),
                    "filenames": [f"image_{first + i:05d}.png" for i in range(len(images))]})

    chunks = torch.arange(len(train_images)).tensor_split(len(TRAIN_FILES))
    for i, (name, idx) in enumerate(zip(TRAIN_FILES, chunks, strict=True)):
        batch(name, f"training batch {i + 1} of {len(TRAIN_FILES)}", train_images[idx],
              train_labels[idx], int(idx[0]) if len(idx) else 0)
    batch(TEST_FILES[0], "testing batch 1 of 1", test_images, test_labels, 0)
    if len(label_names) != len(CLASSES):
        raise ValueError(f"label_names must name {len(CLASSES)} classes, got {len(label_names)}")
    dump(META_FILE, {"label_names": list(label_names), "num_vis": 3072,
                     "num_cases_per_batch": max(len(c) for c in chunks)})
    return folder


class CnnCifar10(ClassificationTask):
    name = "cnn-cifar10"
    full_train_examples = 50_000   # CIFAR-10's training split
    description = "paper CNN (2 conv + 2 FC, 579k parameters) on CIFAR-10, top-1 accuracy"
    profiles = {
        "paper": TaskProfile(
            name="paper", batch_size=32, lr=0.03, eval_every=50, max_iters=10000,
            compute_time_s=0.2,
            compute_time_source=(
                "this project's regime choice, the same as cnn-fmnist: T = 0.2 s puts the CNN "
                "where the paper's large models sit on GPUs, b/T ≈ 1 at 200 ms latency and "
                "transmission/compute 32d/(a·T) ≈ 4.6 at 20 Mbit/s (d = 579,402). The CNN "
                "itself needs 3.1 GFLOP per batch of 32 (16.1 M multiply-adds per image "
                "forward, ×3 with backward), 0.5 ms at 30% of an A100's 19.5 TFLOP/s fp32 and "
                "18 ms on a 2-core x86-64 CPU (profile cpu); use "
                "--compute-time-s or --compute-time measured to simulate those instead"),
        ),
        "cpu": TaskProfile(
            name="cpu", batch_size=32, lr=0.03, eval_every=100, max_iters=2000,
            compute_time_s=0.018,
            compute_time_source=(
                "measured on the idle 2-core AMD EPYC x86-64 VM, torch 2.15.0 (CPU, 2 threads), "
                "2026-11-21: one forward + backward of this CNN on a batch of 32, median of 40 "
                "passes after 20 warm-up passes, five times: 17.4-18.0 ms (cnn-fmnist's CNN in "
                "the same measurement: 13.2-13.8 ms)"),
        ),
    }

    def check_data(self, data_root: Path | None, download: bool,
                   variant: str | None = None) -> None:
        if data_root is None or download:
            return
        folder = Path(data_root) / BASE_FOLDER
        missing = [f for f in DATA_FILES if not (folder / f).is_file()]
        problem = f"missing {', '.join(missing)}" if missing else _meta_problem(folder / META_FILE)
        if problem:
            raise DecobenchError(
                f"--data-root {data_root}: no CIFAR-10 python version at {folder} ({problem}); "
                "download and extract cifar-10-python.tar.gz from "
                "https://www.cs.toronto.edu/~kriz/cifar.html so that --data-root holds "
                f"{BASE_FOLDER}/{{{','.join(DATA_FILES)}}}, or omit --data-root to download it")

    def load_data(self, data_root: Path | None, download: bool, profile: TaskProfile,
                  variant: str | None = None) -> TaskData:
        root = Path(data_root) if data_root is not None else default_data_root()
        loader = CIFAR10 if download else LocalCIFAR10
        try:
            train = split_tensors(loader(str(root), train=True, download=download))
            test = split_tensors(loader(str(root), train=False, download=download))
        except PARSE_ERRORS as exc:
            raise DecobenchError(f"CIFAR-10 at {root / BASE_FOLDER} is not in the python "
                                 f"pickle format ({type(exc).__name__}: {exc})") from exc
        label = standin_label(root)
        return Cifar10Data(train_images=train[0], train_targets=train[1],
                           test_images=test[0], test_targets=test[1],
                           source=str(root) if label is None else f"{root}; {label}")

    def build_model(self, profile: TaskProfile) -> nn.Module:
        return PaperCNN(in_channels=3, image_size=32)

    @torch.no_grad()
    def evaluate(self, forward: Callable[[Tensor], Tensor], data: TaskData) -> float:
        assert isinstance(data, Cifar10Data)
        return classification_accuracy(lambda images: forward(normalise(images)),
                                       data.test_images, data.test_targets)

