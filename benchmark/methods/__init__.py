"""Method registry: every method ``decobench run --method`` accepts.

A :class:`MethodSpec` names a method, its typed options and a factory. DD-EF-SGD and
DeCo-SGD live here; every method, these two and the baselines (``baselines/``) included, is
found through the ``decobench.methods`` entry points (:mod:`decobench.registry`). The
floor also holds the pieces every method shares: the delay queue (``message_queue``) and the
shared optimizer step (``optimizer``).

May import: the foundation, ``decobench.netem``, ``clock``, ``planning`` and
``compression``.
"""

from __future__ import annotations

from decobench.compression.compressors import TopKCompressor
from decobench.methods.base import (
    Due,
    LocalExchange,
    Method,
    MethodContext,
    MethodOptions,
    MethodSpec,
    Observation,
    Sent,
    StepResult,
)
from decobench.methods.controllers import StaticController, deco_controller
from decobench.methods.ddefsgd import ALL_RULES, DDEFSGD, topk_compressor
from decobench.methods.decisions import (
    ControllerDecisions,
    DecisionPolicy,
    network_independent,
)
from decobench.methods.options import DecoOptions, StaticOptions
from decobench.methods.robust import RobustDecoOptions, build_deco_sgd_robust, robust_controller
from decobench.registry import METHODS_GROUP, Registry


def build_dd_ef_sgd(context: MethodContext, options: StaticOptions) -> Method:
    return DDEFSGD(context, topk_compressor(context), StaticController(options.delta, options.tau))


def build_deco_sgd(context: MethodContext, options: DecoOptions) -> Method:
    controller = deco_controller(context, options, interval=options.deco_interval)
    return DDEFSGD(context, topk_compressor(context), controller)


def deco_sgd_decisions(context: MethodContext, options: DecoOptions) -> DecisionPolicy:
    """DeCo-SGD's (δ_t, τ_t): the planner on the measurements, as :func:`build_deco_sgd`."""
    controller = deco_controller(context, options, interval=options.deco_interval)
    return ControllerDecisions(controller, lambda delta: TopKCompressor().size(delta, context.d))


def deco_sgd_robust_decisions(context: MethodContext,
                              options: RobustDecoOptions) -> DecisionPolicy | None:
    """deco-sgd-robust's (δ_t, τ_t), as :func:`build_deco_sgd_robust` makes them; None with
    the Theorem-1 iteration model, whose κ is measured from the applied updates."""
    if options.iteration_model != "fixed":
        return None
    return ControllerDecisions(robust_controller(context, options),
                               lambda delta: TopKCompressor().size(delta, context.d))


TOPK_DD_EF_SGD = "dd-ef-sgd/top-k"
"""The :attr:`MethodSpec.learner` of DD-EF-SGD with global Top-k whose (δ, τ) come from the
network (DeCo-SGD, the paper's static strategy): where their decisions coincide, one trajectory."""

DD_EF_SGD_SPEC = MethodSpec(
    "dd-ef-sgd", "DD-EF-SGD: global Top-k with error feedback and a fixed staleness (static δ, τ)",
    StaticOptions, build_dd_ef_sgd, network_decisions=network_independent, rules=ALL_RULES)
DECO_SGD_SPEC = MethodSpec(
    "deco-sgd", "DeCo-SGD: DD-EF-SGD with δ and τ re-planned from measured bandwidth, latency "
    "and compute time", DecoOptions, build_deco_sgd, network_decisions=deco_sgd_decisions,
    learner=TOPK_DD_EF_SGD, rules=ALL_RULES)
DECO_SGD_ROBUST_SPEC = MethodSpec(
    "deco-sgd-robust", "this project's DeCo-SGD variant: δ sized for the bandwidth's recent "
    "distribution, re-planned on change (not the paper's)", RobustDecoOptions,
    build_deco_sgd_robust, network_decisions=deco_sgd_robust_decisions, learner=TOPK_DD_EF_SGD,
    rules=ALL_RULES)


def _spec_name(obj: object) -> str:
    if not isinstance(obj, MethodSpec):
        raise TypeError(f"expected a decobench.methods.MethodSpec, got {type(obj).__name__}")
    return obj.name


METHODS: Registry[MethodSpec] = Registry(METHODS_GROUP, "method", _spec_name)
"""Every method ``decobench run --method`` accepts: the entry points of group
``decobench.methods`` (the shipped ones included) and :func:`register_method` additions."""


def register_method(spec: MethodSpec) -> MethodSpec:
    """Add a method in this process without packaging it (it shadows an entry point)."""
    return METHODS.register(spec)


def method_specs() -> dict[str, MethodSpec]:
    """All registered methods by name."""
    return METHODS.all()


def get_method_spec(name: str) -> MethodSpec:
    return METHODS.get(name)


__all__ = ["DDEFSGD", "DD_EF_SGD_SPEC", "DECO_SGD_SPEC", "METHODS", "Due", "LocalExchange",
           "Method", "MethodContext", "MethodOptions", "MethodSpec", "Observation", "Sent",
           "StepResult", "TOPK_DD_EF_SGD", "get_method_spec", "method_specs", "register_method"]
