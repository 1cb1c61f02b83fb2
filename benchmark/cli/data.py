"""``decobench data``: its command line, kept free of the task modules (which import torch)
so that its ``--help`` and its usage errors answer at once; the commands import the task
code when they run (:mod:`decobench.tasks.standins`, :mod:`decobench.cli.fetch`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

DEFAULT_SOURCE = Path("../shared/data/cifar10-mini")
"""The offline slice of the real CIFAR-10 beside the checkout (relative to the project root),
which the ImageNet stand-in is built from."""


def add_standins_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``decobench data standins``."""
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output folder: DIR/imagenet (--data-root of vit-imagenet) and "
                        "DIR/README.txt")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--cifar10-root", default=str(DEFAULT_SOURCE), metavar="DIR",
                        help="CIFAR-10 root holding cifar-10-batches-py/ (default "
                        f"{DEFAULT_SOURCE}, the offline slice of the real CIFAR-10 beside the "
                        "checkout)")
    source.add_argument("--download", action="store_true",
                        help="download the full CIFAR-10 (torchvision, into "
                        "~/.cache/decobench/data) and build from it")
    parser.add_argument("--limit", type=int, metavar="N",
                        help="keep only the first N images of each split (default: all)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace DIR when it holds an earlier stand-in build")


def _standins(args: argparse.Namespace) -> int:
    from decobench.tasks.standins import cmd_standins

    return cmd_standins(args)


def _fetch(args: argparse.Namespace) -> int:
    from decobench.cli.fetch import cmd_fetch

    return cmd_fetch(args)


def _slices(args: argparse.Namespace) -> int:
    from decobench.tasks.slices import cmd_slices

    return cmd_slices(args)


def add_data_parser(subparsers: Any) -> None:
    """Register ``data`` and its subcommands ``standins``, ``fetch`` and ``slices`` on an argparse
    subparsers object (``decobench data standins``, ``decobench data fetch``); each leaf
    sets ``func``."""
    data = subparsers.add_parser("data", help="offline data: build stand-in data sets; "
                                 "fetch a run's data",
                                 description="Offline data sets for the benchmark's tasks.")
    sub = data.add_subparsers(dest="data_command", metavar="COMMAND", required=True)
    standins = sub.add_parser(
        "standins", help="an ImageNet stand-in built from CIFAR-10 images",
        description="Build an ImageNet stand-in (ImageFolder of PNGs) from a CIFAR-10 root "
        "(natural images; by default the offline slice of the real CIFAR-10), byte for byte "
        "reproducibly. It is labelled as a stand-in (STANDIN.txt, and each run's "
        "data_source): accuracies on it are not comparable to ImageNet results. CNN@CIFAR-10 "
        "needs no stand-in: it reads the CIFAR-10 slice itself.")
    add_standins_arguments(standins)
    standins.set_defaults(func=_standins)
    fetch = sub.add_parser(
        "fetch", help="load (download) a run's task data once",
        description="Load the task data of a run config once: download it into the cache "
        "when the config has no data_root, else check the given folder. The Docker stack's "
        "one-shot data service runs this before the workers start.")
    fetch.add_argument("--config", required=True, metavar="RUN.yaml", help="run config file")
    fetch.set_defaults(func=_fetch)
    slices = sub.add_parser(
        "slices", help="the smoke suite's offline data slices, from their public sources",
        description="Download Fashion-MNIST's test split (torchvision) and WikiText-2 "
        "(PyTorch's word-language-model example) and write the two small slices the golden "
        "smoke results were measured on, each file checked by SHA-256: "
        "OUT/fashion-mnist-mini (the first 4,443 test images, re-split 3,443 / 1,000) and "
        "OUT/wikitext-2 (valid.txt, test.txt). Files already there with the right SHA-256 are "
        "kept. `make data-slices` runs it; docs/ci.md says where it is used.")
    slices.add_argument("--out", default="data/slices", metavar="DIR",
                        help="output folder (default: data/slices)")
    slices.set_defaults(func=_slices)
