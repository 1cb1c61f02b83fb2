"""The delivery-delay layer: one-way latency added by the communication layer.

Where the kernel cannot add latency (no ``sch_netem``), the links are rate-shaped by tc
(tbf/htb) and this layer supplies the latency of the time model (docs/design.md §4.2): a message
whose collective ended at ``tx_end`` is delivered to the training loop no earlier than

    arrive = tx_end + l · b(tx_end)

with ``b(t)`` the trace's one-way latency at trace time ``t`` and ``l`` the topology's latency
factor (:func:`decobench.clock.topology.topology_factors`: ``n − 1`` hops for a ring all-gather,
``2 (n − 1)`` for a ring all-reduce). Where netem adds the latency in the kernel
(``mechanism = "kernel"``) the collective already includes it and this layer adds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from decobench.clock.timemodel import Link
from decobench.clock.topology import topology_factors
from decobench.errors import DecobenchError

LatencyMechanism = Literal["kernel", "comm-layer"]
"""Who adds the one-way latency: netem in the kernel, or this layer."""

LATENCY_MECHANISMS: tuple[str, ...] = ("kernel", "comm-layer")


@dataclass(frozen=True)
class DeliveryDelay:
    """``arrive = tx_end + l · b(tx_end)`` (comm-layer) or ``arrive = tx_end`` (kernel).

    ``link`` gives ``b(t)`` with ``t`` in trace time (seconds since the run's clock start);
    ``topology`` and ``workers`` give the latency factor ``l`` of dense (all-reduce) and
    sparse (all-gather) messages.
    """

    link: Link
    mechanism: LatencyMechanism
    topology: str
    workers: int

    def __post_init__(self) -> None:
        if self.mechanism not in LATENCY_MECHANISMS:
            raise DecobenchError(f"unknown latency mechanism {self.mechanism!r}; choose one "
                                 f"of: {', '.join(LATENCY_MECHANISMS)}")

    def latency_factor(self, dense: bool) -> float:
        """``l`` for this message kind."""
        return topology_factors(self.topology, self.workers, dense=dense).l

    def added_latency_s(self, tx_end_s: float, dense: bool) -> float:
        """The delay this layer adds after the collective ends: ``l · b(tx_end)`` or 0."""
        if self.mechanism == "kernel":
            return 0.0
        return self.latency_factor(dense) * self.link.latency_at(tx_end_s)

    def arrival_s(self, tx_end_s: float, dense: bool) -> float:
        """The earliest time the training loop may use the message."""
        return tx_end_s + self.added_latency_s(tx_end_s, dense)
