"""DGA: Delayed Gradient Averaging (docs/design.md §8.3; Zhu et al., NeurIPS 2021).

Every worker j holds its own model w^j. At iteration t it takes its gradient g^j_t at w^j_t,
runs the shared optimizer on it (learning-rate schedule, momentum and weight decay included;
each worker keeps its own momentum buffer) and gets its signed local update

    Δ^j_t = −γ_t v^j_t,          v^j_t = μ v^j_{t−1} + g^j_t + wd · w^j_t,

applies it at once and sends it (dense, 32 d bits) with staleness D:

    w^j_{t+1/2} = w^j_t + Δ^j_t
    w^j_{t+1}   = w^j_{t+1/2} − Δ^j_{t−D} + (1/n) Σ_i Δ^i_{t−D}     (t >= D; local only for t < D)

so each worker swaps its own stale contribution for the average once that average arrives,
D iterations later. The workers' models differ only by their last D local updates:
w^j_t = x̄_t + Σ_{s in flight} Δ^j_s, where x̄_t = x_0 + Σ_{s applied} (1/n) Σ_i Δ^i_s is the
part they all share. With D = 0 this is D-SGD (docs/design.md §2 with δ = 1, τ = 0).

Choice of D (static, as in the paper): the smallest integer D >= 0 with

    T + lat + c <= (D + 1) · max(T, c),       capped at ``dga_delay_max``,

from the first transfer measured (T: compute time, c: transmission time of the dense message,
lat: latency; see :func:`dga_delay`). Bits: 32 d per worker per iteration; time model: τ = D
with W = 32 d (docs/design.md §4.4). DGA hides latency, not bandwidth.

Decisions this project made where the paper or its reference code is ambiguous:

- Update level: what is sent and swapped is the optimizer's output Δ^j_t (not the raw
  gradient), which makes the swap exact under momentum, weight decay and any learning-rate
  schedule. Momentum buffers stay local and are never averaged. The paper's own momentum
  handling could not be checked against its code.
- The paper's K = 1 setting (averaging every iteration, as the DeCo paper runs DGA); no
  compression.
- Automatic D: until the first measurement arrives the method sends with D = 0, so
  iteration 0 is the probe: with τ = 0 the clock waits for its arrival, and D is chosen at
  iteration 1 from that single observation (T = compute_s, c = tx_end − tx_start, which
  includes the topology's factor h, lat = arrive − tx_end = l·b) and never changed. Every
  message keeps the staleness it was sent with. ``dga_delay_max`` caps only this automatic
  choice; a D given with ``dga_delay`` is used as is.
- State: the [n, d] stack is stored as the shared part x̄ plus each worker's sum of in-flight
  local updates, so the part the workers agree on is bit-identical on all of them (with
  D = 0 the workers' models are exactly equal) and the stack ``models`` is their sum.
- Evaluation and the runner's ``params`` hold the average of the workers' models,
  x̄ + (1/n) Σ_j Σ_{s in flight} Δ^j_s. BatchNorm statistics: the simulated backend reads
  buffers from one template module and never updates them during training, so all workers
  share identical statistics and their average is that shared value.
- Messages still in flight when training ends are never applied (docs/design.md §2.3); their
  local parts are in each worker's model, so the average model contains their average.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field
from torch import Tensor

from decobench.clock.wire import dense_wire_bits
from decobench.compression.compressors import Compressed
from decobench.methods.base import (
    Due,
    Method,
    MethodContext,
    MethodOptions,
    MethodSpec,
    Observation,
    Sent,
    summed,
)
from decobench.methods.decisions import NETWORK_INDEPENDENT, Decision, DecisionPolicy
from decobench.methods.optimizer import SharedOptimizer


class DGAOptions(MethodOptions):
    """DGA's delay D: fixed, or chosen once from the first measured transfer."""

    dga_delay: int | None = Field(
        None, ge=0, le=1000,
        description="D: iterations between sending a local update and swapping it for the "
                    "workers' average (0 = D-SGD); unset = chosen once from the first measured "
                    "transfer as the smallest D with T + b + 32d/a <= (D+1)·max(T, 32d/a)")
    dga_delay_max: int = Field(
        20, ge=0, le=1000,
        description="cap on the automatically chosen D, in iterations; a D given with "
                    "--dga-delay is not capped (this project's choice; the paper sets D per "
                    "experiment)")


def dga_delay(compute_s: float, transmit_s: float, latency_s: float, delay_max: int) -> int:
    """The smallest integer D >= 0 with ``T + lat + c <= (D + 1) · max(T, c)``, capped at
    ``delay_max``: the delay at which one iteration's compute, transmission and latency fit
    in the D + 1 iteration slots of the bottleneck max(T, c), so that the time model's
    T_avg = max(T, c, (T + c + lat) / (D + 1)) equals max(T, c).

    ``compute_s`` T, ``transmit_s`` c and ``latency_s`` lat are in seconds and must be >= 0.
    With T = c = 0 only a zero latency fits (D = 0); any latency gives the cap.
    """
    for name, value in (("compute_s", compute_s), ("transmit_s", transmit_s),
                        ("latency_s", latency_s)):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if delay_max < 0:
        raise ValueError(f"delay_max must be >= 0, got {delay_max!r}")
    slot = max(compute_s, transmit_s)
    total = compute_s + latency_s + transmit_s
    if slot == 0:
        return 0 if total == 0 else delay_max
    ratio = total / slot
    if ratio > delay_max + 1:
        return delay_max
    delay = max(0, math.ceil(ratio) - 1)
    # The float ratio may land one off the exact comparison; settle it with the inequality.
    while delay > 0 and total <= delay * slot:
        delay -= 1
    while delay < delay_max and total > (delay + 1) * slot:
        delay += 1
    return delay


class DelayChoice(DecisionPolicy):
    """DGA's decisions: D as given, or D = 0 (the probe) until the first measured transfer
    fixes it with :func:`dga_delay`; every message is dense (32 d bits). The log of the
    iteration D is chosen at names it and the measurements it came from (a given D is
    logged at iteration 0, unless ``log_given`` is False)."""

    def __init__(self, d: int, delay: int | None, delay_max: int,
                 log_given: bool = True) -> None:
        self.d, self.delay, self.delay_max = d, delay, delay_max
        self._log: dict[str, Any] = (
            {"dga_delay": delay} if delay is not None and log_given else {})

    def observe(self, observation: Observation) -> None:
        if self.delay is not None:
            return
        compute_s = observation.compute_s
        transmit_s = observation.tx_end_s - observation.tx_start_s
        latency_s = observation.arrive_s - observation.tx_end_s
        self.delay = dga_delay(compute_s, transmit_s, latency_s, self.delay_max)
        self._log = {"dga_delay": self.delay, "dga_compute_s": compute_s,
                     "dga_transmit_s": transmit_s, "dga_latency_s": latency_s}

    def decide(self, iteration: int) -> Decision:
        log, self._log = self._log, {}
        return Decision(1.0, 0 if self.delay is None else self.delay,
                        dense_wire_bits(self.d), True, log)


def dga_decisions(context: MethodContext, options: DGAOptions) -> DecisionPolicy:
    """A given D reads no network; the automatic D is chosen from the first transfer."""
    if options.dga_delay is not None:
        return NETWORK_INDEPENDENT
    return DelayChoice(context.d, None, options.dga_delay_max)


@dataclass
class WorkerModels:
    """The n workers' models w^j = shared + in_flight[j]: the part they all hold (x̄) and each
    worker's sum of its own local updates whose average has not arrived yet."""

    shared: Tensor     # [d]
    in_flight: Tensor  # [n, d]

    @classmethod
    def start(cls, params: Tensor, workers: int) -> WorkerModels:
        return cls(params.detach().clone(), params.new_zeros((workers, params.numel())))

    def stack(self) -> Tensor:
        """The ``[n, d]`` stack of the workers' models."""
        return self.shared + self.in_flight

    def average(self) -> Tensor:
        """(1/n) Σ_j w^j."""
        return self.shared + self.in_flight.mean(dim=0)

    def apply_local(self, local: Tensor) -> None:
        """w^j ← w^j + Δ^j for every worker (``local`` is ``[n, d]``)."""
        self.in_flight.add_(local)

    def swap_for_average(self, local: Tensor, average: Tensor) -> None:
        """w^j ← w^j − Δ^j_s + (1/n) Σ_i Δ^i_s: the average of iteration s has arrived
        (``local`` is these workers' own Δ^j_s, ``average`` the mean over all n)."""
        self.in_flight.sub_(local)
        self.shared.add_(average)


class DGA(Method):
    """Delayed Gradient Averaging with per-worker models (see the module docstring).

    The workers' models are created from the shared parameters on the first call of
    :meth:`worker_params` or :meth:`step`; ``delay`` is D (None until it is chosen).
    """

    name = "dga"

    def __init__(self, context: MethodContext, options: DGAOptions) -> None:
        self.context = context
        self.choice = DelayChoice(context.d, options.dga_delay, options.dga_delay_max)
        self.optimizer = SharedOptimizer(context.optimizer)
        self.replayed: tuple[int, ...] = ()
        self.sent_local: dict[int, Tensor] = {}   # iteration s -> these workers' Δ^j_s
        self.workers: WorkerModels | None = None

    @property
    def models(self) -> Tensor | None:
        """The ``[n, d]`` stack of the workers' models (None before the first iteration)."""
        return None if self.workers is None else self.workers.stack()

    @property
    def delay(self) -> int | None:
        """D (None until it is chosen)."""
        return self.choice.delay

    def observe(self, observation: Observation) -> None:
        """The first measured transfer fixes D (once); later ones are ignored."""
        self.choice.observe(observation)

    def worker_params(self, params: Tensor) -> Tensor:
        return self._workers(params).stack()

    def evaluation_params(self, params: Tensor,
                          in_flight: Callable[[], Sequence[Due]] = tuple) -> Tensor:
        """The workers' average model. A process holding every worker averages its rows; an
        emulated rank holds one, so it adds the in-flight averages to the shared part:
        x̄ + Σ_{s in flight} (1/n) Σ_j Δ^j_s."""
        if self.workers is None:
            return params
        if self.context.local_workers == self.context.workers:
            return self.workers.average()
        return summed(in_flight(), self.workers.shared.clone())

    def replay(self, schedules: Sequence[Any]) -> bool:
        """Send with the recorded τ of each iteration (D as an earlier run chose it)."""
        self.replayed = tuple(int(s.staleness) for s in schedules)
        self.choice = DelayChoice(self.context.d, self.replayed[-1], self.choice.delay_max,
                                  log_given=False)
        return True

    def send(self, iteration: int, params: Tensor, gradients: Tensor) -> Sent:
        """Worker half: each worker's local update Δ^j_t from its own gradient, applied to
        its own model at once and sent dense with staleness D."""
        workers = self._workers(params)
        local = self.optimizer.change(workers.stack(), gradients, iteration)
        decision = self.choice.decide(iteration)
        staleness = (self.replayed[min(iteration, len(self.replayed) - 1)] if self.replayed
                     else decision.staleness)
        workers.apply_local(local)
        self.sent_local[iteration] = local
        payload = Compressed(values=local, indices=None, d=self.context.d,
                             bits_per_worker=decision.bits_per_worker, delta=decision.delta)
        return Sent(payload, staleness, decision.log)

    def receive(self, iteration: int, params: Tensor, due: Sequence[Due]) -> dict[str, Any]:
        """Aggregation half: each worker swaps its own stale Δ^j_s for the average
        (1/n) Σ_i Δ^i_s that arrived; ``params`` becomes the workers' average model."""
        workers = self._workers(params)
        for message in due:
            workers.swap_for_average(self.sent_local.pop(message.sent_at), message.update.values)
        params.copy_(workers.average())
        return {}

    def _workers(self, params: Tensor) -> WorkerModels:
        """The workers' models, created from the shared ``params`` on first use."""
        if self.workers is None:
            self.workers = WorkerModels.start(params, self.context.local_workers)
        return self.workers


def build_dga(context: MethodContext, options: DGAOptions) -> Method:
    return DGA(context, options)


DGA_SPEC = MethodSpec("dga", "DGA: per-worker models, each swaps its local update for the "
                      "workers' average D iterations later (hides latency)", DGAOptions,
                      build_dga, network_decisions=dga_decisions)
