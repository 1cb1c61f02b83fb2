"""Tokenizers for the language-modelling task: GPT-2's BPE when it is on disk, otherwise a
byte-level BPE trained on the training text and cached.

GPT-2's own tokenizer (``GPT2TokenizerFast.from_pretrained("gpt2")``, 50,257 tokens) is
only looked up in the local Hugging Face cache (``local_files_only=True``), so an offline
machine never waits on the network; users who want it run that call once online. The one
exception is ``--init pretrained`` (:func:`fetch_gpt2_bpe`): GPT-2's weights only make sense
with GPT-2's tokenizer, so it is downloaded with them when the cache lacks it. Otherwise
a byte-level BPE (the scheme GPT-2 uses, Radford et al. 2019) is trained with the
``tokenizers`` library on the training text and cached as a ``tokenizer.json`` file under
``$DECOBENCH_CACHE/tokenizers/`` (default ``~/.cache/decobench/tokenizers/``), keyed by
the SHA-256 of the training text and the vocabulary size, so a second run reuses it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import ByteLevelBPETokenizer, Tokenizer
from torch import Tensor

from decobench.atomicio import write_text_atomic
from decobench.tasks.base import pretrained_load_error

GPT2_VOCAB_SIZE = 50257
"""Tokens of GPT-2's BPE: 256 bytes + 50,000 merges + ``<|endoftext|>`` (Radford et al.
2019; ``len(GPT2TokenizerFast.from_pretrained("gpt2"))``)."""

_LINES_PER_CHUNK = 10_000
"""Lines encoded per ``encode_batch`` call: bounds memory on WikiText-103 (1.8M lines)."""


@dataclass(frozen=True)
class TextTokenizer:
    """A ``tokenizers.Tokenizer`` and a description of where it came from (recorded in the
    run's ``config.yaml`` as part of ``data_source``)."""

    tokenizer: Tokenizer
    description: str
    from_cache: bool = False
    """True when a trained tokenizer was read from the cache instead of trained."""
    gpt2: bool = False
    """True for GPT-2's own BPE (:func:`load_gpt2_bpe`), the vocabulary of GPT-2's
    pretrained weights."""

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> Tensor:
        """The token ids of ``text`` as one int32 stream.

        Lines are encoded separately (``encode_batch``, in parallel) and concatenated; a
        byte-level pre-tokenizer never merges across a newline except for runs of
        whitespace, so this is the tokenization of the whole text up to such runs."""
        pieces = [np.zeros(0, dtype=np.int32)]
        for lines in _chunks(text.splitlines(keepends=True)):
            encoded = self.tokenizer.encode_batch(lines, add_special_tokens=False)
            pieces.append(np.concatenate([np.zeros(0, dtype=np.int32)] + [
                np.asarray(e.ids, dtype=np.int32) for e in encoded]))
        return torch.from_numpy(np.concatenate(pieces))


def _chunks(lines: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(lines), _LINES_PER_CHUNK):
        yield lines[start: start + _LINES_PER_CHUNK]


def cache_root() -> Path:
    """``$DECOBENCH_CACHE`` when set, else ``~/.cache/decobench`` (read at call time)."""
    env = os.environ.get("DECOBENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "decobench"


def load_gpt2_bpe(name_or_path: str = "gpt2") -> TextTokenizer | None:
    """GPT-2's BPE from the local Hugging Face cache, or None when it is not there.

    Never touches the network. Recent ``transformers`` return an empty tokenizer instead of
    raising when the files are missing, so the vocabulary size is checked too."""
    from transformers import GPT2TokenizerFast

    try:
        loaded = GPT2TokenizerFast.from_pretrained(name_or_path, local_files_only=True)
    except Exception:  # any failure means "not available offline"
        return None
    if len(loaded) != GPT2_VOCAB_SIZE:
        return None
    return TextTokenizer(loaded.backend_tokenizer,
                         f"GPT-2 BPE (transformers GPT2TokenizerFast {name_or_path!r}, "
                         f"vocab {GPT2_VOCAB_SIZE})", gpt2=True)


def fetch_gpt2_bpe(name_or_path: str = "gpt2") -> TextTokenizer:
    """GPT-2's BPE for ``--init pretrained``: from the local Hugging Face cache, else
    downloaded into it first. Raises a one-line DecobenchError saying how to provide it."""
    found = load_gpt2_bpe(name_or_path)
    if found is not None:
        return found
    from transformers import GPT2TokenizerFast

    what = (f"GPT-2's tokenizer (transformers GPT2TokenizerFast {name_or_path!r}), which "
            "GPT-2's weights need")
    try:
        loaded = GPT2TokenizerFast.from_pretrained(name_or_path)
    except Exception as exc:  # offline, no cache, a broken download: one line
        raise pretrained_load_error(what, exc) from exc
    found = load_gpt2_bpe(name_or_path)
    if found is None:    # recent transformers return an empty tokenizer when files are missing
        raise pretrained_load_error(what, LookupError(
            f"transformers returned a tokenizer of {len(loaded)} tokens, not GPT-2's "
            f"{GPT2_VOCAB_SIZE}: its files are neither cached nor downloaded"))
    return found


def trained_bpe_path(train_text: str, vocab_size: int, cache_dir: Path | None = None) -> Path:
    """The cache file of the byte-level BPE for ``(train_text, vocab_size)``."""
    digest = hashlib.sha256(train_text.encode("utf-8"))
    digest.update(f"\0vocab={vocab_size}".encode())
    return (cache_dir if cache_dir is not None else cache_root() / "tokenizers") / (
        digest.hexdigest() + ".json")


def trained_bpe(train_text: str, vocab_size: int, cache_dir: Path | None = None) -> TextTokenizer:
    """A byte-level BPE with at most ``vocab_size`` tokens trained on ``train_text``
    (``ByteLevelBPETokenizer``: no prefix space, merges of pairs seen at least twice, no
    special tokens), read from the cache when it was trained before."""
    path = trained_bpe_path(train_text, vocab_size, cache_dir)
    if path.is_file():
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception:  # a damaged cache entry is retrained below
            pass
        else:
            return TextTokenizer(tokenizer, _trained_description(tokenizer, vocab_size, path),
                                 from_cache=True)
    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(_chunks(train_text.splitlines(keepends=True)),
                            vocab_size=vocab_size, min_frequency=2, show_progress=False)
    tokenizer = Tokenizer.from_str(bpe.to_str())
    write_text_atomic(path, tokenizer.to_str())
    return TextTokenizer(tokenizer, _trained_description(tokenizer, vocab_size, path))


def _trained_description(tokenizer: Tokenizer, vocab_size: int, path: Path) -> str:
    return (f"byte-level BPE trained on the training text (tokenizers ByteLevelBPETokenizer, "
            f"vocab {tokenizer.get_vocab_size()} of {vocab_size} requested), cached at {path}")


def choose_tokenizer(train_text: str, vocab_size: int, cache_dir: Path | None = None,
                     gpt2: Callable[[], TextTokenizer | None] = load_gpt2_bpe) -> TextTokenizer:
    """GPT-2's BPE when ``vocab_size`` is GPT-2's and it is cached locally; otherwise the
    trained byte-level BPE of ``vocab_size`` tokens."""
    if vocab_size == GPT2_VOCAB_SIZE:
        found = gpt2()
        if found is not None:
            return found
    return trained_bpe(train_text, vocab_size, cache_dir)
