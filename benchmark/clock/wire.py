"""Bits on the wire for one message (docs/design.md §3).

One worker's message at compression ratio δ over a model of ``d`` fp32 parameters:

- dense (δ = 1): ``W = 32 d``;
- Top-k, ``k = max(1, ceil(δ d))``: ``W(k) = min(k (32 + ceil(log2 d)), 32 k + d, 32 d)``, the
  cheapest of packed indices, a d-bit mask, or the sparse vector sent dense.

The training code reports the bits it puts on the wire with these functions and the time
model (:mod:`decobench.clock.timemodel`) charges the same number, so the two never disagree.
All functions are pure and work on Python integers (exact for any ``d``).
"""

from __future__ import annotations

import math

from decobench.errors import DecobenchError

VALUE_BITS = 32
"""Bits of one fp32 value."""

_REL_EPS = 1e-9
"""Relative tolerance under which ``δ·d`` counts as the integer next to it (see topk_count)."""


def _check_d(d: int) -> None:
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise DecobenchError(f"the parameter count d must be an integer >= 1, got {d!r}")


def topk_count(delta: float, d: int) -> int:
    """Number of coordinates Top-k keeps: ``k = max(1, ceil(δ d))``, capped at ``d`` (§2, §3).

    Float guard: ``δ d`` within a relative 1e-9 of an integer counts as that integer, so a
    ratio written as ``δ = k / d`` always gives back exactly ``k`` (``k/d*d`` may land one ulp
    above ``k``, where a plain ``ceil`` would return ``k + 1``). The price is that a ratio
    asking for ``k + ε`` coordinates with ``ε < 1e-9 (k + ε)`` keeps ``k``.
    """
    _check_d(d)
    if not (isinstance(delta, (int, float)) and math.isfinite(delta)) or delta <= 0:
        raise DecobenchError(
            f"the compression ratio delta must be a finite number > 0, got {delta!r}"
        )
    if delta >= 1:
        return d
    x = float(delta) * d
    nearest = round(x)
    if abs(x - nearest) <= _REL_EPS * max(1.0, x):
        k = int(nearest)
    else:
        k = math.ceil(x)
    return min(d, max(1, k))


def index_bits(d: int) -> int:
    """Bits of one packed coordinate index: ``ceil(log2 d)``, at least 1 (§3)."""
    _check_d(d)
    # (d - 1).bit_length() == ceil(log2 d) exactly for integers d >= 1.
    return max(1, (d - 1).bit_length())


def topk_wire_bits(k: int, d: int) -> int:
    """Bits of a Top-k message with ``k`` kept coordinates (§3).

    ``W(k) = min(k (32 + ceil(log2 d)), 32 k + d, 32 d)``: packed indices, a d-bit mask, or
    the values sent dense. ``k = d`` gives ``32 d``; ``k = 0`` gives 0. Nondecreasing in ``k``.
    """
    _check_d(d)
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= d:
        raise DecobenchError(f"the kept count k must be an integer in [0, d={d}], got {k!r}")
    return min(k * (VALUE_BITS + index_bits(d)), VALUE_BITS * k + d, VALUE_BITS * d)


def dense_wire_bits(d: int) -> int:
    """Bits of a dense fp32 message: ``W = 32 d`` (§3)."""
    _check_d(d)
    return VALUE_BITS * d


def wire_bits(delta: float, d: int) -> int:
    """Bits of one message at ratio δ (§3): ``32 d`` if ``δ >= 1``, else ``W(topk_count(δ, d))``."""
    if isinstance(delta, (int, float)) and delta >= 1:
        return dense_wire_bits(d)
    return topk_wire_bits(topk_count(delta, d), d)


def _largest_k_with(k_guess: int, slope: int, offset: int, budget_bits: float) -> int:
    """Largest integer ``k`` with ``slope·k + offset <= budget_bits`` (exact int/float compare),
    starting from a float estimate that can be off by a few units."""
    k = k_guess
    while slope * (k + 1) + offset <= budget_bits:
        k += 1
    while slope * k + offset > budget_bits:
        k -= 1
    return k


def max_topk_count_within(budget_bits: float, d: int) -> int:
    """Largest ``k`` in ``[0, d]`` with ``topk_wire_bits(k, d) <= budget_bits``, in O(1) (§3, §5).

    ``W`` is the minimum of three nondecreasing branches, so ``W(k) <= B`` holds iff one branch
    does: ``k (32 + L) <= B`` (``k <= B/(32+L)``), ``32 k + d <= B`` (``k <= (B - d)/32``), or
    ``32 d <= B`` (every ``k``, so ``d``). The answer is the largest of the three, capped at
    ``d``. A budget below zero (nothing fits, not even the empty message) also gives 0.
    """
    _check_d(d)
    if not isinstance(budget_bits, (int, float)) or math.isnan(budget_bits):
        raise DecobenchError(f"the bit budget must be a number, got {budget_bits!r}")
    if budget_bits >= VALUE_BITS * d:
        return d
    if budget_bits < 0:
        return 0
    # Here 0 <= B < 32 d, so every estimate below is a finite integer smaller than d.
    per_index = VALUE_BITS + index_bits(d)
    k_packed = _largest_k_with(math.floor(budget_bits / per_index), per_index, 0, budget_bits)
    k_mask = -1
    if budget_bits >= d:
        k_mask = _largest_k_with(
            math.floor((budget_bits - d) / VALUE_BITS), VALUE_BITS, d, budget_bits
        )
    return min(d, max(0, k_packed, k_mask))
