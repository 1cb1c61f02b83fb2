"""Method registry: every method ``decobench run --method`` accepts.

A :class:`MethodSpec` names a method, its typed options and a factory. DD-EF-SGD and
DeCo-SGD live here; the baselines (``baselines/``) register through the same spec.
"""

from __future__ import annotations

from benchmark.compressors import TopKCompressor
from benchmark.errors import DecobenchError
from benchmark.methods.base import (
    Method,
    MethodContext,
    MethodOptions,
    MethodSpec,
    Observation,
    StepResult,
)
from benchmark.methods.controllers import StaticController, deco_controller
from benchmark.methods.ddefsgd import DDEFSGD
from benchmark.methods.options import DecoOptions, StaticOptions


def build_dd_ef_sgd(context: MethodContext, options: StaticOptions) -> Method:
    return DDEFSGD(context, TopKCompressor(), StaticController(options.delta, options.tau))


def build_deco_sgd(context: MethodContext, options: DecoOptions) -> Method:
    controller = deco_controller(context, options, interval=options.deco_interval)
    return DDEFSGD(context, TopKCompressor(), controller)


def _specs() -> dict[str, MethodSpec]:
    from baselines import BASELINE_SPECS  # baselines import this package's base types

    own = (
        MethodSpec("dd-ef-sgd", "DD-EF-SGD: global Top-k with error feedback and a fixed "
                   "staleness (static δ, τ)", StaticOptions, build_dd_ef_sgd),
        MethodSpec("deco-sgd", "DeCo-SGD: DD-EF-SGD with δ and τ re-planned from measured "
                   "bandwidth, latency and compute time", DecoOptions, build_deco_sgd),
    )
    return {spec.name: spec for spec in (*BASELINE_SPECS, *own)}


def method_specs() -> dict[str, MethodSpec]:
    """All registered methods by name."""
    return _specs()


def get_method_spec(name: str) -> MethodSpec:
    specs = _specs()
    if name not in specs:
        raise DecobenchError(f"unknown method {name!r}; available methods: "
                             f"{', '.join(sorted(specs))}")
    return specs[name]


__all__ = ["DDEFSGD", "Method", "MethodContext", "MethodOptions", "MethodSpec", "Observation",
           "StepResult", "get_method_spec", "method_specs"]
