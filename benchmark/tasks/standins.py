"""The offline ImageNet STAND-IN, built from a CIFAR-10 root (the real slice
``../shared/data/cifar10-mini``, or the full CIFAR-10 python version) in the ImageFolder
layout that the vit-imagenet loader reads.

No ImageNet copy exists offline, but a CPU tier must still run ViT@ImageNet on natural
images. ``build_standins(source, out)`` writes, deterministically and byte for byte
reproducibly (no timestamps or absolute paths; PNGs are encoded by hand, so no library
version changes a byte), ``out/imagenet/``: ``--data-root`` of vit-imagenet, the ImageFolder
layout ``train/<class>/*.png`` and ``val/<class>/*.png`` (CIFAR-10's training batches as
train, its test batch as val), the 32x32 RGB images as they are.

The 10 classes keep CIFAR-10's labels and are named ``cifar10-standin-<label>-<name>`` (the
label first, so ImageFolder's sorted folders keep the label order). The data root holds
:data:`~decobench.tasks.base.STANDIN_MARKER` (``STANDIN.txt``), whose first line the loader
appends to the run's ``data_source``; ``out/README.txt`` says the same for people.
Accuracies on these data are CIFAR-10 accuracies: **not comparable** to ImageNet results.

CNN@CIFAR-10 needs no stand-in: it reads the real CIFAR-10 slice. (Until 2026-11-27 both
stand-ins were Fashion-MNIST pixels, padded and copied into R, G and B; issue 39.)

    decobench data standins --out DIR [--cifar10-root DIR | --download] [--limit N]
                            [--overwrite]
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch import Tensor

from decobench.errors import DecobenchError
from decobench.tasks.base import STANDIN_MARKER
from decobench.tasks.cnn_cifar10 import (
    BASE_FOLDER,
    CLASSES,
    DATA_FILES,
    PARSE_ERRORS,
    LocalCIFAR10,
    split_tensors,
)
from decobench.tasks.cnn_fmnist import default_data_root

CLASS_NAMES = tuple(f"cifar10-standin-{i}-{name}" for i, name in enumerate(CLASSES))
"""``cifar10-standin-0-airplane`` ... ``cifar10-standin-9-truck``: the stand-in's class
folders."""

README = "README.txt"
IMAGENET_DIR = "imagenet"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class Cifar10Source:
    """The uint8 ``[N, 3, 32, 32]`` images and int64 labels of a CIFAR-10 root, and what
    identifies it (folder name, SHA-256 of each batch file)."""

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
    imagenet: Path
    train_images: int
    test_images: int
    files: int
    bytes: int


def read_cifar10(root: Path | None) -> Cifar10Source:
    """CIFAR-10 from ``root/cifar-10-batches-py`` (the python version, read as torchvision
    reads it with the MD5 check off: the slice's files are cut short); ``root=None``
    downloads the full data set with torchvision into the default data root. A one-line
    DecobenchError when the files are missing or unreadable."""
    if root is None:
        from torchvision.datasets import CIFAR10

        root, loader = default_data_root(), CIFAR10
        download = True
    else:
        folder = Path(root) / BASE_FOLDER
        missing = [f for f in DATA_FILES if not (folder / f).is_file()]
        if missing:
            raise DecobenchError(
                f"--cifar10-root {root}: no CIFAR-10 python version at {folder} (missing "
                f"{', '.join(missing)}); point --cifar10-root at a folder holding "
                f"{BASE_FOLDER}/ (the offline slice beside the checkout has one) or pass "
                "--download")
        loader, download = LocalCIFAR10, False
    try:
        train = split_tensors(loader(str(root), train=True, download=download))
        test = split_tensors(loader(str(root), train=False, download=download))
    except (*PARSE_ERRORS, RuntimeError, OSError) as exc:
        raise DecobenchError(f"--cifar10-root {root}: not readable as CIFAR-10 python "
                             f"batches ({type(exc).__name__}: {exc})") from exc
    folder = Path(root) / BASE_FOLDER
    digests = {f: hashlib.sha256((folder / f).read_bytes()).hexdigest() for f in DATA_FILES}
    return Cifar10Source(train[0], train[1], test[0], test[1], Path(root).resolve().name,
                         digests)


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


def _label(source: Cifar10Source, train: int, test: int) -> str:
    return (f"STAND-IN: built from CIFAR-10 ({source.name}, {train} train / {test} test "
            "images), not ImageNet; accuracies are not comparable to ImageNet results")


def _marker(label: str, source: Cifar10Source, limit: int | None) -> str:
    """The STANDIN.txt of the data root: the label line (read by the loader), then details."""
    lines = [label, "",
             "What: an ImageNet stand-in in the ImageFolder layout (train/CLASS/*.png, "
             "val/CLASS/*.png), for decobench run --task vit-imagenet --data-root <this folder>",
             "Images: CIFAR-10's 32x32 RGB images as they are (natural images, lossless PNG); "
             "its training batches are the training split, its test batch the validation "
             "split.",
             "Classes: CIFAR-10's 10 labels, named " + ", ".join(CLASS_NAMES) + ".",
             f"Limit: {'none' if limit is None else f'the first {limit} images of each split'}.",
             f"Source: CIFAR-10 root {source.name!r}, batch files (sha256):"]
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


def build_standins(source_root: Path | None, out: Path, limit: int | None = None,
                   overwrite: bool = False) -> StandinBuild:
    """Write the ImageNet stand-in of ``source_root`` (a CIFAR-10 root; ``None``: download
    CIFAR-10) to ``out/imagenet`` (see the module docstring). ``limit`` keeps the first
    images of each split. The tree is built in ``out.partial`` and renamed, so ``out`` is
    complete or absent; an existing ``out`` is replaced only with ``overwrite`` and only when
    it is an earlier stand-in build."""
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
    source = read_cifar10(None if source_root is None else Path(source_root))
    train_images, train_labels = source.train_images[:limit], source.train_labels[:limit]
    test_images, test_labels = source.test_images[:limit], source.test_labels[:limit]
    n_train, n_test = len(train_labels), len(test_labels)

    staging = out.with_name(out.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)                 # an interrupted earlier build
    label = _label(source, n_train, n_test)
    size = _write(staging / IMAGENET_DIR / STANDIN_MARKER,
                  _marker(label, source, limit).encode())
    size += _write_image_folder(staging / IMAGENET_DIR, "train", train_images, train_labels)
    size += _write_image_folder(staging / IMAGENET_DIR, "val", test_images, test_labels)
    size += _write(staging / README, (
        "STAND-IN data set built from CIFAR-10, NOT ImageNet: accuracies on it are not "
        "comparable to ImageNet results.\n\n"
        f"{IMAGENET_DIR}/  {label}\n"
        f"            decobench run --task vit-imagenet --data-root {IMAGENET_DIR} ...\n\n"
        f"Details: {IMAGENET_DIR}/{STANDIN_MARKER}. Runs on this folder carry the first line "
        "of STANDIN.txt in config.yaml (data_source).\n").encode())
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    files = sum(1 for p in out.rglob("*") if p.is_file())
    return StandinBuild(out=out, imagenet=out / IMAGENET_DIR, train_images=n_train,
                        test_images=n_test, files=files, bytes=size)


def cmd_standins(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    source = None if args.download else Path(args.cifar10_root)
    build = build_standins(source, Path(args.out), args.limit, args.overwrite)
    print(f"wrote an ImageNet STAND-IN (CIFAR-10 images, not ImageNet) to {build.out}: "
          f"{build.train_images} train / {build.test_images} val images, {build.files} "
          f"files, {build.bytes / 1e6:.1f} MB, in {time.perf_counter() - start:.1f} s\n"
          f"  vit-imagenet: --data-root {build.imagenet}")
    return 0
