"""Typed options of the methods in this module's registry (each field is a ``decobench run`` flag)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from decobench.methods.base import MethodOptions


class StaticOptions(MethodOptions):
    """DD-EF-SGD with a fixed compression ratio and staleness."""

    delta: float = Field(0.01, gt=0, le=1, description="compression ratio δ: fraction of "
                         "coordinates kept by global Top-k, in (0, 1]; 1 = no compression")
    tau: int = Field(0, ge=0, le=1000, description="staleness τ in iterations: an update "
                     "computed at iteration t is applied at t + τ")


class PlanModelOptions(MethodOptions):
    """The knobs of DeCo's plan model (docs/design.md §5): what a plan may choose and how it
    scores a pair; shared by every planner, the EWMA estimator's weight aside."""

    tau_max: int = Field(32, ge=0, le=1000, description="largest staleness the planner considers")
    delta_min: float = Field(1e-4, gt=0, le=1, description="smallest compression ratio δ "
                             "the planner considers")
    kappa: float = Field(1.0, ge=0, description="κ in the fallback objective "
                         "T_avg·(1 + κ·sqrt(Φ)) used when no τ is bubble-free (this "
                         "project's modelling choice)")
    phi: Literal["paper", "ef"] = Field("paper", description="Φ model (iteration-to-accuracy "
                                        "factor); 'paper' = τ + (1−δ)/(δ(1−δ)^τ); 'ef' = τ + "
                                        "0.003·(1−δ)/(δ(1−δ)^τ), this project's alternative "
                                        "(docs/deco-planner.md)")
    initial_delta: float = Field(0.01, gt=0, le=1, description="δ of the first iteration, "
                                 "sent before any measurement exists (it is the probe)")
    planner: Literal["paper", "time-to-accuracy"] = Field(
        "paper", description="'paper' = Algorithm 1 (bubble-free pairs, minimal Φ); "
        "'time-to-accuracy' = minimise T_avg·(1 + κ·sqrt(Φ)) over every (δ, τ), bubble-free or "
        "not, this project's alternative (docs/deco-planner.md)")


class PlannerOptions(PlanModelOptions):
    """The DeCo planner's knobs (docs/design.md §5), shared by DeCo-SGD and by CocktailSGD,
    whose static (δ, τ) is DeCo's first plan: the plan model's and the EWMA estimator's."""

    estimator_alpha: float = Field(0.3, gt=0, le=1, description="EWMA weight of the newest "
                                   "measurement of bandwidth, latency and compute time")


class DecoOptions(PlannerOptions):
    """DeCo-SGD: DD-EF-SGD with (δ, τ) re-planned by DeCo every F iterations."""

    deco_interval: int = Field(100, ge=1, description="F: re-plan every F iterations "
                               "(the paper's default 100; 10 reacts faster)")
