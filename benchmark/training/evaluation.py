"""When a run evaluates, and when it reached its targets (docs/design.md §6.1, §6.2).

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
  With a share ``r`` (``--ttt-resolution``, e.g. 0.02) the fine cadence around iteration
  ``k`` is ``max(1, ⌊r·k⌋)`` iterations, at most ``E_f`` (:class:`Resolution`): a target met
  early (few iterations, each a large share of the time) is bracketed to ``r`` of its
  iterations without evaluating every iteration for the whole run.

Pure bookkeeping: no I/O, no torch; both backends use it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
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

    @property
    def last_iteration(self) -> int:
        """Iterations done at the latest evaluation recorded (0 before the first)."""
        return self._previous[0]

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
    """Every ``every`` iterations; near an unmet target at the :class:`Resolution`'s cadence
    (every ``fine_every``, finer early with a ``share``; module doc)."""

    every: int
    fine_every: int | None = None
    margin: float = 0.05
    windows: tuple[tuple[int, int, int], ...] = ()
    """Iteration brackets ``(lo, hi]`` evaluated every ``step`` iterations (counted from
    ``lo``) whatever the metric: ``(lo, hi, step)``, a refine pass (:func:`refine_windows`)."""
    share: float | None = None
    """``--ttt-resolution``: the widest bracket as a share of the iterations to a target."""

    @property
    def resolution(self) -> Resolution:
        return Resolution(self.fine_every, self.share)

    def with_windows(self, windows: Iterable[tuple[int, int, int]]) -> EvaluationSchedule:
        """This schedule plus fixed fine windows."""
        return replace(self, windows=tuple(windows))

    def fine(self, book: TargetBook) -> bool:
        """True while the best metric so far is near the nearest unmet target."""
        if not self.resolution.active or book.best is None:
            return False
        pending = book.unmet()
        return bool(pending) and near_target(book.best, pending[0], self.margin,
                                             book.higher_is_better)

    def due(self, iterations_done: int, book: TargetBook) -> bool:
        """Whether to evaluate the model after ``iterations_done`` iterations."""
        if iterations_done % self.every == 0:
            return True
        if any(lo < iterations_done <= hi and (iterations_done - lo) % step == 0
               for lo, hi, step in self.windows):
            return True
        if not self.fine(book):             # also without a fine cadence or a share
            return False
        if self.share is None:
            return iterations_done % self.fine_every == 0
        # counted from the last evaluation: a bracket is at most the cadence at its end
        cadence = self.resolution.cadence(iterations_done)
        return iterations_done - book.last_iteration >= cadence


@dataclass(frozen=True)
class Resolution:
    """How finely a time to target is bracketed: every ``fine_every`` (``E_f``) iterations
    near a target, and, with ``share`` (``r``, ``--ttt-resolution``), every
    ``max(1, ⌊r·k⌋)`` iterations (capped at ``E_f``) around iteration ``k``
    (:meth:`cadence`; counted from the previous evaluation, :meth:`EvaluationSchedule.due`),
    so a bracket is at most ``r`` of the iterations to its target.

    While the iterations take equally long (D-SGD, a static strategy: the runs whose targets
    fall early) that is ``r`` of the time to target; the resolution a run reached, in
    seconds, is in summary.json either way. The rule counts iterations, not seconds, so a
    re-timed run (:mod:`decobench.runs.trajectory`) evaluates the iterations its trajectory
    recorded. A target met early gets a finer cadence than ``E_f`` without evaluating every
    ``E_f`` iterations for the whole run."""

    fine_every: int | None = None
    share: float | None = None

    @property
    def active(self) -> bool:
        return self.fine_every is not None or self.share is not None

    def cadence(self, iteration: int) -> int | None:
        """Iterations between fine evaluations around ``iteration`` (None: no fine cadence)."""
        if self.share is None:
            return self.fine_every
        steps = max(1, int(self.share * iteration))
        return steps if self.fine_every is None else min(self.fine_every, steps)

    def too_wide(self, hit: Hit) -> bool:
        """Whether ``hit``'s bracket is wider than the cadence at its iteration (the metric
        jumped past the fine window; a refine pass narrows it)."""
        cadence = self.cadence(hit.iteration)
        return cadence is not None and hit.resolution_iters > cadence


def refine_windows(book: TargetBook, resolution: Resolution) -> list[tuple[int, int, int]]:
    """Brackets ``(previous evaluation, hit, step)`` of the targets met with a bracket wider
    than :meth:`Resolution.too_wide` allows (the metric jumped past the fine window): a replay
    evaluating every ``step`` iterations inside them (the cadence at the bracket's start)
    resolves those times to target to ``step`` iterations. Empty without a fine cadence."""
    windows = set()
    for hit in book.hits.values():
        if resolution.too_wide(hit):
            step = resolution.cadence(hit.previous_iteration)
            assert step is not None
            windows.add((hit.previous_iteration, hit.iteration, step))
    return sorted(windows)


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
