"""Offline STAND-INS for CIFAR-10 and ImageNet, built from a Fashion-MNIST root (e.g. the
mini slice ``../shared/data/fashion-mnist-mini``), in the real on-disk formats that the
cnn-cifar10 and vit-imagenet loaders read.

No CIFAR-10 or ImageNet copy exists offline, but a CPU tier must still run those two tasks
on real images. ``build_standins(source, out)`` writes, deterministically and byte for byte
reproducibly (no timestamps or absolute paths; pickles and PNGs are encoded by hand, so no
library version changes a byte):

- ``out/cifar10/``: ``--data-root`` of cnn-cifar10. ``cifar-10-batches-py/data_batch_1..5``,
  ``test_batch`` and ``batches.meta``: the CIFAR-10 python version
  (:func:`decobench.tasks.cnn_cifar10.write_cifar_format`), uint8 3x32x32 images.
- ``out/imagenet/``: ``--data-root`` of vit-imagenet. The ImageFolder layout
  ``train/<class>/*.png`` and ``val/<class>/*.png`` (Fashion-MNIST's train split as train,
  its test split as val), 32x32 RGB PNGs.

Each image is a 28x28 Fashion-MNIST image padded with a 2-pixel black border (Fashion-MNIST's
background is 0) to 32x32 and copied into R, G and B: the same pixels in both formats. The
10 classes keep Fashion-MNIST's labels and are named ``fmnist-standin-<label>-<name>`` (the
label first, so ImageFolder's sorted folders keep the label order). Each data root holds
:data:`~decobench.tasks.base.STANDIN_MARKER` (``STANDIN.txt``), whose first line the
loaders append to the run's ``data_source``; ``out/README.txt`` says the same for people.
Accuracies on these data are Fashion-MNIST accuracies: **not comparable** to CIFAR-10 or
ImageNet results.

    decobench data standins --out DIR [--fmnist-root DIR] [--limit N] [--overwrite]
    python -m decobench.tasks.standins --out DIR ...
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import struct
import sys
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch.nn.functional as F
from torch import Tensor

from decobench.data_cli import DEFAULT_SOURCE, add_standins_arguments
from decobench.errors import DecobenchError
from decobench.tasks.base import STANDIN_MARKER
from decobench.tasks.cnn_cifar10 import write_cifar_format
from decobench.tasks.cnn_fmnist import RAW_FILES

FMNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                  "Sneaker", "Bag", "Ankle boot")
"""Fashion-MNIST's label names, in label order (torchvision ``FashionMNIST.classes``)."""

CLASS_NAMES = tuple(f"fmnist-standin-{i}-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
                    for i, name in enumerate(FMNIST_CLASSES))
"""``fmnist-standin-0-t-shirt-top`` ... ``fmnist-standin-9-ankle-boot``: the stand-ins'
class names (CIFAR ``label_names``, ImageFolder class folders)."""

README = "README.txt"
CIFAR_DIR, IMAGENET_DIR = "cifar10", "imagenet"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class FashionMnistSource:
    """The uint8 ``[N, 28, 28]`` images and int64 labels of a Fashion-MNIST root, and what
    identifies it (folder name, SHA-256 of each raw IDX file)."""

    train_images: Tensor
    train_labels: Tensor
    test_images: Tensor
    test_labels: Tensor
    name: str
    digests: dict[str, str]


@dataclass(frozen=True)
class StandinBuild:
    """What :func:`build_standins` wrote."""

    out: Path
    cifar10: Path
    imagenet: Path
    train_images: int
    test_images: int
    files: int
    bytes: int


def read_fashion_mnist(root: Path) -> FashionMnistSource:
    """Fashion-MNIST from ``root/FashionMNIST/raw/*-ubyte`` (torchvision's layout, no
    download); a one-line DecobenchError when the files are missing."""
    from torchvision.datasets import FashionMNIST

    raw = Path(root) / "FashionMNIST" / "raw"
    missing = [f for f in RAW_FILES if not (raw / f).is_file()]
    if missing:
        raise DecobenchError(
            f"--fmnist-root {root}: no Fashion-MNIST at {raw} (missing {', '.join(missing)}); "
            "point --fmnist-root at a folder holding FashionMNIST/raw/*-ubyte, e.g. "
            f"{DEFAULT_SOURCE}")
    try:
        train = FashionMNIST(str(root), train=True, download=False)
        test = FashionMNIST(str(root), train=False, download=False)
    except (RuntimeError, ValueError, OSError) as exc:
        raise DecobenchError(f"--fmnist-root {root}: not readable as Fashion-MNIST IDX files "
                             f"({type(exc).__name__}: {exc})") from exc
    digests = {f: hashlib.sha256((raw / f).read_bytes()).hexdigest() for f in RAW_FILES}
    return FashionMnistSource(train.data, train.targets.long(), test.data, test.targets.long(),
                              Path(root).resolve().name, digests)


def rgb32(images: Tensor) -> Tensor:
    """uint8 ``[N, 28, 28]`` grey → uint8 ``[N, 3, 32, 32]``: a 2-pixel black border, the
    grey value in R, G and B."""
    return F.pad(images, (2, 2, 2, 2)).unsqueeze(1).expand(-1, 3, -1, -1).contiguous()


def png_bytes(image: np.ndarray) -> bytes:
    """An 8-bit RGB PNG of uint8 ``[H, W, 3]`` ``image``: one IDAT whose zlib stream holds
    *stored* (uncompressed) deflate blocks and every row with filter 0, so the bytes depend
    on the pixels alone, not on the zlib or Pillow build (compressed output may differ
    between zlib and zlib-ng). A 32x32 image takes 3,172 bytes."""
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"expected uint8 [H, W, 3], got {image.dtype} {image.shape}")
    height, width, _ = image.shape
    raw = b"".join(b"\x00" + np.ascontiguousarray(row).tobytes() for row in image)
    blocks = []
    for start in range(0, len(raw), 65535):
        piece = raw[start: start + 65535]
        final = int(start + 65535 >= len(raw))
        blocks.append(bytes([final]) + struct.pack("<HH", len(piece), len(piece) ^ 0xFFFF)
                      + piece)
    stream = b"\x78\x01" + b"".join(blocks) + struct.pack(">I", zlib.adler32(raw))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)   # 8-bit RGB, no interlace
    return PNG_SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", stream) + chunk(b"IEND", b"")


def _label(source: FashionMnistSource, train: int, test: int, instead_of: str) -> str:
    return (f"STAND-IN: built from Fashion-MNIST ({source.name}, {train} train / {test} test "
            f"images), not {instead_of}; accuracies are not comparable to {instead_of} results")


def _marker(label: str, source: FashionMnistSource, what: str, limit: int | None) -> str:
    """The STANDIN.txt of one data root: the label line (read by the loaders), then details."""
    lines = [label, "",
             f"What: {what}",
             "Images: each 28x28 Fashion-MNIST image padded with a 2-pixel black border to "
             "32x32 and copied into R, G and B; Fashion-MNIST's train split is the training "
             "split, its test split the test/validation split.",
             "Classes: Fashion-MNIST's 10 labels, named " + ", ".join(CLASS_NAMES) + ".",
             f"Limit: {'none' if limit is None else f'the first {limit} images of each split'}.",
             f"Source: Fashion-MNIST root {source.name!r}, raw files (sha256):"]
    lines += [f"  {name} {digest}" for name, digest in source.digests.items()]
    lines += ["Built by: decobench data standins (benchmark/tasks/standins.py); rebuilding "
              "from the same source gives the same bytes.",
              "Use it to exercise the task's real pipeline offline; label every result as a "
              "stand-in run (the run's config.yaml data_source carries the first line)."]
    return "\n".join(lines) + "\n"


def _write(path: Path, data: bytes) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return len(data)


def _write_image_folder(root: Path, split: str, images: Tensor, labels: Tensor) -> int:
    """``root/split/<CLASS_NAMES[label]>/<split>_<i:05d>.png`` for uint8 ``[N, 3, H, W]``
    images (i: the index in the source split, so names sort in source order)."""
    written = 0
    for i, (image, label) in enumerate(zip(images.permute(0, 2, 3, 1).numpy(),
                                           labels.tolist(), strict=True)):
        written += _write(root / split / CLASS_NAMES[label] / f"{split}_{i:05d}.png",
                          png_bytes(image))
    return written


def _is_standin_folder(folder: Path) -> bool:
    readme = folder / README
    return readme.is_file() and readme.read_text(errors="replace").startswith("STAND-IN")


def build_standins(source_root: Path, out: Path, limit: int | None = None,
                   overwrite: bool = False) -> StandinBuild:
    """Write the CIFAR-10 and ImageNet stand-ins of ``source_root`` (a Fashion-MNIST root)
    to ``out/cifar10`` and ``out/imagenet`` (see the module docstring). ``limit`` keeps the
    first images of each split. The tree is built in ``out.partial`` and renamed, so ``out``
    is complete or absent; an existing ``out`` is replaced only with ``overwrite`` and only
    when it is an earlier stand-in build."""
    if limit is not None and limit < 1:
        raise DecobenchError(f"--limit {limit}: give a positive number of images per split")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not overwrite:
            raise DecobenchError(f"--out {out} already exists and is not empty; pass "
                                 "--overwrite to replace an earlier stand-in build, or choose "
                                 "another --out")
        if not _is_standin_folder(out):
            raise DecobenchError(f"--out {out} is not a stand-in build (no {README} starting "
                                 "with STAND-IN); refusing to replace it")
    source = read_fashion_mnist(Path(source_root))
    train_images, train_labels = rgb32(source.train_images[:limit]), source.train_labels[:limit]
    test_images, test_labels = rgb32(source.test_images[:limit]), source.test_labels[:limit]
    n_train, n_test = len(train_labels), len(test_labels)

    staging = out.with_name(out.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)                 # an interrupted earlier build
    cifar_label = _label(source, n_train, n_test, "CIFAR-10")
    imagenet_label = _label(source, n_train, n_test, "ImageNet")
    size = _write(staging / CIFAR_DIR / STANDIN_MARKER, _marker(
        cifar_label, source, "a CIFAR-10 stand-in in CIFAR-10's python pickle format "
        "(cifar-10-batches-py/), for decobench run --task cnn-cifar10 --data-root <this "
        "folder>", limit).encode())
    folder = write_cifar_format(staging / CIFAR_DIR, train_images, train_labels, test_images,
                                test_labels, label_names=CLASS_NAMES)
    size += sum(p.stat().st_size for p in folder.iterdir())
    size += _write(staging / IMAGENET_DIR / STANDIN_MARKER, _marker(
        imagenet_label, source, "an ImageNet stand-in in the ImageFolder layout (train/CLASS/"
        "*.png, val/CLASS/*.png), for decobench run --task vit-imagenet --data-root <this "
        "folder>", limit).encode())
    size += _write_image_folder(staging / IMAGENET_DIR, "train", train_images, train_labels)
    size += _write_image_folder(staging / IMAGENET_DIR, "val", test_images, test_labels)
    size += _write(staging / README, (
        "STAND-IN data sets built from Fashion-MNIST, NOT CIFAR-10 and NOT ImageNet: accuracies "
        "on them are not comparable to CIFAR-10 or ImageNet results.\n\n"
        f"{CIFAR_DIR}/   {cifar_label}\n"
        f"            decobench run --task cnn-cifar10 --data-root {CIFAR_DIR} ...\n"
        f"{IMAGENET_DIR}/  {imagenet_label}\n"
        f"            decobench run --task vit-imagenet --data-root {IMAGENET_DIR} ...\n\n"
        f"Details: {CIFAR_DIR}/{STANDIN_MARKER} and {IMAGENET_DIR}/{STANDIN_MARKER}. Runs on "
        "these folders carry the first line of STANDIN.txt in config.yaml (data_source).\n"
        ).encode())
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    files = sum(1 for p in out.rglob("*") if p.is_file())
    return StandinBuild(out=out, cifar10=out / CIFAR_DIR, imagenet=out / IMAGENET_DIR,
                        train_images=n_train, test_images=n_test, files=files, bytes=size)


def cmd_standins(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    build = build_standins(Path(args.fmnist_root), Path(args.out), args.limit, args.overwrite)
    print(f"wrote STAND-IN data (Fashion-MNIST, not CIFAR-10/ImageNet) to {build.out}: "
          f"{build.train_images} train / {build.test_images} test images, {build.files} files, "
          f"{build.bytes / 1e6:.1f} MB, in {time.perf_counter() - start:.1f} s\n"
          f"  cnn-cifar10:  --data-root {build.cifar10}\n"
          f"  vit-imagenet: --data-root {build.imagenet}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decobench.tasks.standins",
                                     description="Build the CIFAR-10 and ImageNet stand-ins "
                                     "(see decobench data standins --help).")
    add_standins_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return cmd_standins(args)
    except DecobenchError as exc:
        print(f"standins: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
