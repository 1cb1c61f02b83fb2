"""CocktailSGD (Wang et al., ICML 2023) with its own compressor (docs/design.md §8.4).

Not the DeCo paper's "CocktailSGD" row: the paper ran all baselines with Top-k (appendix
C.2), i.e. :mod:`decobench.baselines.cocktail_topk`. This is the original's compressor at the same
frozen (δ, τ):

DD-EF-SGD (docs/design.md §2) with the compressor C = Quant_b ∘ TopK_r ∘ RandSample_p of
:mod:`decobench.baselines.cocktail_compressor` in place of global Top-k:
    p_t^i = e_t^i + g_t^i,   Δ_t^i = C_δ(p_t^i) (dequantised),   e_{t+1}^i = p_t^i − Δ_t^i,
    u_t = (1/n) Σ_i Σ_{s : s + τ = t} Δ_s^i,   x_{t+1} = shared optimizer step on u_t,
with a static (δ, τ) equal to DeCo's FIRST plan: iteration 0 is the probe (τ = 0), as in
DeCo-SGD; the first plan is made from its measurement and then never changes
(``PLAN_ONCE``). The probe sends as many wire bits as DeCo-SGD's (Top-k at
``initial_delta``): CocktailSGD's own message at ``initial_delta`` is about 4x smaller, and a
shaper's burst carries a large part of so small a message at line rate, so the estimators
read a bandwidth well above the link's (``cocktail_probe = "deco"``, :func:`probe_delta`;
``"own"`` keeps the compact probe). DeCo's planner sizes δ with Top-k's
wire bits; CocktailSGD then sends its own, smaller, quantised messages and the clock charges
those bits.

Decisions of this project:
- ``cocktail_reference_defaults`` runs the reference's own recipe instead of the first plan:
  τ = 1, p = 0.1, r = 0.2 (δ = 0.02), b = 4, buckets of 128, no planning and no probe.
- ``cocktail_delta`` with ``cocktail_tau`` gives a static pair by hand (the oracle grid);
  both or neither, and not together with the reference defaults.
- Error feedback is the workers' own, in gradient units, over the dequantised message; the
  reference's model-difference sync with per-shard server error feedback (and its data
  race, fp16 global copies and silently skipped failed syncs) is not reproduced.
- δ logged by the runner is the kept fraction k/d actually sent; each row also logs the
  split: ``cocktail_sample_fraction`` (p), ``cocktail_topk_ratio`` (r), ``cocktail_sampled``
  (m) and ``cocktail_kept`` (k).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from pydantic import Field, model_validator
from torch import Tensor

from decobench.baselines.cocktail_compressor import CocktailCompressor
from decobench.clock.wire import wire_bits as topk_wire_bits_at
from decobench.methods.base import Method, MethodContext, MethodSpec, Sent
from decobench.methods.controllers import (
    PLAN_ONCE,
    Controller,
    StaticController,
    deco_controller,
)
from decobench.methods.ddefsgd import ALL_RULES, DDEFSGD
from decobench.methods.decisions import (
    NETWORK_INDEPENDENT,
    ControllerDecisions,
    DecisionPolicy,
)
from decobench.methods.options import PlannerOptions

REFERENCE_DELTA = 0.02
"""The reference's p·r = 0.1 · 0.2."""

REFERENCE_TAU = 1
"""The reference's staleness (one-step asynchronous application)."""

REFERENCE_RECIPE = (("cocktail_quant_bits", 4), ("cocktail_bucket_size", 128),
                    ("cocktail_max_sample_fraction", 0.1))
"""Compressor settings fixed by ``cocktail_reference_defaults``."""


class CocktailOptions(PlannerOptions):
    """CocktailSGD: DeCo's planner options (for its first, frozen plan) and the compressor's."""

    cocktail_quant_bits: int = Field(4, ge=2, le=16, description="b: bits per kept value, "
                                     "a symmetric integer in [−(2^(b−1)−1), 2^(b−1)−1] times "
                                     "its bucket's fp16 scale")
    cocktail_bucket_size: int = Field(128, ge=1, description="kept values per quantisation "
                                      "bucket; each bucket sends one 16-bit scale")
    cocktail_max_sample_fraction: float = Field(0.1, gt=0, le=1, description="p, the "
                                                "fraction of coordinates sampled when δ <= p "
                                                "(then r = δ/p); a larger δ samples p = δ, r = 1")
    cocktail_reference_defaults: bool = Field(False, description="run the reference's own "
                                              "recipe instead of DeCo's first plan: τ = 1, "
                                              "p = 0.1, r = 0.2 (δ = 0.02), b = 4, no planning")
    cocktail_delta: float | None = Field(None, gt=0, le=1, description="a static compression "
                                         "ratio δ = p·r given by hand (with --cocktail-tau) "
                                         "instead of DeCo's first plan")
    cocktail_tau: int | None = Field(None, ge=0, le=1000, description="a static staleness τ "
                                     "in iterations given by hand (with --cocktail-delta)")
    cocktail_probe: Literal["deco", "own"] = Field("deco", description="the probe iteration "
                                                   "0: 'deco' sends as many wire bits as "
                                                   "DeCo-SGD's probe (Top-k at "
                                                   "--initial-delta), so the first plan reads "
                                                   "the link from the same message size; "
                                                   "'own' sends CocktailSGD's compact message "
                                                   "at --initial-delta (a shaper's burst "
                                                   "inflates its measured bandwidth)")

    @model_validator(mode="after")
    def _static_pair(self) -> CocktailOptions:
        if (self.cocktail_delta is None) != (self.cocktail_tau is None):
            raise ValueError("give both cocktail_delta and cocktail_tau, or neither")
        if self.cocktail_reference_defaults:
            if self.cocktail_delta is not None:
                raise ValueError("cocktail_reference_defaults fixes δ = 0.02 and τ = 1; do "
                                 "not also give cocktail_delta and cocktail_tau")
            changed = [name for name, value in REFERENCE_RECIPE
                       if getattr(self, name) != value]
            if changed:
                raise ValueError(f"cocktail_reference_defaults fixes b = 4, bucket 128 and "
                                 f"p = 0.1; do not also change {', '.join(changed)}")
        return self


class CocktailSGD(DDEFSGD):
    """DD-EF-SGD with CocktailSGD's compressor; adds the compressor's split to the log."""

    name = "cocktail-sgd"

    def __init__(self, context: MethodContext, compressor: CocktailCompressor,
                 controller: Controller) -> None:
        super().__init__(context, compressor, controller)
        self.cocktail = compressor

    def send(self, iteration: int, params: Tensor, gradients: Tensor) -> Sent:
        sent = super().send(iteration, params, gradients)
        split = self.cocktail.last_split
        if split is None:
            return sent
        return dataclasses.replace(sent, log={
            **sent.log,
            "cocktail_sample_fraction": split.sample_fraction,
            "cocktail_topk_ratio": split.topk_ratio,
            "cocktail_sampled": split.sampled,
            "cocktail_kept": split.kept,
        })


def probe_delta(compressor: CocktailCompressor, initial_delta: float, d: int) -> float:
    """The smallest δ in [``initial_delta``, 1] at which CocktailSGD's message has at least
    the wire bits of DeCo-SGD's probe, Top-k at ``initial_delta`` (docs/design.md §3); 1 if
    none has. Bisection on δ: the message's bits never fall as δ grows."""
    need = topk_wire_bits_at(initial_delta, d)
    if compressor.size(initial_delta, d).bits_per_worker >= need:
        return initial_delta
    if compressor.size(1.0, d).bits_per_worker < need:
        return 1.0
    low, high = initial_delta, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if compressor.size(mid, d).bits_per_worker >= need:
            high = mid
        else:
            low = mid
    return high


def cocktail_controller(context: MethodContext, options: CocktailOptions) -> Controller:
    """The reference recipe, a hand-given pair, or DeCo's first plan frozen (its probe sized
    by ``cocktail_probe``)."""
    if options.cocktail_reference_defaults:
        return StaticController(REFERENCE_DELTA, REFERENCE_TAU)
    if options.cocktail_delta is not None and options.cocktail_tau is not None:
        return StaticController(options.cocktail_delta, options.cocktail_tau)
    initial = options.initial_delta
    if options.cocktail_probe == "deco":
        initial = probe_delta(_compressor(context, options), initial, context.d)
    return deco_controller(context, options, interval=PLAN_ONCE, initial_delta=initial)


def _compressor(context: MethodContext, options: CocktailOptions) -> CocktailCompressor:
    return CocktailCompressor(
        context.d, seed=context.seed, quant_bits=options.cocktail_quant_bits,
        bucket_size=options.cocktail_bucket_size,
        max_sample_fraction=options.cocktail_max_sample_fraction)


def build_cocktail_sgd(context: MethodContext, options: CocktailOptions) -> Method:
    return CocktailSGD(context, _compressor(context, options),
                       cocktail_controller(context, options))


def cocktail_sgd_decisions(context: MethodContext, options: CocktailOptions) -> DecisionPolicy:
    """A static pair (reference recipe or by hand) reads no network; DeCo's first plan does."""
    controller = cocktail_controller(context, options)
    if isinstance(controller, StaticController):
        return NETWORK_INDEPENDENT
    compressor = _compressor(context, options)
    return ControllerDecisions(controller, lambda delta: compressor.size(delta, context.d))


COCKTAIL_SGD_SPEC = MethodSpec(
    "cocktail-sgd", "CocktailSGD: random sample, Top-k and 4-bit quantisation with error "
    "feedback, static (δ, τ) = DeCo's first plan", CocktailOptions, build_cocktail_sgd,
    network_decisions=cocktail_sgd_decisions, rules=ALL_RULES - {"topk_scope"})
