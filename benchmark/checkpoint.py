"""Checkpoints of a simulated run: its whole training state, written atomically every few
minutes of wall time, so that ``decobench run --resume`` continues an interrupted run
instead of restarting it and ends with the same metrics as an uninterrupted run.

The state is everything the next iteration reads: the flat parameters, the method object
whole (error-feedback memories, messages in flight, controller and estimators), the
transport's state (the event clock and the observations in flight), the data order
(:class:`~decobench.sharding.ShardedBatches`), the outcome and target book so far, the
torch RNG state and the model's buffers. It is pickled with :func:`torch.save` into
``checkpoint.pt`` beside the metrics (a temporary file renamed over the old one), with a
fingerprint of the run's configuration; a checkpoint from another configuration is refused.
The metrics rows written after the checkpoint are dropped on resume (the resumed run writes
them again).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from decobench.config import RunConfig
from decobench.errors import DecobenchError

CHECKPOINT = "checkpoint.pt"
NOT_COMPUTATION = {"out", "data_root", "checkpoint_every_s"}
"""Run-config fields a checkpoint may differ in (where files go, how often to save)."""


def fingerprint(config: RunConfig) -> str:
    """SHA-256 of the configuration fields that decide what a run computes."""
    values = config.model_dump(mode="json", exclude=NOT_COMPUTATION)
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()


@dataclass
class Checkpointer:
    """Saves the state every ``every_s`` seconds of wall time (never when None)."""

    path: Path
    every_s: float | None
    fingerprint: str
    _last: float = field(default_factory=time.monotonic)

    def due(self) -> bool:
        return self.every_s is not None and time.monotonic() - self._last >= self.every_s

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state`` atomically (the previous checkpoint stays until the rename)."""
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp",
                                   dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                torch.save({**state, "fingerprint": self.fingerprint}, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._last = time.monotonic()

    def remove(self) -> None:
        """Delete the checkpoint (the run finished) and any temporary file a killed save
        left behind."""
        self.path.unlink(missing_ok=True)
        for stale in self.path.parent.glob(f".{self.path.name}.*.tmp"):
            stale.unlink(missing_ok=True)


def load_checkpoint(path: Path, expected: str) -> dict[str, Any]:
    """The state saved at ``path``; one-line errors when there is none or it belongs to
    another configuration."""
    if (path.parent / "summary.json").is_file():
        raise DecobenchError(f"--resume: {path.parent} holds a finished run; nothing to "
                             "resume (pass --overwrite to run it again)")
    if not path.is_file():
        raise DecobenchError(f"--resume: no checkpoint in {path.parent} (a run writes "
                             f"{CHECKPOINT} every --checkpoint-every-s seconds); run without "
                             "--resume to start it over")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file
        raise DecobenchError(f"--resume: {path} cannot be read ({exc}); run without "
                             "--resume to start over") from exc
    if state.get("fingerprint") != expected:
        raise DecobenchError(f"--resume: the checkpoint in {path.parent} was made by a "
                             "different configuration; give the same flags as the "
                             "interrupted run, or run without --resume to start over")
    return state
