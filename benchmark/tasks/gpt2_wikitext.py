"""GPT-2@WikiText: a GPT-2 language model trained on WikiText, from scratch (default) or from
OpenAI's GPT-2 weights (``--init pretrained``, paper profile), perplexity (exp of the mean
token cross-entropy) on the test split.

The model is ``transformers``' ``GPT2LMHeadModel``, built from a ``GPT2Config`` (scratch) or
by ``GPT2LMHeadModel.from_pretrained("gpt2")`` with the same overrides (pretrained; the
tokenizer must then be GPT-2's BPE). The token stream of each split is cut into
non-overlapping blocks of the profile's context length L; block i's inputs are tokens
``[iL, (i+1)L)`` and its targets the same tokens shifted by one, ``[iL+1, (i+1)L+1)``, so
every token but the first is predicted exactly once.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from decobench.errors import DecobenchError
from decobench.methods.rules import UpdateRules
from decobench.tasks.base import Task, TaskData, TaskProfile, pretrained_load_error
from decobench.tasks.cnn_fmnist import default_data_root
from decobench.tasks.tokenizer import GPT2_VOCAB_SIZE, choose_tokenizer, fetch_gpt2_bpe

if TYPE_CHECKING:
    from transformers import GPT2Config

HF_DATASET = "Salesforce/wikitext"
"""The Hugging Face Hub id of WikiText (Merity et al. 2016; formerly ``wikitext``)."""


@dataclass(frozen=True)
class Gpt2Shape:
    """The GPT-2 configuration of a profile and how much of the test split it evaluates."""

    n_layer: int
    n_embd: int
    n_head: int
    context: int
    vocab_size: int
    eval_blocks: int | None
    """Test blocks evaluated (the first ones, in order); None: the whole test split."""
    eval_batch: int
    """Blocks per forward pass during evaluation."""
    pretrained: str | None = None
    """The Hugging Face Hub id of published weights of exactly this shape, which ``--init
    pretrained`` loads (None: there are none)."""

    def overrides(self) -> dict[str, object]:
        """The settings every model of this task has, from scratch or pretrained: no
        dropout, so a worker's forward pass is a pure function of (x, batch); no KV cache;
        eager attention (see :meth:`config`) until a forward pass picks its own
        (:func:`attention_for`)."""
        return {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "use_cache": False,
                "attn_implementation": "eager"}

    def config(self) -> GPT2Config:
        """GPT-2's architecture at this size. Dropout is 0 so a worker's forward pass is a
        pure function of (x, batch); attention is the eager (matmul + softmax) code, which
        ``torch.func.vmap`` batches, while SDPA has no vmap batching rule on CPU and falls
        back to a slow per-sample loop (measured here: same gradients, several times slower).
        On a GPU outside vmap each forward pass switches to SDPA (:func:`attention_for`)."""
        from transformers import GPT2Config

        return GPT2Config(
            vocab_size=self.vocab_size, n_positions=self.context, n_embd=self.n_embd,
            n_layer=self.n_layer, n_head=self.n_head,
            bos_token_id=None, eos_token_id=None,              # no generation, no special ids
            **self.overrides())                                # no dropout, eager attention

    def mismatch(self, config: GPT2Config) -> str | None:
        """How a loaded model's ``config`` differs from this shape, or None."""
        wrong = [f"{name} {getattr(config, name, None)} (expected {value})" for name, value in (
            ("vocab_size", self.vocab_size), ("n_positions", self.context),
            ("n_embd", self.n_embd), ("n_layer", self.n_layer), ("n_head", self.n_head))
            if getattr(config, name, None) != value]
        return ", ".join(wrong) or None


MODELS: dict[str, Gpt2Shape] = {
    # GPT-2 small (Radford et al. 2019, "117M", 124,439,808 parameters with tied embeddings).
    # --init pretrained: OpenAI's GPT-2 small weights, Hugging Face Hub "gpt2" (WebText).
    "gpt2-small": Gpt2Shape(n_layer=12, n_embd=768, n_head=12, context=1024,
                            vocab_size=GPT2_VOCAB_SIZE, eval_blocks=None, eval_batch=8,
                            pretrained="gpt2"),
    # This project's mid-size model (issue 43): 6 layers of width 512, context 256, a
    # 16,384-token BPE: 27.4M parameters, 31% of them the tied embedding as in GPT-2 small,
    # where compressed training's instability at 124M can be measured on 2 CPU cores.
    "gpt2-mid": Gpt2Shape(n_layer=6, n_embd=512, n_head=8, context=256, vocab_size=16384,
                          eval_blocks=64, eval_batch=16),
    # This project's CPU model: 2 layers of width 128, context 128, a 4,096-token BPE.
    "gpt2-tiny": Gpt2Shape(n_layer=2, n_embd=128, n_head=2, context=128, vocab_size=4096,
                           eval_blocks=256, eval_batch=32),
}


def under_vmap() -> bool:
    """Whether the caller runs inside ``torch.func.vmap`` (the functorch interpreter stack
    holds a vmap level)."""
    from torch._C._functorch import TransformType, get_interpreter_stack

    return any(level.key() == TransformType.Vmap for level in get_interpreter_stack() or ())


def attention_for(device: torch.device, vmapped: bool) -> str:
    """GPT-2's attention code for a forward pass on ``device``: ``sdpa`` (PyTorch's fused
    ``scaled_dot_product_attention``, which never writes the [L, L] score matrices) on a GPU
    outside ``vmap``; ``eager`` (matmul + softmax) under ``vmap``, which SDPA has no batching
    rule for, and on the CPU, whose results the project pins (docs/gradients.md "Mixed
    precision"). Both compute the same attention up to float rounding."""
    return "sdpa" if device.type == "cuda" and not vmapped else "eager"


class Gpt2LanguageModel(nn.Module):
    """``GPT2LMHeadModel`` whose ``forward(input_ids [B, L])`` returns logits ``[B, L, V]``,
    so ``torch.func.functional_call`` can run it with flat parameters. Random weights, or
    with ``pretrained`` (a Hub id or local folder) those weights, which must have ``shape``.
    Each forward pass picks its attention code with :func:`attention_for`."""

    def __init__(self, shape: Gpt2Shape, pretrained: str | None = None) -> None:
        super().__init__()
        from transformers import GPT2LMHeadModel

        if pretrained is None:
            self.gpt = GPT2LMHeadModel(shape.config())      # random init
            return
        try:
            gpt = GPT2LMHeadModel.from_pretrained(pretrained, **shape.overrides())
        except Exception as exc:   # a download or cache failure, reported in one line
            raise pretrained_load_error(
                f"transformers GPT2LMHeadModel.from_pretrained({pretrained!r})", exc) from exc
        wrong = shape.mismatch(gpt.config)
        if wrong:
            raise DecobenchError(f"--init pretrained: the weights {pretrained!r} do not have "
                                 f"this profile's GPT-2 shape: {wrong}")
        self.gpt = gpt.float().train()     # fp32 like the scratch model; no dropout anyway

    def forward(self, input_ids: Tensor) -> Tensor:
        self.gpt.config._attn_implementation = attention_for(input_ids.device, under_vmap())
        return self.gpt(input_ids=input_ids, use_cache=False).logits


@dataclass(frozen=True)
class TokenBlocks(TaskData):
    """Token streams of the train and test splits, read as blocks of ``context`` tokens.

    Example ``i`` is block i: ``inputs = tokens[iL: (i+1)L]``, ``targets = tokens[iL+1:
    (i+1)L+1]``. Streams are int32 (one copy; WikiText-103 is ~120M tokens); batches are
    int64."""

    train_tokens: Tensor
    test_tokens: Tensor
    context: int
    source: str
    eval_blocks: int | None = None
    """Test blocks :meth:`Gpt2WikiText.evaluate` reads (the first ones); None: all."""
    eval_batch: int = 8
    """Test blocks per forward pass."""

    @property
    def num_train(self) -> int:
        return num_blocks(len(self.train_tokens), self.context)

    @property
    def num_test(self) -> int:
        return num_blocks(len(self.test_tokens), self.context)

    def train_batch(self, indices: Tensor) -> tuple[Tensor, Tensor]:
        return block_batch(self.train_tokens, indices, self.context)

    def test_batch(self, indices: Tensor) -> tuple[Tensor, Tensor]:
        return block_batch(self.test_tokens, indices, self.context)


def num_blocks(tokens: int, context: int) -> int:
    """Whole blocks of ``context`` inputs (plus one target past the end) in a stream."""
    return max(0, (tokens - 1) // context)


def block_batch(tokens: Tensor, indices: Tensor, context: int) -> tuple[Tensor, Tensor]:
    """Inputs and targets ``[*indices.shape, context]`` of blocks ``indices``."""
    positions = indices.unsqueeze(-1) * context + torch.arange(context)
    return tokens[positions].long(), tokens[positions + 1].long()


def perplexity(forward: Callable[[Tensor], Tensor], data: TokenBlocks,
               max_blocks: int | None = None, batch: int = 8) -> float:
    """exp(mean cross-entropy over every target token) of the first ``max_blocks`` test
    blocks (all when None), ``batch`` blocks per forward pass; ``inf`` for a model so far
    off that the exponential overflows a float (mean cross-entropy above about 709 nats: a
    diverging run, which must be recorded, not crash)."""
    blocks = data.num_test if max_blocks is None else min(max_blocks, data.num_test)
    total, count = 0.0, 0
    for start in range(0, blocks, batch):
        inputs, targets = data.test_batch(torch.arange(start, min(start + batch, blocks)))
        logits = forward(inputs)
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                       targets.reshape(-1).to(logits.device),
                                       reduction="sum"))
        count += targets.numel()
    mean = total / count
    return math.exp(mean) if mean < math.log(sys.float_info.max) else math.inf


class Gpt2WikiText(Task):
    name = "gpt2-wikitext"
    description = ("GPT-2 on WikiText (124M parameters in the paper profile; from scratch, or "
                   "OpenAI's weights with --init pretrained), test perplexity")
    metric_name = "perplexity"
    higher_is_better = False
    dataset_variants = ("wikitext-2-raw-v1", "wikitext-103-raw-v1")
    profiles = {
        "paper": TaskProfile(
            name="paper", model="gpt2-small", batch_size=12, lr=0.01, eval_every=100,
            max_iters=10000,
            compute_time_s=0.079,
            compute_time_source=(
                "derived, not measured: one NVIDIA A100 (312 TFLOP/s dense bf16 peak, A100 "
                "datasheet) at an assumed 40% model-FLOPs utilisation (Chowdhery et al. 2022, "
                "PaLM Table 3, report 21-46% for large-model training); training FLOPs per "
                "token 6N + 6 n_layer n_ctx d (Kaplan et al. 2020) = 6 x 124,439,808 + 6 x 12 "
                "x 1024 x 768 = 803.3 MFLOP, x 12 x 1024 tokens = 9.87 TFLOP per iteration; "
                "T = 9.87e12 / (0.40 x 312e12) = 0.079 s"),
            # issue 43: at 124M the paper pipeline breaks down under DeCo-SGD's plan, and
            # clipping each worker's gradient to norm 1 (which the paper's text leaves open)
            # keeps it on trend; every method trains with it (docs/tasks/gpt2-wikitext.md
            # "Stability at 124M"; --clip-norm 0 for the paper pipeline)
            rules=UpdateRules(clip_norm=1.0),
        ),
        "mid": TaskProfile(
            name="mid", model="gpt2-mid", batch_size=4, lr=0.01, eval_every=50,
            max_iters=1000, compute_time_s=1.06,
            compute_time_source=(
                "measured: one forward/backward of gpt2-mid (27.4M parameters) at batch 4 x "
                "256 tokens, median of 20 passes after 5 warm-up passes = 1.03 and 1.08 s in "
                "two runs (min 0.97 s) on a 2-core AMD EPYC VM, torch 2.14.1 (CPU, 2 "
                "threads), 2026-11-28, other jobs paused"),
        ),
        "cpu": TaskProfile(
            name="cpu", model="gpt2-tiny", batch_size=4, lr=0.05, eval_every=50, max_iters=2000,
            compute_time_s=0.035,
            compute_time_source=(
                "measured: one forward/backward of gpt2-tiny at batch 4 x 128 tokens, "
                "median of 30 passes after 5 warm-up passes = 0.033-0.038 s over three "
                "runs (min 0.028 s) on a 2-core AMD EPYC VM, torch 2.15.0 (CPU, 2 threads), "
                "2026-11-21; up to 10x slower while other jobs shared the cores"),
        ),
    }

    def shape(self, profile: TaskProfile) -> Gpt2Shape:
        if profile.model not in MODELS:
            raise DecobenchError(f"task {self.name}: unknown model {profile.model!r}; "
                                 f"choose from {', '.join(sorted(MODELS))}")
        return MODELS[profile.model]

    def pretrained_weights(self, profile: TaskProfile) -> str | None:
        name = self.shape(profile).pretrained
        return None if name is None else (
            f"transformers GPT2LMHeadModel.from_pretrained({name!r}) (OpenAI's GPT-2, Hugging "
            "Face Hub), with GPT-2's BPE tokenizer")

    def check_pretrained(self, profile: TaskProfile) -> None:
        """GPT-2's weights index GPT-2's vocabulary: its BPE must be the tokenizer, so it
        is fetched now (local cache, else download) rather than a BPE trained here."""
        fetch_gpt2_bpe(self.shape(profile).pretrained or "gpt2")

    def validate_target(self, target: float) -> None:
        if not (math.isfinite(target) and target > 1.0):
            raise DecobenchError(f"{target} is not a perplexity; give a value > 1 "
                                 "(a perplexity is at least 1; lower is better)")

    def check_data(self, data_root: Path | None, download: bool,
                   variant: str | None = None) -> None:
        if data_root is None:
            return
        root = Path(data_root)
        train = root / "train.txt" if (root / "train.txt").is_file() else root / "valid.txt"
        problems = []
        for path, name in ((train, "train.txt (or valid.txt, which trains when train.txt "
                                   "is absent)"), (root / "test.txt", "test.txt")):
            if not path.is_file():
                problems.append(name)
            elif path.stat().st_size == 0:
                problems.append(f"{path.name} is empty")
        if problems:
            raise DecobenchError(
                f"--data-root {data_root}: WikiText text files missing or empty: "
                f"{'; '.join(problems)}; "
                "point --data-root at a folder holding plain-text train.txt (or valid.txt) and "
                "test.txt, e.g. ../shared/data/wikitext-2, or omit it to download "
                f"{HF_DATASET} ({', '.join(self.dataset_variants)}) from the Hugging Face Hub")

    def data_kind(self, data: TaskData) -> str:
        """``slice`` when the run trains on valid.txt (no train.txt in the data root, as in
        ../shared/data/wikitext-2), ``full`` on a training split."""
        kind = super().data_kind(data)
        return "slice" if kind == "full" and "trains on valid.txt" in data.source else kind

    def load_data(self, data_root: Path | None, download: bool, profile: TaskProfile,
                  variant: str | None = None) -> TaskData:
        shape = self.shape(profile)
        variant = self.dataset_variant(variant)
        if data_root is not None:
            train_text, test_text, where = _read_text_files(Path(data_root))
        else:
            train_text, test_text, where = _download_wikitext(variant or "", download)
        tokenizer = choose_tokenizer(train_text, shape.vocab_size)
        if self.init == "pretrained" and not tokenizer.gpt2:
            raise DecobenchError(
                "--init pretrained: GPT-2's weights need GPT-2's BPE tokenizer, but the data "
                f"were tokenized with a {tokenizer.description}; put GPT-2's tokenizer in the "
                "Hugging Face cache (GPT2TokenizerFast.from_pretrained('gpt2') once online) or "
                "use --init scratch")
        if tokenizer.vocab_size > shape.vocab_size:
            raise DecobenchError(f"tokenizer has {tokenizer.vocab_size} tokens but the "
                                 f"{profile.name} profile's model has {shape.vocab_size}")
        data = TokenBlocks(train_tokens=tokenizer.encode(train_text),
                           test_tokens=tokenizer.encode(test_text), context=shape.context,
                           source=f"{where}; tokenizer: {tokenizer.description}",
                           eval_blocks=shape.eval_blocks, eval_batch=shape.eval_batch)
        for split, blocks in (("training", data.num_train), ("test", data.num_test)):
            if blocks == 0:
                raise DecobenchError(f"{where}: the {split} text has fewer than "
                                     f"{shape.context + 1} tokens, not one block of context "
                                     f"{shape.context}; give more text")
        return data

    def build_model(self, profile: TaskProfile) -> nn.Module:
        return Gpt2LanguageModel(self.shape(profile))

    def build_pretrained_model(self, profile: TaskProfile) -> nn.Module:
        shape = self.shape(profile)
        if shape.pretrained is None:
            return super().build_pretrained_model(profile)
        return Gpt2LanguageModel(shape, pretrained=shape.pretrained)

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """Mean token cross-entropy of logits ``[..., L, V]`` against targets ``[..., L]``."""
        return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))

    @torch.no_grad()
    def evaluate(self, forward: Callable[[Tensor], Tensor], data: TaskData) -> float:
        assert isinstance(data, TokenBlocks)
        return perplexity(forward, data, data.eval_blocks, data.eval_batch)


def _read_text_files(root: Path) -> tuple[str, str, str]:
    """Training and test text from ``root``: train.txt (else valid.txt) and test.txt."""
    train = root / "train.txt" if (root / "train.txt").is_file() else root / "valid.txt"
    try:
        texts = [p.read_text(encoding="utf-8") for p in (train, root / "test.txt")]
    except UnicodeDecodeError as exc:
        raise DecobenchError(f"--data-root {root}: not UTF-8 text ({exc}); give the plain "
                             "WikiText files") from exc
    return texts[0], texts[1], f"{root} (trains on {train.name}, evaluates on test.txt)"


def _download_wikitext(variant: str, download: bool) -> tuple[str, str, str]:
    """The train and test splits of ``variant`` via ``datasets`` (cached under the
    default data root)."""
    from datasets import load_dataset

    cache = default_data_root() / "huggingface"
    splits = load_dataset(HF_DATASET, variant, cache_dir=str(cache))
    train, test = (join_rows(splits[s]["text"]) for s in ("train", "test"))
    return train, test, f"{HF_DATASET} {variant} (Hugging Face datasets, cache {cache})"


def join_rows(rows: list[str]) -> str:
    """The text of a split from its ``datasets`` rows, one per line of the original
    ``wiki.*.raw`` file: rows keep (or get) their newline, and empty rows, the files' blank
    lines, become ``" \\n"`` as in those files (and in ../shared/data/wikitext-2)."""
    return "".join(row if row.endswith("\n") else (row or " ") + "\n" for row in rows)
