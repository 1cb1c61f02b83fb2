"""The static strategy frozen at DeCo's plan for the condition's MEAN (issue 39 point 5;
docs/methods/static-mean-plan.md).

The paper's static strategy (:mod:`decobench.baselines.cocktail_topk`) freezes DeCo's FIRST
plan, made from one probe: on a varying link that plan depends on where the trace happens
to start (a lottery). This variant asks what a static (δ, τ) chosen with foresight of the
condition does: DD-EF-SGD with global Top-k and (δ, τ) = DeCo's Algorithm 1 (docs/design.md §5.3)
applied, before the run, to the trace's mean bandwidth and mean one-way latency and the
compute time T (``MethodContext.condition``). It sends the same messages
as DeCo-SGD at that pair (W(δ) of §3) from iteration 0 (no probe) and never re-plans. It is
not a method of the paper, and not an online method: it reads the whole trace's means, which
no deployed system knows in advance.
"""

from __future__ import annotations

from typing import Any

from decobench.compression.compressors import TopKCompressor
from decobench.errors import DecobenchError
from decobench.methods import TOPK_DD_EF_SGD
from decobench.methods.base import Method, MethodContext, MethodSpec, Observation
from decobench.methods.controllers import Schedule, plan_fields
from decobench.methods.ddefsgd import ALL_RULES, DDEFSGD, topk_compressor
from decobench.methods.decisions import ControllerDecisions, DecisionPolicy
from decobench.methods.options import PlannerOptions
from decobench.planning.phi import get_phi
from decobench.planning.planner import Plan, plan


class StaticMeanPlanOptions(PlannerOptions):
    """The DeCo planner's options, for the one plan made from the condition's means
    (``initial_delta`` and ``estimator_alpha`` are unused: there is no probe)."""


def mean_plan(context: MethodContext, options: PlannerOptions) -> Plan:
    """DeCo's plan (Algorithm 1) for the condition's mean bandwidth, latency and T."""
    means = context.condition
    if means is None:
        raise DecobenchError("static-mean-plan plans from the condition's mean bandwidth, "
                             "latency and compute time, known before the run: it needs a "
                             "fixed compute time (not --compute-time measured)")
    return plan(context.d, context.workers, means.compute_s, means.bandwidth_bps,
                means.latency_s, topology=context.topology, phi=get_phi(options.phi),
                tau_max=options.tau_max, delta_min=options.delta_min, kappa=options.kappa,
                objective=options.planner)


class MeanPlanController:
    """A fixed (δ, τ), DeCo's plan for the condition's means, logged with the figures it was
    made from on the first iteration (``plan_*``, as DeCo-SGD logs its plans)."""

    def __init__(self, context: MethodContext, options: PlannerOptions) -> None:
        self.plan = mean_plan(context, options)
        assert context.condition is not None
        self.means = context.condition
        self._schedule = Schedule(self.plan.delta, self.plan.staleness)
        self._logged = False

    def schedule(self, iteration: int) -> Schedule:
        return self._schedule

    def observe(self, observation: Observation) -> None:
        return None

    def log(self) -> dict[str, Any]:
        if self._logged:
            return {}
        self._logged = True
        return {**plan_fields(self.means, self.plan), "plan_from": "condition means"}


def build_static_mean_plan(context: MethodContext, options: StaticMeanPlanOptions) -> Method:
    return DDEFSGD(context, topk_compressor(context), MeanPlanController(context, options))


def static_mean_plan_decisions(context: MethodContext,
                               options: StaticMeanPlanOptions) -> DecisionPolicy:
    """One (δ, τ) for the whole run, fixed by the condition's means."""
    return ControllerDecisions(MeanPlanController(context, options),
                               lambda delta: TopKCompressor().size(delta, context.d))


STATIC_MEAN_PLAN_SPEC = MethodSpec(
    "static-mean-plan", "a static strategy with foresight (not the paper's): global Top-k "
    "DD-EF-SGD with (δ, τ) = DeCo's plan for the condition's mean bandwidth, latency and "
    "compute time, computed before the run from the trace",
    StaticMeanPlanOptions, build_static_mean_plan,
    network_decisions=static_mean_plan_decisions, learner=TOPK_DD_EF_SGD, rules=ALL_RULES)
