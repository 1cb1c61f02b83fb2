"""Φ, the iteration-to-accuracy factor DeCo minimises (docs/design.md §5.5).

The paper's Theorem 1 bounds the iterations to reach ``E||∇f||² <= ε`` by
``O(σ²/(nε²) + sqrt(Φ)·σ/ε^{3/2} + ...)``; the exact form of Φ is lost in the text we have.
This module holds the interface ``phi(delta, tau) -> float`` and named implementations; a
planner takes any of them, so the form can be swapped by name and checked by experiment
(docs/design.md §7).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from types import MappingProxyType

from decobench.errors import DecobenchError

PhiModel = Callable[[float, int], float]
"""``phi(delta, tau) -> float``: larger means more iterations to reach a target."""



def _staleness_compression_form(delta: float, tau: int, scale: float) -> float:
    """``τ + scale·(1 - δ)/(δ (1 - δ)^τ)`` for ``δ`` in (0, 1] and integer ``τ >= 0``, ``τ`` at
    ``δ = 1``, ``math.inf`` where it overflows; the shared form of the Φ models below."""
    if not (isinstance(delta, (int, float)) and math.isfinite(delta)) or not 0 < delta <= 1:
        raise DecobenchError(f"delta must be in (0, 1], got {delta!r}")
    if isinstance(tau, bool) or not isinstance(tau, int) or tau < 0:
        raise DecobenchError(f"tau must be an integer >= 0, got {tau!r}")
    if delta >= 1:
        return float(tau)
    keep = 1.0 - delta
    denominator = delta * keep**tau
    if denominator == 0.0:
        return math.inf
    value = tau + scale * keep / denominator
    return value if math.isfinite(value) else math.inf

def phi_paper(delta: float, tau: int) -> float:
    """``Φ_paper(δ, τ) = τ + (1 - δ) / (δ (1 - δ)^τ)`` for ``δ < 1``; ``Φ_paper(1, τ) = τ``.

    THIS PROJECT'S FILL-IN of a gap in the paper's text (docs/design.md §5.5): the noise term
    ``(1 - δ)/(δ (1 - δ)^τ)`` is the form reported for staleness amplifying compression, and
    the ``τ`` term makes ``δ = 1`` give DD-SGD's ``τ`` and ``τ = 0`` give D-EF-SGD's
    ``(1 - δ)/δ``. Swappable by name through :data:`PHI_MODELS`. Returns ``math.inf`` where
    the value overflows a float.
    """
    return _staleness_compression_form(delta, tau, 1.0)


EF_DELTA0 = 0.003
"""δ₀ of :func:`phi_ef`: the smallest compression ratio measured in docs/deco-planner.md."""


def phi_ef(delta: float, tau: int) -> float:
    """``Φ_ef(δ, τ) = τ + δ₀ (1 - δ) / (δ (1 - δ)^τ)`` with ``δ₀ = 0.003``; ``Φ_ef(1, τ) = τ``.

    THIS PROJECT'S NAMED ALTERNATIVE to :func:`phi_paper`, not the paper's (docs/deco-planner.md):
    the same form with the compression noise term scaled down by ``δ₀``. With error feedback,
    EF-SGD theory puts the compression error only in a higher-order term, and the measured
    iterations to target of CNN@FashionMNIST do not resolve any dependence on δ over
    ``[0.003, 1]`` while staleness costs iterations; ``Φ_paper`` makes ``δ = 0.01`` worth ~100
    iterations of staleness. ``δ₀`` is the smallest δ measured, so δ = δ₀ counts as about one
    iteration of staleness and a smaller δ is priced rather than extrapolated as free. Returns
    ``math.inf`` where the value overflows a float.
    """
    return _staleness_compression_form(delta, tau, EF_DELTA0)


def phi_ef_scaled(delta0: float) -> PhiModel:
    """Φ_ef with another δ₀: ``τ + δ₀ (1 - δ) / (δ (1 - δ)^τ)`` (δ₀ in (0, 1]); this project's
    knob for checking the calibrated constant (docs/methods/deco-sgd-robust.md)."""
    if not (math.isfinite(delta0) and 0 < delta0 <= 1):
        raise DecobenchError(f"Φ_ef's δ₀ must be in (0, 1], got {delta0!r}")
    if delta0 == EF_DELTA0:
        return phi_ef
    return functools.partial(_staleness_compression_form, scale=delta0)   # picklable


PHI_MODELS: Mapping[str, PhiModel] = MappingProxyType({"paper": phi_paper, "ef": phi_ef})
"""Named Φ models (read-only)."""


def get_phi(name: str) -> PhiModel:
    """The Φ model called ``name`` in :data:`PHI_MODELS`."""
    try:
        return PHI_MODELS[name]
    except KeyError:
        raise DecobenchError(
            f"unknown Φ model {name!r}; choose one of: {', '.join(sorted(PHI_MODELS))}"
        ) from None
