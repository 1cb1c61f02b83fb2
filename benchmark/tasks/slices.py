"""The offline data slices of the smoke suite, rebuilt from their public sources
(``decobench data slices``; ``make data-slices``).

The golden smoke results (``benchmark/suites/golden/``) were measured on two small slices
that this project's machines carry beside the checkout (``../shared/data``). A machine
without them (a GitHub runner, a user's laptop) rebuilds them here, byte for byte, and
checks each file's SHA-256, so a smoke run there trains on exactly the same data:

- ``fashion-mnist-mini/FashionMNIST/raw/*-ubyte``: the first 4,443 images of the official
  Fashion-MNIST *test* split (downloaded by torchvision), re-split into ``train`` (images
  0-3,442) and ``t10k`` (3,443-4,442), uncompressed IDX files. Not the real training split:
  accuracies on it are not comparable to published ones.
- ``wikitext-2/valid.txt`` and ``test.txt``: WikiText-2 (tokenized) as distributed with
  PyTorch's word-language-model example (CC BY-SA 3.0, Merity et al., 2016).
"""

from __future__ import annotations

import argparse
import hashlib
import struct
import sys
import tempfile
import urllib.request
from pathlib import Path

import numpy as np

from decobench.atomicio import write_bytes_atomic
from decobench.errors import DecobenchError
from decobench.tasks.idx import read_idx

FMNIST_SLICE = 4443
"""Images of the official test split in the slice."""
FMNIST_TRAIN = 3443
"""Of them, the first ones stored as ``train``; the rest are ``t10k``."""

SHA256 = {
    "fashion-mnist-mini/FashionMNIST/raw/train-images-idx3-ubyte":
        "9de35c977ab263cac7c5823f21b2a45cc19f483b99e7d71cc089abe72c90d80d",
    "fashion-mnist-mini/FashionMNIST/raw/train-labels-idx1-ubyte":
        "ba31694db6dd07864c61cb51e47dd0fd50cf272ff4f3b2791bc2321bf0430178",
    "fashion-mnist-mini/FashionMNIST/raw/t10k-images-idx3-ubyte":
        "3e70ecf810822f8b43d73814a2c17ec7727bb8b12212f0d7b33945ed9cc7f3cf",
    "fashion-mnist-mini/FashionMNIST/raw/t10k-labels-idx1-ubyte":
        "afd6a4dfbdb8491f1c9f46e0f81d9a761f4943dfea5ab2d0c1eb6edf10066dc2",
    "wikitext-2/valid.txt": "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
    "wikitext-2/test.txt": "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
}
"""Every file of the slices and its SHA-256 (the same as ``../shared/data/README.md``)."""

WIKITEXT_URL = ("https://raw.githubusercontent.com/pytorch/examples/main/"
                "word_language_model/data/wikitext-2/{split}.txt")
"""Where PyTorch's word-language-model example keeps WikiText-2."""


def idx_bytes(array: np.ndarray) -> bytes:
    """An unsigned-byte IDX file (the MNIST format): magic 0x0000 08 NDIM, the big-endian
    dimensions, then the data."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(">HBB", 0, 0x08, array.ndim)
    header += struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.tobytes()


def fmnist_slice(images: np.ndarray, labels: np.ndarray) -> dict[str, bytes]:
    """The four IDX files of the slice from the official test split's images [N, 28, 28]
    and labels [N] (in their published order)."""
    if len(images) < FMNIST_SLICE or len(labels) < FMNIST_SLICE:
        raise DecobenchError(f"the Fashion-MNIST test split has {len(images)} images; the "
                             f"slice needs its first {FMNIST_SLICE}")
    raw = "fashion-mnist-mini/FashionMNIST/raw/"
    cut = slice(0, FMNIST_TRAIN), slice(FMNIST_TRAIN, FMNIST_SLICE)
    return {raw + "train-images-idx3-ubyte": idx_bytes(images[cut[0]]),
            raw + "train-labels-idx1-ubyte": idx_bytes(labels[cut[0]]),
            raw + "t10k-images-idx3-ubyte": idx_bytes(images[cut[1]]),
            raw + "t10k-labels-idx1-ubyte": idx_bytes(labels[cut[1]])}


def _official_test_split(cache: Path) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST's test split, downloaded by torchvision into ``cache``."""
    from torchvision.datasets import FashionMNIST

    try:
        FashionMNIST(root=str(cache), train=False, download=True)
    except Exception as exc:  # URLError, checksum errors
        raise DecobenchError(f"could not download Fashion-MNIST's test split: {exc}") from exc
    raw = cache / "FashionMNIST" / "raw"
    return read_idx(raw / "t10k-images-idx3-ubyte"), read_idx(raw / "t10k-labels-idx1-ubyte")


def _download(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=60) as answer:
            return bytes(answer.read())
    except OSError as exc:
        raise DecobenchError(f"could not download {url}: {exc}") from exc


def check(files: dict[str, bytes]) -> None:
    """Every file's SHA-256 against :data:`SHA256`; a mismatch names the file."""
    for name, data in files.items():
        digest = hashlib.sha256(data).hexdigest()
        if digest != SHA256[name]:
            raise DecobenchError(f"{name}: SHA-256 {digest}, expected {SHA256[name]}: the "
                                 "source changed, so this is not the data the golden results "
                                 "were measured on")


def build_slices(out: Path, *, fmnist_test_split: tuple[np.ndarray, np.ndarray] | None = None,
                 wikitext: dict[str, bytes] | None = None) -> list[Path]:
    """Write the slices under ``out`` after checking them; files already there with the right
    SHA-256 are kept. The sources are downloaded unless given (tests give them)."""
    out = Path(out)
    present = {name for name in SHA256 if (out / name).is_file() and
               hashlib.sha256((out / name).read_bytes()).hexdigest() == SHA256[name]}
    files: dict[str, bytes] = {}
    if any(name.startswith("fashion-mnist") and name not in present for name in SHA256):
        if fmnist_test_split is None:
            with tempfile.TemporaryDirectory() as cache:
                fmnist_test_split = _official_test_split(Path(cache))
        files.update(fmnist_slice(*fmnist_test_split))
    for split in ("valid", "test"):
        name = f"wikitext-2/{split}.txt"
        if name not in present:
            files[name] = (wikitext[name] if wikitext is not None
                           else _download(WIKITEXT_URL.format(split=split)))
    check(files)
    for name, data in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(out / name, data)
    return [out / name for name in SHA256]


def cmd_slices(args: argparse.Namespace) -> int:
    """``decobench data slices``."""
    out = Path(args.out)
    paths = build_slices(out)
    for path in paths:
        print(path)
    print(f"data slices: {len(paths)} files under {out}, SHA-256 checked", file=sys.stderr)
    return 0


__all__ = ["SHA256", "build_slices", "check", "cmd_slices", "fmnist_slice", "idx_bytes",
           "read_idx"]
