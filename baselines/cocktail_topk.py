"""The DeCo paper's static strategy: "CocktailSGD" as the paper ran it (docs/design.md
§8.5; the paper's appendix C.2).

The appendix says "the compressor we use in all baselines is Top-k" and "CocktailSGD uses the
fixed δ and τ ... chosen by DeCo-SGD". So the paper's CocktailSGD row is DD-EF-SGD
(docs/design.md §2) with global Top-k and a static (δ, τ) equal to DeCo's FIRST plan:

    p_t^i = e_t^i + g_t^i,   Δ_t^i = TopK_δ(p_t^i),   e_{t+1}^i = p_t^i − Δ_t^i,
    u_t = (1/n) Σ_i Σ_{s : s + τ_s = t} Δ_s^i,   x_{t+1} = shared optimizer step on u_t,

where iteration 0 is DeCo's probe (δ = ``initial_delta``, τ = 0), the first plan is made from
its measurement exactly as DeCo-SGD makes it, and that plan is never changed
(``PLAN_ONCE``). It is therefore DeCo-SGD without re-planning: the same messages, the same
bits (W(δ) of docs/design.md §3), and the same first plan; it differs only once the network
changes. The report's headline "speed-up over the static strategy" is measured against
this method. CocktailSGD with its own compressor (random sample → Top-k → 4-bit
quantisation, :mod:`decobench.baselines.cocktail`) is the original's method and stays its own row.
"""

from __future__ import annotations

from decobench.compression.compressors import TopKCompressor
from decobench.methods import TOPK_DD_EF_SGD
from decobench.methods.base import Method, MethodContext, MethodSpec
from decobench.methods.controllers import PLAN_ONCE, deco_controller
from decobench.methods.ddefsgd import ALL_RULES, DDEFSGD, topk_compressor
from decobench.methods.decisions import ControllerDecisions, DecisionPolicy
from decobench.methods.options import PlannerOptions


class CocktailTopKOptions(PlannerOptions):
    """The DeCo planner's options, for the first plan (the only one this method makes)."""


def build_cocktail_topk(context: MethodContext, options: CocktailTopKOptions) -> Method:
    return DDEFSGD(context, topk_compressor(context), deco_controller(context, options,
                                                              interval=PLAN_ONCE))


def cocktail_topk_decisions(context: MethodContext,
                            options: CocktailTopKOptions) -> DecisionPolicy:
    """The probe, then DeCo's first plan (it depends on the network it measured)."""
    return ControllerDecisions(deco_controller(context, options, interval=PLAN_ONCE),
                               lambda delta: TopKCompressor().size(delta, context.d))


COCKTAIL_TOPK_SPEC = MethodSpec(
    "cocktail-sgd-topk", "the DeCo paper's static strategy ('CocktailSGD' as the paper ran "
    "it): global Top-k DD-EF-SGD with (δ, τ) frozen at DeCo's first plan",
    CocktailTopKOptions, build_cocktail_topk, network_decisions=cocktail_topk_decisions,
    learner=TOPK_DD_EF_SGD, rules=ALL_RULES)
