"""Topology factors of the time model (docs/design.md §4.3).

A message of ``W`` bits occupies the link for ``h(n) · W / a`` seconds and then needs
``l(n) · b`` seconds of latency to arrive:

- ``paper`` (default, the paper's model): ``h = 1``, ``l = 1``;
- ``ring``: sparse messages by ring all-gather, ``h = n - 1``, ``l = n - 1``; dense messages
  by ring all-reduce, ``h = 2 (n - 1) / n``, ``l = 2 (n - 1)``. One worker (``n = 1``) under
  ``ring`` communicates nothing: ``h = l = 0``.
"""

from __future__ import annotations

from dataclasses import dataclass

from decobench.errors import DecobenchError

TOPOLOGIES = ("paper", "ring")
"""Names accepted by :func:`topology_factors`."""


@dataclass(frozen=True)
class TopologyFactors:
    """Multipliers of one message's cost: ``h`` on transmission time, ``l`` on latency."""

    h: float
    l: float  # noqa: E741 - docs/design.md's name for the latency multiplier


def topology_factors(topology: str, n: int, dense: bool) -> TopologyFactors:
    """``h(n)`` and ``l(n)`` of docs/design.md §4.3 for ``n`` workers; ``dense`` picks all-reduce
    (δ = 1) over all-gather (δ < 1) under ``ring`` and changes nothing under ``paper``."""
    if topology not in TOPOLOGIES:
        raise DecobenchError(
            f"unknown topology {topology!r}; choose one of: {', '.join(TOPOLOGIES)}"
        )
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise DecobenchError(f"the number of workers must be an integer >= 1, got {n!r}")
    if topology == "paper":
        return TopologyFactors(h=1.0, l=1.0)
    if dense:
        return TopologyFactors(h=2.0 * (n - 1) / n, l=2.0 * (n - 1))
    return TopologyFactors(h=float(n - 1), l=float(n - 1))
