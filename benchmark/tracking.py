"""Experiment tracking of one run: the interface the runner calls.

:class:`RunTracker` receives every metrics row the run writes and the final summary (or the
error of a crashed run). :class:`NullTracker` does nothing (``--no-wandb``).
"""

from __future__ import annotations

from typing import Any, Protocol


class RunTracker(Protocol):
    def log(self, row: dict[str, Any]) -> None:
        """One ``metrics.jsonl`` row, as written."""

    def finish(self, summary: dict[str, Any]) -> None:
        """The run ended normally (finished, diverged or budget exhausted)."""

    def fail(self, error: BaseException) -> None:
        """The run crashed or was interrupted; no summary exists."""


class NullTracker:
    """Tracking turned off."""

    def log(self, row: dict[str, Any]) -> None:
        pass

    def finish(self, summary: dict[str, Any]) -> None:
        pass

    def fail(self, error: BaseException) -> None:
        pass
