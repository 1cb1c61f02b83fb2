"""Messages in flight, each with its own staleness (docs/design.md §2.3).

A message sent at iteration s with staleness τ_s is due at iteration s + τ_s. When τ shrinks,
several messages fall due at once; when it grows, an iteration may apply none. Nothing is
dropped or applied twice. Messages still in flight when training ends are never applied.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Generic, TypeVar

P = TypeVar("P")


@dataclass(frozen=True, order=True)
class Message(Generic[P]):
    """A payload sent at ``sent_at`` with staleness τ; due at sent_at + τ. The payload is
    usually the aggregated :class:`~decobench.compression.compressors.Update`; DGA sends each worker's
    local update."""

    due_at: int
    sent_at: int
    staleness: int = field(compare=False)
    update: P = field(compare=False)


class DelayQueue(Generic[P]):
    """Messages ordered by (due iteration, send iteration).

    ``pop_due(t)`` returns every message with s + τ_s <= t in send order, so the sum applied
    at iteration t is deterministic.
    """

    def __init__(self) -> None:
        self._heap: list[Message[P]] = []

    def push(self, sent_at: int, staleness: int, update: P) -> Message[P]:
        if staleness < 0:
            raise ValueError(f"staleness must be >= 0, got {staleness}")
        message = Message(due_at=sent_at + staleness, sent_at=sent_at, staleness=staleness,
                          update=update)
        heapq.heappush(self._heap, message)
        return message

    def pop_due(self, iteration: int) -> list[Message[P]]:
        due: list[Message[P]] = []
        while self._heap and self._heap[0].due_at <= iteration:
            due.append(heapq.heappop(self._heap))
        return sorted(due, key=lambda m: m.sent_at)

    def __len__(self) -> int:
        return len(self._heap)

    @property
    def in_flight(self) -> list[Message[P]]:
        return sorted(self._heap)
