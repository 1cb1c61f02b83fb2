"""One iteration's schedule under the event recurrence (docs/design.md §4.2).

The record both the event clock (:mod:`decobench.clock.timemodel`) and the shared link of
ring collectives (:mod:`decobench.clock.link_sharing`) fill in; it lives apart from both so
that neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IterationTiming:
    """The schedule of one iteration under the recurrence of docs/design.md §4.2.

    ``bubble_s = start_k - end_{k-1}`` is the time compute waited for due updates (>= 0);
    ``bits`` is the message size per worker, before the topology factor ``h``.
    """

    iteration: int
    start_s: float
    end_s: float
    tx_start_s: float
    tx_end_s: float
    arrive_s: float
    compute_s: float
    bubble_s: float
    bits: float
    staleness: int
    link_bits: float  # h·W: bits that crossed the bottleneck link
    latency_factor: float  # l: latency hops charged to this message
    burst_bits: float = 0.0  # of link_bits, passed before the rate applied (transport model's B)
