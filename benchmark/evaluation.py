"""When a run evaluates, and when it reached its targets (deco-sgd.md §6 "Metrics").

Time to target is the time of the first evaluation that meets the target, so it is only as
fine as the evaluations: the crossing lies somewhere after the previous evaluation. This
module keeps that bracket and makes it narrow where it matters:

- **Schedule.** Evaluate every ``E`` iterations; once the best metric so far is within a
  relative ``margin`` of the nearest target not yet met (accuracy >= target·(1 − m),
  perplexity <= target·(1 + m)), evaluate every ``E_f`` iterations until that target is met
  (:class:`EvaluationSchedule`). With ``E_f`` unset the schedule is every ``E`` iterations.
- **Targets.** The run's stop target and any number of milestones (extra targets that are
  recorded but do not stop the run) are tracked by one :class:`TargetBook`; each hit keeps
  the bracket (previous evaluation, hit], whose width is the *resolution* of that time to
  target, reported beside it.

Pure bookkeeping: no I/O, no torch; both backends use it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


def target_met(metric: float, target: float, higher_is_better: bool) -> bool:
    """Accuracy >= target, or perplexity (lower is better) <= target."""
    return metric >= target if higher_is_better else metric <= target


def near_target(metric: float, target: float, margin: float, higher_is_better: bool) -> bool:
    """Within the relative ``margin`` of ``target`` (or past it): ``metric >= target·(1 − m)``
    when higher is better, ``metric <= target·(1 + m)`` otherwise."""
    if higher_is_better:
        return metric >= target * (1.0 - margin)
    return metric <= target * (1.0 + margin)


@dataclass(frozen=True)
class Hit:
    """The first evaluation meeting a target, and the evaluation before it.

    The true crossing lies in ``(previous_time_s, time_s]``; ``resolution_s`` is that width
    (the previous evaluation is the start of training, time 0 at iteration 0, for a target met
    at the first evaluation).
    """

    target: float
    iteration: int
    time_s: float
    previous_iteration: int
    previous_time_s: float

    @property
    def resolution_s(self) -> float:
        return self.time_s - self.previous_time_s

    @property
    def resolution_iters(self) -> int:
        return self.iteration - self.previous_iteration


@dataclass
class TargetBook:
    """First hits of the stop target and the milestones, from a run's evaluations in order."""

    targets: tuple[float, ...]
    higher_is_better: bool
    hits: dict[float, Hit] = field(default_factory=dict)
    best: float | None = None
    _previous: tuple[int, float] = (0, 0.0)

    def unmet(self) -> list[float]:
        """Targets not met yet, nearest first (ascending accuracy, descending perplexity)."""
        pending = [t for t in self.targets if t not in self.hits]
        return sorted(pending, reverse=not self.higher_is_better)

    def record(self, iteration: int, metric: float, time_s: float) -> list[float]:
        """Fold in one evaluation (``metric`` of the model after ``iteration`` iterations,
        existing at ``time_s``); returns the targets it meets for the first time."""
        new = []
        for target in self.unmet():
            if target_met(metric, target, self.higher_is_better):
                self.hits[target] = Hit(target, iteration, time_s, *self._previous)
                new.append(target)
        if self.best is None or (metric > self.best if self.higher_is_better
                                 else metric < self.best):
            self.best = metric
        self._previous = (iteration, time_s)
        return new


@dataclass(frozen=True)
class EvaluationSchedule:
    """Every ``every`` iterations, every ``fine_every`` near an unmet target (module doc)."""

    every: int
    fine_every: int | None = None
    margin: float = 0.05

    def fine(self, book: TargetBook) -> bool:
        """True while the best metric so far is near the nearest unmet target."""
        if self.fine_every is None or book.best is None:
            return False
        pending = book.unmet()
        return bool(pending) and near_target(book.best, pending[0], self.margin,
                                             book.higher_is_better)

    def due(self, iterations_done: int, book: TargetBook) -> bool:
        """Whether to evaluate the model after ``iterations_done`` iterations."""
        if iterations_done % self.every == 0:
            return True
        return (self.fine(book) and self.fine_every is not None
                and iterations_done % self.fine_every == 0)


def hit_fields(hit: Hit | None) -> dict[str, Any]:
    """The summary fields of one target's hit (``None`` values when not reached)."""
    if hit is None:
        return {"ttt_resolution_s": None, "ttt_bracket_s": None, "ttt_resolution_iters": None}
    return {"ttt_resolution_s": hit.resolution_s,
            "ttt_bracket_s": [hit.previous_time_s, hit.time_s],
            "ttt_resolution_iters": hit.resolution_iters}


def milestone_records(book: TargetBook, milestones: Iterable[float]) -> list[dict[str, Any]]:
    """``summary.json``'s ``milestones``: for each milestone, whether and when it was met."""
    out = []
    for target in milestones:
        hit = book.hits.get(target)
        out.append({"target": target, "reached": hit is not None,
                    "time_to_target_s": None if hit is None else hit.time_s,
                    "iters_to_target": None if hit is None else hit.iteration,
                    **hit_fields(hit)})
    return out
