"""Checkpoints of a simulated run: its whole training state, written atomically every few
minutes of wall time, so that ``decobench run --resume`` continues an interrupted run
instead of restarting it and ends with the same metrics as an uninterrupted run.

The state is everything the next iteration reads: the flat parameters, the method object
whole (error-feedback memories, messages in flight, controller and estimators), the
transport's state (the event clock and the observations in flight), the data order
(:class:`~decobench.sharding.ShardedBatches`), the outcome and target book so far, the
torch RNG state and the model's buffers. It is pickled with :func:`torch.save` into
``checkpoint.pt`` beside the metrics (a temporary file renamed over the old one), with a
the run's identity (:func:`decobench.suite.identity`, as a sweep names its cells); a
checkpoint of another configuration is refused.
The metrics rows written after the checkpoint are dropped on resume (the resumed run writes
them again).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from decobench.atomicio import atomic_writer
from decobench.errors import DecobenchError
from decobench.rundir import SUMMARY

CHECKPOINT = "checkpoint.pt"


@dataclass
class Checkpointer:
    """Saves the state every ``every_s`` seconds of wall time (never when None), with
    ``fingerprint``, the run's identity."""

    path: Path
    every_s: float | None
    fingerprint: str
    _last: float = field(default_factory=time.monotonic)

    def due(self) -> bool:
        return self.every_s is not None and time.monotonic() - self._last >= self.every_s

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state`` atomically (the previous checkpoint stays until the rename)."""
        with atomic_writer(self.path) as handle:
            torch.save({**state, "fingerprint": self.fingerprint}, handle)
        self._last = time.monotonic()

    def remove(self) -> None:
        """Delete the checkpoint (the run finished) and any temporary file a killed save
        left behind (:func:`~decobench.atomicio.atomic_writer`'s ``.NAME.*.tmp``)."""
        self.path.unlink(missing_ok=True)
        for stale in self.path.parent.glob(f".{self.path.name}.*.tmp"):
            stale.unlink(missing_ok=True)


def load_checkpoint(path: Path, expected: str) -> dict[str, Any]:
    """The state saved at ``path``; one-line errors when there is none or it belongs to
    another configuration."""
    if (path.parent / SUMMARY).is_file():
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
