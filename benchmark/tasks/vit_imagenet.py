"""ViT@ImageNet: a Vision Transformer (timm) trained on ImageNet-1k, from scratch (default) or
from ImageNet-21k weights (``--init pretrained``, paper profile), read from a local
class-per-folder tree (``<root>/train/<wnid>/*.JPEG``, ``<root>/val/<wnid>/*.JPEG``), top-1
accuracy on (an evenly spaced subset of) the validation split.

ImageNet does not fit in memory and cannot be downloaded automatically (image-net.org asks
every user to register and accept its terms), so the images are decoded lazily, batch by
batch, from the tree the user arranged (``docs/tasks/vit-imagenet.md`` says how); a split small
enough to hold (:data:`KEEP_DECODED_BYTES`: the offline stand-in, ImageNet's evaluated subset
at 32x32) keeps its images once decoded.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import timm
import torch
from PIL import Image
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, create_transform
from torch import Tensor, nn
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS

from decobench.errors import DecobenchError
from decobench.tasks.base import (
    ClassificationTask,
    TaskData,
    TaskProfile,
    pretrained_load_error,
    standin_label,
)

CROP_PCT = 0.875
"""Resize the shorter side to ``image_size / 0.875`` (256 for 224), then centre-crop: the
standard ImageNet evaluation transform (DeiT, Touvron et al. 2021; timm's default crop_pct).
It is used for training too: no random augmentation, so runs are deterministic."""

SPLITS = ("train", "val")

HOW_TO_GET = (
    "ImageNet cannot be downloaded automatically: register at https://image-net.org, download "
    "ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar and ILSVRC2012_devkit_t12.tar.gz into "
    "one folder, arrange it into <folder>/train/<wnid>/*.JPEG and <folder>/val/<wnid>/*.JPEG "
    "(e.g. torchvision.datasets.ImageNet('<folder>', split='train') and split='val' do this), "
    "and pass --data-root <folder> (see docs/tasks/vit-imagenet.md)")

NO_DROPOUT: dict[str, float] = {
    "drop_rate": 0.0, "pos_drop_rate": 0.0, "patch_drop_rate": 0.0, "proj_drop_rate": 0.0,
    "attn_drop_rate": 0.0, "drop_path_rate": 0.0}
"""Every stochastic layer off: a worker's forward pass is a pure function of (x, batch)."""


@dataclass(frozen=True)
class VitSpec:
    """One model variant (``TaskProfile.model``) and what its data pipeline needs.

    ``arch`` is a timm model name, built with ``pretrained=False`` and ``arch_kwargs``;
    ``default_classes`` is used when no data has been loaded (e.g. ``parameter_count``):
    once :meth:`VitImageNet.load_data` ran, the head has one output per class folder.
    ``eval_images`` caps the validation images evaluated (evenly spaced over the sorted
    split, so every class is represented); ``eval_batch`` is the evaluation chunk size.
    ``pretrained`` is the timm name, with its weight tag, of the published weights that
    ``--init pretrained`` loads into the same architecture (None: there are none).
    """

    arch: str
    image_size: int
    default_classes: int
    eval_images: int
    eval_batch: int
    arch_kwargs: dict[str, Any] = field(default_factory=dict)
    pretrained: str | None = None


MODELS: dict[str, VitSpec] = {
    # ViT-B/16 (Dosovitskiy et al. 2021): 12 blocks, width 768, 12 heads, 16x16 patches at
    # 224x224; 86,567,656 parameters with 1000 classes. 10,000 validation images = every 5th
    # of the 50,000 (10 per class). --init pretrained: the ImageNet-21k pre-training of
    # AugReg (Steiner et al. 2022), not timm's default tag augreg2_in21k_ft_in1k, which is
    # already fine-tuned on ImageNet-1k (a run would start at its final accuracy).
    "vit-b16": VitSpec(arch="vit_base_patch16_224", image_size=224, default_classes=1000,
                       eval_images=10_000, eval_batch=125,
                       pretrained="vit_base_patch16_224.augreg_in21k"),
    # This project's CPU-sized ViT: 4 blocks, width 96, 3 heads (head width 32), 4x4 patches
    # at 32x32 (64 patches + a class token, the usual patching of 32-pixel ImageNet
    # variants); 555,592 parameters with 1000 classes. 2,000 validation images (2 per class
    # of ImageNet) keep an evaluation within seconds on 2 cores.
    "vit-mini-32": VitSpec(arch="vit_tiny_patch16_224", image_size=32, default_classes=1000,
                           eval_images=2_000, eval_batch=500,
                           arch_kwargs={"img_size": 32, "patch_size": 4, "embed_dim": 96,
                                        "depth": 4, "num_heads": 3}),
}


def open_rgb(path: str, min_side: int) -> Image.Image:
    """The image at ``path`` as RGB. JPEGs are decoded at the smallest DCT scale (1, 1/2,
    1/4 or 1/8) whose both sides are still ``>= min_side`` (PIL's ``draft``): the same
    pixels the resize would see, up to the decoder's own filtering, and up to 8x faster for
    32-pixel models. Other formats decode as usual."""
    with open(path, "rb") as f:
        image = Image.open(f)
        image.draft("RGB", (min_side, min_side))
        return image.convert("RGB")


class _FolderWithClasses(ImageFolder):
    """An ImageFolder whose class indices come from another split (``class_to_idx`` of the
    training folder), so a validation split lacking some classes keeps the right labels."""

    def __init__(self, root: str, class_to_idx: dict[str, int], **kwargs: Any) -> None:
        self._fixed_classes = dict(class_to_idx)
        super().__init__(root, allow_empty=True, **kwargs)

    def find_classes(self, directory: str | Path) -> tuple[list[str], dict[str, int]]:
        classes = sorted(self._fixed_classes, key=self._fixed_classes.__getitem__)
        return classes, dict(self._fixed_classes)


KEEP_DECODED_BYTES = 512 << 20
"""Memory a run may spend per split on decoded images (:class:`ImageFolderData`): a split whose
every image a run can touch fits in it (the Fashion-MNIST stand-in's 3,443 training images
at 32x32: 42 MB; ImageNet's 2,000 evaluated validation images at 32x32: 25 MB) is decoded
once and kept; ImageNet's training split (1.28M images, 15.7 GB at 32x32) and ViT-B/16's
10,000 validation images at 224x224 (6 GB) are decoded batch by batch every time."""


@dataclass(frozen=True)
class ImageFolderData(TaskData):
    """Train and validation ImageFolders, decoded lazily: ``train_batch`` loads only the
    images of the ``[n, B]`` indices it is given, ``val_batches`` the capped validation
    subset in chunks. A split small enough to keep (``keep_decoded_bytes``, see
    :data:`KEEP_DECODED_BYTES`) keeps each image once decoded: the transform is
    deterministic (:data:`CROP_PCT`, no augmentation), so a kept image is the tensor a
    fresh decode gives, and runs give the same metrics either way (on the CPU tier's
    ImageNet stand-in, decoding was about a fifth of a training iteration and most of an
    evaluation)."""

    train: ImageFolder
    val: ImageFolder
    eval_images: int
    eval_batch: int
    source: str
    keep_decoded_bytes: int = KEEP_DECODED_BYTES
    _kept: dict[tuple[str, int], Tensor] = field(default_factory=dict, init=False,
                                                 repr=False, compare=False)
    _keeps: dict[str, bool] = field(default_factory=dict, init=False, repr=False,
                                    compare=False)

    @property
    def num_train(self) -> int:
        return len(self.train)

    @property
    def num_classes(self) -> int:
        return len(self.train.classes)

    @property
    def kept_images(self) -> int:
        """Decoded images held in memory (both splits)."""
        return len(self._kept)

    def _image(self, split: str, index: int) -> Tensor:
        """Image ``index`` of ``split``, transformed; kept when the split fits (decided at
        its first image: that image's size times the images a run can touch)."""
        kept = self._kept.get((split, index))
        if kept is not None:
            return kept
        image = self._folder(split)[index][0]
        keeps = self._keeps.get(split)
        if keeps is None:
            count = self.num_train if split == "train" else len(self.eval_indices())
            keeps = image.numel() * image.element_size() * count <= self.keep_decoded_bytes
            self._keeps[split] = keeps
        if keeps:
            self._kept[(split, index)] = image
        return image

    def _folder(self, split: str) -> ImageFolder:
        return self.train if split == "train" else self.val

    def _load(self, split: str, indices: Sequence[int]) -> tuple[Tensor, Tensor]:
        folder = self._folder(split)
        images = torch.stack([self._image(split, i) for i in indices])
        return images, torch.tensor([folder.targets[i] for i in indices], dtype=torch.long)

    def train_batch(self, indices: Tensor) -> tuple[Tensor, Tensor]:
        images, targets = self._load("train", indices.reshape(-1).tolist())
        return (images.view(*indices.shape, *images.shape[1:]), targets.view(indices.shape))

    def eval_indices(self) -> list[int]:
        """At most ``eval_images`` validation indices, evenly spaced over the split (which
        ImageFolder sorts by class), so every class is represented."""
        total = len(self.val)
        count = min(total, self.eval_images)
        return [i * total // count for i in range(count)]

    def val_batches(self) -> Iterator[tuple[Tensor, Tensor]]:
        indices = self.eval_indices()
        for start in range(0, len(indices), self.eval_batch):
            yield self._load("val", indices[start: start + self.eval_batch])


class VitImageNet(ClassificationTask):
    name = "vit-imagenet"
    full_train_examples = 1_281_167   # ImageNet-1k's (ILSVRC 2012) training split
    description = ("ViT-B/16 (timm, 86.6M parameters; from scratch, or ImageNet-21k weights "
                   "with --init pretrained) on ImageNet-1k from a class-per-folder tree, top-1 "
                   "accuracy")
    vectorise = True
    """timm's Attention is switched to its explicit (non-fused) path in :meth:`build_model`:
    matmul + softmax have vmap batching rules on every device, while the fused CPU kernel
    ``_scaled_dot_product_flash_attention_for_cpu`` has none (vmap falls back to a slow
    per-sample loop and warns). Per-worker gradients match the per-worker loop to 1e-6."""
    profiles = {
        "paper": TaskProfile(
            name="paper", model="vit-b16", batch_size=128, lr=0.03, momentum=0.9,
            schedule="warmup", warmup_iters=500, eval_every=1000, max_iters=100_000,
            compute_time_s=0.327,
            compute_time_source=(
                "timm's published training benchmark of vit_base_patch16_224 on one NVIDIA "
                "RTX 3090 with AMP (huggingface/pytorch-image-models, results/benchmark-train-"
                "amp-nchw-pt112-cu113-rtx3090.csv: 390.86 images/s, 490.4 ms per step of 192): "
                "2.558 ms per image x 128 images per worker = 0.327 s. Cross-check: 17.56 GMAC "
                "forward per image (patch embedding + 12 x (qkv, attention, projection, MLP)), "
                "x 2 FLOP/MAC x 3 for forward + backward = 105.4 GFLOP per image, i.e. 41 "
                "TFLOP/s on the 3090 (58% of its 71 TFLOP/s dense fp16 tensor peak); one A100 "
                "at 40% of 312 TFLOP/s would take 128 x 105.4 GFLOP / 124.8 TFLOP/s = 0.108 s "
                "(--compute-time-s 0.108)"),
        ),
        "cpu": TaskProfile(
            name="cpu", model="vit-mini-32", batch_size=32, lr=0.01, momentum=0.9,
            schedule="warmup", warmup_iters=50, eval_every=100, max_iters=3000,
            compute_time_s=0.07,
            compute_time_source=(
                "measured: median wall time of one forward/backward of vit-mini-32 (1000 "
                "classes) on a batch of 32 at 32x32, 2 threads on a 2-core AMD EPYC (x86-64) "
                "CPU, torch 2.15, 2026-11-21: medians of 40 runs 0.068-0.080 s over four "
                "measurements (other jobs running), fastest single run 0.059 s"),
        ),
    }

    def __init__(self) -> None:
        self.num_classes: int | None = None
        """Classes of the last data loaded (the head's width); None before any data."""

    def spec(self, profile: TaskProfile) -> VitSpec:
        if profile.model not in MODELS:
            raise DecobenchError(f"task {self.name}: profile {profile.name!r} names model "
                                 f"{profile.model!r}; known models: {', '.join(MODELS)}")
        return MODELS[profile.model]

    def pretrained_weights(self, profile: TaskProfile) -> str | None:
        name = self.spec(profile).pretrained
        return None if name is None else (
            f"timm {name} (ImageNet-21k pre-training, Hugging Face Hub timm/{name}), a new "
            "classifier head with one output per class")

    def normalisation(self, spec: VitSpec) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Per-channel mean and std of the input pipeline: ImageNet's (timm's
        ``IMAGENET_DEFAULT_MEAN/STD``) from scratch; the pretrained weights' own (from
        timm's pretrained config, no download; 0.5, 0.5 for AugReg) with ``--init
        pretrained``, the inputs those weights were trained on."""
        if self.init == "pretrained" and spec.pretrained is not None:
            cfg = timm.models.get_pretrained_cfg(spec.pretrained)
            if cfg is not None:
                return tuple(cfg.mean), tuple(cfg.std)
        return IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

    def check_data(self, data_root: Path | None, download: bool,
                   variant: str | None = None) -> None:
        if data_root is None:
            raise DecobenchError(f"task {self.name} needs --data-root: {HOW_TO_GET}")
        root = Path(data_root)
        classes: dict[str, list[str]] = {}
        for split in SPLITS:
            folder = root / split
            if not folder.is_dir():
                raise DecobenchError(f"--data-root {root}: no {split}/ folder of class "
                                     f"folders at {folder}; {HOW_TO_GET}")
            names = sorted(e.name for e in os.scandir(folder) if e.is_dir())
            empty = [n for n in names if not _has_image(folder / n)]
            if not names or (split == "train" and empty):
                what = (f"class folders without images ({', '.join(empty[:3])}"
                        f"{', ...' if len(empty) > 3 else ''})" if names else
                        "no class folders")
                raise DecobenchError(f"--data-root {root}: {folder} has {what}; expected "
                                     f"{folder}/<wnid>/*.JPEG; {HOW_TO_GET}")
            if len(empty) == len(names):
                raise DecobenchError(f"--data-root {root}: {folder} has no images; expected "
                                     f"{folder}/<wnid>/*.JPEG; {HOW_TO_GET}")
            classes[split] = names
        unknown = sorted(set(classes["val"]) - set(classes["train"]))
        if unknown:
            raise DecobenchError(
                f"--data-root {root}: val/ has class folders that train/ lacks "
                f"({', '.join(unknown[:3])}{', ...' if len(unknown) > 3 else ''}); both splits "
                "must use the same class folder names (ImageNet: the wnids)")

    def load_data(self, data_root: Path | None, download: bool, profile: TaskProfile,
                  variant: str | None = None) -> TaskData:
        self.check_data(data_root, download, variant)
        assert data_root is not None
        spec = self.spec(profile)
        root = Path(data_root)
        resize = int(spec.image_size / CROP_PCT)
        mean, std = self.normalisation(spec)
        options: dict[str, Any] = {
            "transform": create_transform(spec.image_size, is_training=False,
                                          interpolation="bicubic", crop_pct=CROP_PCT,
                                          mean=mean, std=std),
            "loader": partial(open_rgb, min_side=resize)}
        train = ImageFolder(str(root / "train"), **options)
        val = _FolderWithClasses(str(root / "val"), train.class_to_idx, **options)
        self.num_classes = len(train.classes)
        label = standin_label(root)
        return ImageFolderData(train=train, val=val, eval_images=spec.eval_images,
                               eval_batch=spec.eval_batch,
                               source=str(root) if label is None else f"{root}; {label}")

    def build_model(self, profile: TaskProfile) -> nn.Module:
        spec = self.spec(profile)
        return self._create(spec, spec.arch, pretrained=False)

    def build_pretrained_model(self, profile: TaskProfile) -> nn.Module:
        spec = self.spec(profile)
        if spec.pretrained is None:
            return super().build_pretrained_model(profile)
        try:
            return self._create(spec, spec.pretrained, pretrained=True)
        except DecobenchError:
            raise
        except Exception as exc:   # a download or cache failure, reported in one line
            raise pretrained_load_error(f"timm {spec.pretrained}", exc) from exc

    def _create(self, spec: VitSpec, name: str, pretrained: bool) -> nn.Module:
        """timm's ``name`` with one head output per class (a pretrained head of another
        width is left out by timm and initialised from the RNG), no dropout, explicit
        attention."""
        model = timm.create_model(name, pretrained=pretrained,
                                  num_classes=self.num_classes or spec.default_classes,
                                  **spec.arch_kwargs, **NO_DROPOUT)
        for module in model.modules():
            if hasattr(module, "fused_attn"):
                module.fused_attn = False   # see ``vectorise``
        return model

    @torch.no_grad()
    def evaluate(self, forward: Callable[[Tensor], Tensor], data: TaskData) -> float:
        assert isinstance(data, ImageFolderData)
        correct = total = 0
        for inputs, targets in data.val_batches():
            logits = forward(inputs)
            correct += int((logits.argmax(dim=1) == targets.to(logits.device)).sum())
            total += len(targets)
        return correct / total


def _has_image(folder: Path) -> bool:
    return any(e.is_file() and e.name.lower().endswith(IMG_EXTENSIONS)
               for e in os.scandir(folder))


def write_image_folder(root: Path, images: Tensor, labels: Tensor, classes: Sequence[str],
                       ext: str = "png") -> None:
    """Write uint8 ``images`` (``[N, H, W]`` grey or ``[N, H, W, 3]`` RGB) as RGB files
    ``root/<classes[label]>/<i:06d>.<ext>``: one split of an ImageFolder tree (a class
    folder exists only when it holds an image)."""
    for i, (image, label) in enumerate(zip(images, labels.tolist(), strict=True)):
        folder = Path(root) / classes[label]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image.numpy()).convert("RGB").save(folder / f"{i:06d}.{ext}")
