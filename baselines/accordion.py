"""Accordion: adaptive per-layer Top-k driven by a critical-regime detector
(Agarwal et al., MLSys 2021; docs/design.md §8.2).

Synchronous (τ = 0) layer-wise Top-k with error feedback. For every worker i and every
tensor l of the model (its coordinates in the flat vector, in ``param_shapes`` order):

    p_t^i = e_t^i + g_t^i
    c_t^i[l] = TopK_{δ_l}(p_t^i[l])   if ndim(l) > 1,   k_l = max(1, ⌈δ_l d_l⌉)
    c_t^i[l] = p_t^i[l]               if ndim(l) <= 1   (biases, norms: sent dense)
    e_{t+1}^i = p_t^i − c_t^i
    u_t = (1/n) Σ_i c_t^i,   x_{t+1} = shared optimizer step on u_t

δ_l is δ_crit while layer l is in a critical regime, δ_noncrit otherwise. Bits per worker:
W = Σ_{compressed l} W(k_l, d_l) + 32 · (dense parameters), with W(k, d) of docs/design.md §3
evaluated on the layer's own d_l (its indices address the layer). When every tensor is
sent whole the message is one dense all-reduce of 32 d bits, so Accordion(δ_crit =
δ_noncrit = 1) is the same computation as D-SGD.

Critical-regime detector (the reference code's behaviour, per compressed layer). A
detection window is L iterations (one epoch by default); window w covers iterations
[wL, (w+1)L). Over a window, A_l = Σ_t g_t^0[l] (worker 0's raw gradient, before error
feedback) and N_l(w) = ‖A_l‖. Checks happen at the end of windows w = 0, I, 2I, ...:

    r_l = |N_l(w − I) − N_l(w)| / N_l(w − I)    (∞ if N_l(w − I) = 0 or w = 0)
    critical_l = r_l >= η                        (in force from the next iteration)

Every layer is critical until the first check. A learning-rate decay at iteration t
(γ_t < γ_{t−1}; a warm-up increase is not a decay) makes every layer critical from t
until the next check, which then decides normally. A schedule that decays every
iteration (``warmup-cosine``) therefore keeps Accordion critical throughout.

Decisions this project made where the paper / reference code was ambiguous:
- I (in windows) is shrunk so that the run's budget holds at least 10 checks:
  I_eff = max(1, min(I, ⌊⌊max_iters / L⌋ / 10⌋)) when max_iters is known.
- The decision made at the end of iteration t applies from iteration t + 1 (the
  reference decides at an epoch's end for the next epoch).
- A_l is only accumulated during the windows that end in a check (the others are never
  read), which gives the same N_l as accumulating every window.
- Without ``param_shapes`` in the context the flat vector is treated as one compressed
  tensor named ``"flat"`` (global Top-k).
- Not copied from the reference: its Top-k path never writes the error-feedback memory, it
  sums the workers' messages without 1/n, it ignores its threshold flag (η is hard-coded
  0.5 there), and it sorts every tensor fully instead of a Top-k selection.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import Field
from torch import Tensor

from decobench.compression.error_feedback import ErrorFeedback
from decobench.compression.layerwise import Layer, layerwise_topk, model_layers
from decobench.methods.base import (
    Due,
    Method,
    MethodContext,
    MethodOptions,
    MethodSpec,
    Sent,
    summed,
)
from decobench.methods.decisions import network_independent
from decobench.methods.optimizer import OptimizerConfig, SharedOptimizer, learning_rate
from decobench.methods.rules import RulesState, WorkerRules

MIN_CHECKS = 10
"""The interval I is shrunk so that a run's budget holds at least this many checks."""


class AccordionOptions(MethodOptions):
    """Accordion: per-layer Top-k with error feedback, δ switched by a critical-regime
    detector."""

    accordion_eta: float = Field(0.5, ge=0, description="η: a layer is critical when the "
                                 "relative change of its windowed gradient norm, "
                                 "|N_prev − N| / N_prev, is at least η (the paper's 0.5)")
    accordion_delta_crit: float = Field(0.1, gt=0, le=1, description="δ_crit: fraction of "
                                        "each layer's coordinates kept by Top-k in a critical "
                                        "regime, in (0, 1] (the paper used 0.99 on CIFAR-10)")
    accordion_delta_noncrit: float = Field(0.01, gt=0, le=1, description="δ_noncrit: fraction "
                                           "of each layer's coordinates kept by Top-k outside "
                                           "critical regimes, in (0, 1] (the paper used 0.10 "
                                           "on CIFAR-10)")
    accordion_interval: int = Field(10, ge=1, description="I: check the detector every I "
                                    "detection windows (the paper's 10 epochs); shrunk so "
                                    "the run's budget holds at least 10 checks")
    accordion_window_iters: int | None = Field(None, ge=1, description="L: iterations in one "
                                               "detection window; default (unset) one epoch "
                                               "of the task's data, as in the paper")


def detection_interval(interval: int, window_iters: int, max_iters: int | None) -> int:
    """I_eff = max(1, min(I, ⌊⌊max_iters / L⌋ / 10⌋)): the budget holds at least 10 checks
    (I unchanged when the budget is unknown)."""
    if max_iters is None:
        return interval
    return max(1, min(interval, (max_iters // window_iters) // MIN_CHECKS))


def norm_change_ratio(previous: float | None, current: float) -> float:
    """r = |N_prev − N| / N_prev; ∞ without an earlier norm or when N_prev = 0."""
    if previous is None or previous == 0:
        return math.inf
    return abs(previous - current) / previous


def learning_rate_decayed(config: OptimizerConfig, iteration: int) -> bool:
    """True when γ_t < γ_{t−1} (a decay; warm-up increases and constant steps are not)."""
    return iteration > 0 and learning_rate(config, iteration) < learning_rate(config, iteration - 1)


@dataclass(frozen=True)
class Check:
    """One detector check at the end of window ``window``: per compressed layer its windowed
    norm N, ratio r (∞ at the first window) and whether it is now critical."""

    window: int
    norms: tuple[float, ...]
    ratios: tuple[float, ...]
    critical: tuple[bool, ...]


class CriticalRegimeDetector:
    """Accordion's per-layer detector over worker 0's raw gradients (module docstring).

    ``critical`` holds the current regime of each of ``layers``; :meth:`observe` is called
    with every iteration's gradient and returns a :class:`Check` at the end of each checked
    window; :meth:`force_critical` is the learning-rate-decay rule.
    """

    def __init__(self, layers: Sequence[Layer], d: int, window_iters: int, interval: int,
                 eta: float, device: torch.device | str = "cpu") -> None:
        self.layers = tuple(layers)
        self.window_iters, self.interval, self.eta = window_iters, interval, eta
        self.critical = [True] * len(self.layers)
        self._window_sum = torch.zeros(d, device=device)
        self._previous: tuple[float, ...] | None = None

    def force_critical(self) -> bool:
        """Every layer critical until the next check; True if that changed any layer."""
        changed = not all(self.critical)
        self.critical = [True] * len(self.layers)
        return changed

    def observe(self, iteration: int, gradient: Tensor) -> Check | None:
        """Add worker 0's raw ``[d]`` gradient of ``iteration`` to its window; at the end of a
        checked window decide every layer's regime and return the check."""
        window, position = divmod(iteration, self.window_iters)
        if window % self.interval:
            return None
        self._window_sum.add_(gradient)
        if position != self.window_iters - 1:
            return None
        norms = tuple(float(self._window_sum[layer.offset:layer.offset + layer.size].norm())
                      for layer in self.layers)
        self._window_sum.zero_()
        previous = self._previous if self._previous is not None else (None,) * len(norms)
        ratios = tuple(norm_change_ratio(before, now)
                       for before, now in zip(previous, norms, strict=True))
        self.critical = [ratio >= self.eta for ratio in ratios]
        self._previous = norms
        return Check(window=window, norms=norms, ratios=ratios, critical=tuple(self.critical))


def regimes_to_bytes(critical: Sequence[bool]) -> bytes:
    """The layers' regimes as an LSB-first bitmap (bit l of byte l // 8: layer l critical)."""
    out = bytearray((len(critical) + 7) // 8)
    for position, flag in enumerate(critical):
        if flag:
            out[position // 8] |= 1 << (position % 8)
    return bytes(out)


def regimes_from_bytes(data: bytes, layers: int) -> list[bool]:
    """Inverse of :func:`regimes_to_bytes` for ``layers`` layers."""
    if len(data) != (layers + 7) // 8:
        raise ValueError(f"{len(data)} control bytes cannot hold the regimes of {layers} layers")
    return [bool((data[position // 8] >> (position % 8)) & 1) for position in range(layers)]


def _json_ratio(ratio: float) -> float | None:
    return None if math.isinf(ratio) else ratio


class Accordion(RulesState, Method):
    """Accordion on the shared machinery: :class:`ErrorFeedback` with a per-layer Top-k,
    the shared optimizer, and the :class:`CriticalRegimeDetector` choosing each layer's δ.

    Only the process holding worker 0 runs the detector (it reads worker 0's gradient); its
    regimes after iteration t travel with message t as control bytes
    (:attr:`~decobench.methods.Sent.control`), and every process adopts them when it applies
    that message (τ = 0: before iteration t + 1), so all workers keep the same k_l. The
    learning-rate-decay rule needs no message: every process applies it itself.
    """

    name = "accordion"

    def __init__(self, context: MethodContext, options: AccordionOptions) -> None:
        self.context = context
        self.delta_crit = options.accordion_delta_crit
        self.delta_noncrit = options.accordion_delta_noncrit
        self.layers = model_layers(context.param_shapes, context.d)
        self.compressed_layers = tuple(layer for layer in self.layers if layer.compressed)
        self.window_iters = options.accordion_window_iters or context.iterations_per_epoch
        self.interval = detection_interval(options.accordion_interval, self.window_iters,
                                           context.max_iters)
        self.detector = CriticalRegimeDetector(self.compressed_layers, context.d,
                                               self.window_iters, self.interval,
                                               options.accordion_eta, device=context.device)
        self.error_feedback = ErrorFeedback(context.local_workers, context.d, device=context.device)
        self.rules = WorkerRules(context.rules, context.optimizer)
        self.optimizer = SharedOptimizer(self.rules.applied_optimizer())

    def layer_deltas(self) -> list[float]:
        """δ_l of every layer in flat order (1 for dense layers)."""
        regime = dict(zip(self.compressed_layers, self.detector.critical, strict=True))
        return [self._layer_delta(regime[layer]) if layer.compressed else 1.0
                for layer in self.layers]

    def send(self, iteration: int, params: Tensor, gradients: Tensor) -> Sent:
        """Worker half: each layer's δ from the detector, error feedback with the per-layer
        Top-k; the detector then reads worker 0's raw gradient (τ = 0)."""
        log: dict[str, Any] = {}
        if iteration == 0:
            log.update(accordion_window_iters=self.window_iters,
                       accordion_interval_windows=self.interval)
        decayed = learning_rate_decayed(self.context.optimizer, iteration)
        if decayed and self.detector.force_critical():
            log["accordion_check"] = self._forced_record()
        deltas = self.layer_deltas()
        critical_layers = sum(self.detector.critical)
        inputs = self.rules.worker_input(gradients, iteration, 1.0, 0)   # no step bound
        compressed = self.error_feedback.apply(
            inputs, lambda p: layerwise_topk(p, self.layers, deltas))
        self.rules.sent(compressed)
        if self.context.first_worker == 0:       # this process holds worker 0: it decides
            check = self.detector.observe(iteration, gradients[0])
            if check is not None:
                log["accordion_check"] = self._check_record(check, decayed)
        log["accordion_critical_layers"] = critical_layers
        return Sent(compressed, 0, log, control=regimes_to_bytes(self.detector.critical))

    def receive(self, iteration: int, params: Tensor, due: Sequence[Due]) -> dict[str, Any]:
        """Aggregation half: x_{t+1} = shared optimizer step on u_t (τ = 0: this
        iteration's average); the regimes worker 0's detector chose come with the message."""
        for message in due:
            self.detector.critical = regimes_from_bytes(message.control,
                                                        len(self.compressed_layers))
        self.optimizer.step(params, summed(due, torch.zeros_like(params)), iteration,
                            scaled=self.rules.scaled)
        return {}

    def _layer_delta(self, critical: bool) -> float:
        return self.delta_crit if critical else self.delta_noncrit

    def _check_record(self, check: Check, decayed: bool) -> dict[str, Any]:
        layers = {layer.name: {"norm": norm, "ratio": _json_ratio(ratio), "critical": critical,
                               "delta": self._layer_delta(critical)}
                  for layer, norm, ratio, critical in zip(self.compressed_layers, check.norms,
                                                          check.ratios, check.critical,
                                                          strict=True)}
        return {"reason": "first_window" if check.window == 0 else "ratio",
                "window": check.window, "lr_decay": decayed, "layers": layers}

    def _forced_record(self) -> dict[str, Any]:
        layers = {layer.name: {"norm": None, "ratio": None, "critical": True,
                               "delta": self.delta_crit} for layer in self.compressed_layers}
        return {"reason": "lr_decay", "window": None, "lr_decay": True, "layers": layers}


def build_accordion(context: MethodContext, options: AccordionOptions) -> Method:
    return Accordion(context, options)


ACCORDION_SPEC = MethodSpec("accordion", "Accordion: per-layer Top-k with error feedback, "
                            "more coordinates kept in detected critical regimes (τ = 0)",
                            AccordionOptions, build_accordion,
                            network_decisions=network_independent,
                            rules=frozenset({"clip_norm", "ef_units", "momentum_correction",
                                             "topk_scope"}))
"""Accordion implements the update rules of docs/design.md §2.5 but the step bound (its δ is
per layer); ``--topk-scope layer`` is what it always does."""
