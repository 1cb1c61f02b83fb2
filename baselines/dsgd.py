"""D-SGD: synchronous data-parallel SGD (docs/design.md §8.1).

Every iteration every worker computes g_t^i at the shared x_t; u_t = (1/n) Σ_i g_t^i is
all-reduced dense and the shared optimizer steps on it. It is DD-EF-SGD with δ = 1 and
τ = 0, built from the same pipeline (no error-feedback memory is kept because a dense
message leaves none). Bits: 32 d per worker per iteration; time T + W/a + b per iteration.
"""

from __future__ import annotations

from decobench.compression.compressors import DenseCompressor
from decobench.methods.base import Method, MethodContext, MethodOptions, MethodSpec
from decobench.methods.controllers import StaticController
from decobench.methods.ddefsgd import ALL_RULES, DDEFSGD
from decobench.methods.decisions import network_independent


class DSGDOptions(MethodOptions):
    """D-SGD has no options of its own."""


def build_dsgd(context: MethodContext, options: DSGDOptions) -> Method:
    return DDEFSGD(context, DenseCompressor(), StaticController(delta=1.0, staleness=0))


DSGD_SPEC = MethodSpec("d-sgd", "D-SGD: synchronous data-parallel SGD, dense all-reduce",
                       DSGDOptions, build_dsgd, network_decisions=network_independent,
                       rules=ALL_RULES)
