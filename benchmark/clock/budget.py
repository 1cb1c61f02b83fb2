"""Fair budgets for comparing methods on one network condition (docs/suites.md "Budgets").

An iteration budget is unfair across methods whose iterations cost different simulated time
(a DeCo-SGD iteration on a slow link can cost 1/100 of a D-SGD one): the same N iterations
end one method long before another. A comparison is fair when every method gets the same
*simulated time*. :func:`dense_time_budget` picks that time from the task's own iteration
budget: the simulated time D-SGD (a dense message every iteration, τ = 0, the most
expensive iteration of the methods here) needs for the profile's ``max_iters`` on the
condition's trace, by the event recurrence of the time model (design card §4). Every method
then has at least the time the slowest one would have had under the iteration budget.

:func:`iterations_within` gives the iteration cap that cannot end a run before its time
budget: an iteration costs at least its compute time T, so no run steps more than
``budget / T`` iterations inside the budget; the cap adds one iteration beyond that.
"""

from __future__ import annotations

import math

from decobench.clock.timemodel import EventClock, Link
from decobench.clock.transport_model import IDEAL, TransportModel


def dense_time_budget(link: Link, d: int, compute_s: float, iterations: int, *,
                      topology: str = "paper", workers: int = 1,
                      transport: TransportModel = IDEAL) -> float:
    """Simulated seconds until the model of a dense run (32·d bits per message, τ = 0)
    exists after ``iterations`` iterations of compute time ``compute_s`` on ``link``."""
    if iterations < 1 or d < 1 or not compute_s > 0:
        raise ValueError("iterations, d and compute_s must be positive")
    clock = EventClock(link, topology=topology, workers=workers, transport=transport)
    for _ in range(iterations):
        clock.step(compute_s, 32.0 * d, 0, True)
    return clock.model_ready_s()          # max(end_K, arrivals due): already >= end_K


def iterations_within(budget_s: float, compute_s: float) -> int:
    """An iteration cap no method reaches inside ``budget_s`` simulated seconds when each
    iteration costs at least ``compute_s`` of compute: ⌈budget / T⌉ + 1, so the cap's
    iterations take at least one T longer than the budget (rounding cannot make them meet)."""
    if not (budget_s > 0 and compute_s > 0):
        raise ValueError("budget_s and compute_s must be positive")
    return math.ceil(budget_s / compute_s) + 1
