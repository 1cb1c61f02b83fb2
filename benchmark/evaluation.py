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
- **Refine pass.** When a target is met at an evaluation whose bracket is still wider than
  ``E_f`` (the metric jumped over the fine window between two evaluations), the simulated
  backend replays the run with fine windows over those brackets (:func:`refine_windows`).

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
    at the first evaluation). The model changes only at iterations, so when the two
    evaluations are of consecutive models (a one-iteration bracket) the first model meeting
    the target is known exactly and ``resolution_s`` is 0.
    """

    target: float
    iteration: int
    time_s: float
    previous_iteration: int
    previous_time_s: float

    @property
    def resolution_s(self) -> float:
        if self.resolution_iters <= 1:
            return 0.0
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
    windows: tuple[tuple[int, int], ...] = ()
    """Iteration brackets ``(lo, hi]`` evaluated every ``E_f`` iterations whatever the metric
    (a refine pass, :func:`refine_windows`)."""

    def with_windows(self, windows: Iterable[tuple[int, int]]) -> EvaluationSchedule:
        """This schedule plus fixed fine windows."""
        return EvaluationSchedule(self.every, self.fine_every, self.margin, tuple(windows))

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
        if self.fine_every is None:
            return False
        if any(lo < iterations_done <= hi and (iterations_done - lo) % self.fine_every == 0
               for lo, hi in self.windows):
            return True
        return self.fine(book) and iterations_done % self.fine_every == 0


def refine_windows(book: TargetBook, fine_every: int | None) -> list[tuple[int, int]]:
    """Brackets ``(previous evaluation, hit]`` of the targets met with a bracket wider than
    ``E_f`` iterations (the metric jumped past the fine window): a replay evaluating every
    ``E_f`` iterations inside them resolves those times to target to ``E_f`` iterations.
    Empty without a fine cadence."""
    if fine_every is None:
        return []
    return sorted({(h.previous_iteration, h.iteration) for h in book.hits.values()
                   if h.resolution_iters > fine_every})


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
