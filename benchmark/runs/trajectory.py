"""Trajectory reuse: train once, re-time on the event clock for every network that leads to
the same decisions.

On the simulated backend with a fixed compute time T, what a run learns (its losses, metrics,
messages, δ and τ) depends on the task, seed, method options and the decisions the method
makes from the network; the network only sets the time axis (docs/design.md §4). So:

- :func:`reuse_key` names a run's trajectory: its configuration without the network, plus
  the digest of the decisions its method makes on that network
  (:func:`decision_digest`: the method's :class:`~decobench.methods.decisions.DecisionPolicy`
  run on the run's own event clock for its whole iteration budget, no gradients), or None
  when the trajectory cannot be known without training (and why); methods of one
  :attr:`~decobench.methods.base.MethodSpec.learner` (DeCo-SGD and the paper's static
  strategy) share keys across methods, so one trains wherever their decisions coincide;
- a run that trains records its trajectory (:class:`RecordingLearner`) in
  ``RUN_DIR/trajectory.pt``: per iteration the loss, the message's δ, τ, bits and dense flag,
  and the logged fields; the metric at every evaluation;
- a run with the same key is re-timed instead (:class:`RecordedLearner`): the same training
  loop (:func:`decobench.training.loop.train`) over a fresh :class:`~decobench.training.simulated.SimulatedTransport`
  on its own network, with the recorded trajectory as its model side. Its decisions are made
  again on its own clock by the policy and checked against the recorded ones at every
  iteration, and the policy's log fields (e.g. a plan's bandwidth estimate) replace the
  recorded run's. Its run directory is complete and says ``retimed_from``.

Runs whose time decides what they learn are never re-timed: a simulated-time budget
(``max_sim_time``), a measured compute time, a replayed schedule, the emulated backend, and
methods that do not declare their decisions (``MethodSpec.network_decisions`` None).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from decobench.atomicio import write_bytes_atomic
from decobench.errors import DecobenchError
from decobench.methods import Due, MethodContext, Observation, Sent
from decobench.methods.decisions import Decision, DecisionPolicy
from decobench.runs.rundir import TRAJECTORY

NETWORK_FIELDS = ("trace", "regime", "transmission_ratio", "latency_ratio", "ratio_shape",
                  "trace_loop", "compute_time_s", "condition")
"""RunConfig fields that only set the network (and T, which only times the clock): left out of
a trajectory's key, whose decision digest accounts for what they change."""

KEY_EXCLUDED = ("out", "data_root", "checkpoint_every_s", "label", "suite", "emulation")
"""RunConfig fields that change neither the trajectory nor the clock (names, paths)."""


@dataclass(frozen=True)
class Step:
    """One recorded iteration: the mean loss, the message (δ, τ, bits, dense), and the log
    fields of the worker half (``sent_log``) and of the aggregation half (``receive_log``)."""

    loss: float
    delta: float
    staleness: int
    bits_per_worker: int
    dense: bool
    sent_log: dict[str, Any]
    receive_log: dict[str, Any]

    def charge(self) -> tuple[float, int, int, bool]:
        return (self.delta, self.staleness, self.bits_per_worker, self.dense)


@dataclass
class Trajectory:
    """What a run learnt, without its times: ``steps`` (iteration k is ``steps[k]``) and
    ``metrics`` (the metric of the model after i iterations, at every evaluation of either
    pass), with its ``key`` (:func:`reuse_key`), ``d`` and the gradient engine it used."""

    key: str
    d: int = 0
    gradients: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    metrics: dict[int, float] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        """Write atomically (torch.save of plain Python values)."""
        import io

        buffer = io.BytesIO()
        torch.save({"key": self.key, "d": self.d, "gradients": self.gradients,
                    "steps": [vars(s) for s in self.steps], "metrics": self.metrics}, buffer)
        write_bytes_atomic(path, buffer.getvalue())

    @classmethod
    def load(cls, path: Path) -> Trajectory:
        try:
            state = torch.load(path, weights_only=True)
            return cls(key=state["key"], d=state["d"], gradients=state["gradients"],
                       steps=[Step(**s) for s in state["steps"]], metrics=state["metrics"])
        except (OSError, RuntimeError, KeyError, TypeError, EOFError) as exc:
            raise DecobenchError(f"cannot read the recorded trajectory {path}: {exc}") from exc


@dataclass(frozen=True)
class RecordedPayload:
    """The part of a message the simulated clock and the row read (no values)."""

    bits_per_worker: int
    dense: bool
    delta: float

    def mean(self) -> None:
        return None


class RecordingLearner:
    """A :class:`~decobench.training.loop.Learner` that trains through ``inner`` and records into
    ``trajectory`` (a refine pass replays the same iterations: only evaluations are added)."""

    def __init__(self, inner: Any, trajectory: Trajectory) -> None:
        self.inner, self.trajectory = inner, trajectory
        self.d, self.gradients_info = inner.d, inner.gradients_info
        trajectory.d, trajectory.gradients = inner.d, inner.gradients_info
        self._loss = 0.0
        self._sent: Sent | None = None

    def observe(self, observation: Observation) -> None:
        self.inner.observe(observation)

    def compute(self, iteration: int) -> float:
        self._loss = self.inner.compute(iteration)
        return self._loss

    def send(self, iteration: int) -> Sent:
        self._sent = self.inner.send(iteration)
        return self._sent

    def receive(self, iteration: int, due: Sequence[Due]) -> dict[str, Any]:
        log = self.inner.receive(iteration, due)
        sent = self._sent
        assert sent is not None
        if iteration == len(self.trajectory.steps):
            payload = sent.payload
            self.trajectory.steps.append(Step(
                self._loss, payload.delta, sent.staleness, payload.bits_per_worker,
                payload.dense, dict(sent.log), dict(log)))
        return log

    def evaluate(self, iterations: int, in_flight: Callable[[], Sequence[Due]]) -> float:
        metric = self.inner.evaluate(iterations, in_flight)
        self.trajectory.metrics[iterations] = metric
        return metric

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), "trajectory": self.trajectory}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved state. The recording keeps what it holds beyond the state
        (a refine pass starting from a first-pass state after the whole first pass has been
        recorded): the steps of one run agree, so the longer list is kept, and evaluations
        are only added."""
        self.inner.load_state_dict(state)
        recorded = state["trajectory"]
        if len(recorded.steps) > len(self.trajectory.steps):
            self.trajectory.steps[:] = recorded.steps
        self.trajectory.metrics.update(recorded.metrics)


class RecordedLearner:
    """A :class:`~decobench.training.loop.Learner` that plays a recorded trajectory back; ``policy``
    makes the method's network decisions again on this run's clock (module docstring)."""

    def __init__(self, trajectory: Trajectory, policy: DecisionPolicy, source: str,
                 own_log: bool = False) -> None:
        self.trajectory, self.policy, self.source = trajectory, policy, source
        self.own_log = own_log
        """True: the sent log is this run's decisions' log alone (the source may be another
        method of the same learner, which logs other fields, e.g. DeCo-SGD's re-plans)."""
        self.d, self.gradients_info = trajectory.d, trajectory.gradients

    def _step(self, iteration: int) -> Step:
        if iteration >= len(self.trajectory.steps):
            raise DecobenchError(f"the trajectory recorded in {self.source} ends after "
                                 f"{len(self.trajectory.steps)} iterations, but this run "
                                 f"needs iteration {iteration + 1}")
        return self.trajectory.steps[iteration]

    def observe(self, observation: Observation) -> None:
        self.policy.observe(observation)

    def compute(self, iteration: int) -> float:
        return self._step(iteration).loss

    def send(self, iteration: int) -> Sent:
        step = self._step(iteration)
        log = {} if self.own_log and not self.policy.independent else dict(step.sent_log)
        if not self.policy.independent:
            decision = self.policy.decide(iteration)
            if decision.charge() != step.charge():
                raise DecobenchError(
                    f"re-timing from {self.source}: at iteration {iteration + 1} the method "
                    f"decides (δ, τ, bits, dense) = {decision.charge()} on this network, the "
                    f"recorded run sent {step.charge()}; its network_decisions do not match "
                    "the method (run the sweep with --no-reuse, and report this as a bug)")
            log.update(decision.log)
        return Sent(RecordedPayload(step.bits_per_worker, step.dense, step.delta),  # type: ignore[arg-type]
                    step.staleness, log)

    def receive(self, iteration: int, due: Sequence[Due]) -> dict[str, Any]:
        return self._step(iteration).receive_log

    def evaluate(self, iterations: int, in_flight: Callable[[], Sequence[Due]]) -> float:
        try:
            return self.trajectory.metrics[iterations]
        except KeyError:
            raise DecobenchError(f"the trajectory recorded in {self.source} has no evaluation "
                                 f"after {iterations} iterations") from None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None


def decision_policy(run: Any, d: int) -> DecisionPolicy | None:
    """The method's :class:`DecisionPolicy` for this run (None: not declared, or these options
    decide from the training too)."""
    factory = run.spec.network_decisions
    if factory is None:
        return None
    context = MethodContext(d=d, workers=run.config.workers, topology=run.config.topology,
                            optimizer=run.optimizer, seed=run.config.seed,
                            max_iters=run.max_iters, condition=run.condition_means(d),
                            rules=run.rules)
    return factory(context, run.options)


def not_reusable(run: Any) -> str | None:
    """Why this run's trajectory cannot be known without training it, or None."""
    config = run.config
    if config.backend != "simulated":
        return f"the {config.backend} backend measures its own time"
    if run.compute_time_s is None:
        return "its compute time is measured"
    if config.max_sim_time is not None:
        return "a simulated-time budget (max_sim_time) decides where it stops"
    if config.replay_schedule is not None:
        return "it replays a recorded schedule"
    if run.rules.topk_scope == "layer":
        return ("layer-wise Top-k's message size depends on the model's tensors, which a "
                "decision policy does not see (docs/design.md §2.5)")
    if run.spec.network_decisions is None:
        return (f"method {run.spec.name} does not declare its network decisions "
                "(MethodSpec.network_decisions)")
    return None


def decision_digest(policy: DecisionPolicy, run: Any, d: int, log_names: bool = True) -> str:
    """SHA-256 of the decisions (δ, τ, bits, dense and, with ``log_names``, the names of the
    logged fields) the policy makes at every iteration of the run's budget on the run's own
    event clock, with observations delivered as :class:`~decobench.training.simulated.SimulatedTransport`
    delivers them."""
    from decobench.training.simulated import SimulatedTransport

    trace = run.condition.trace_for(d, run.compute_time_s)
    clock = SimulatedTransport(lambda _: trace, run.config.topology, run.config.workers,
                               run.compute_time_s, run.transport,
                               compute_times=run.compute_times, report=run.report)
    clock.start(d)
    digest = hashlib.sha256()
    for k in range(run.max_iters):
        for observation in clock.observations(k):
            policy.observe(observation)
        decision = policy.decide(k)
        logged = sorted(decision.log) if log_names else []
        digest.update(repr((decision.charge(), logged)).encode())
        clock.complete(k, _charged(decision), 0.0)
    return digest.hexdigest()


def _charged(decision: Decision) -> Sent:
    return Sent(RecordedPayload(decision.bits_per_worker, decision.dense,  # type: ignore[arg-type]
                                decision.delta), decision.staleness)


def reuse_key(run: Any) -> tuple[str | None, str]:
    """``(key, why)``: the trajectory key of a prepared run (:mod:`decobench.runs.runner`) and
    what it depends on, or ``(None, why not)``."""
    reason = not_reusable(run)
    if reason is not None:
        return None, reason
    from decobench.tasks.base import parameter_count

    d = parameter_count(run.task, run.profile)
    policy = decision_policy(run, d)
    if policy is None:
        return None, (f"method {run.spec.name}'s options make its decisions read the training "
                      "too, not the network alone")
    values = run.config.model_dump(exclude=set(NETWORK_FIELDS) | set(KEY_EXCLUDED))
    values["method_options"] = run.options.model_dump()
    learner = run.spec.learner
    if policy.independent:
        values["decisions"], why = "network-independent", "the method reads no network"
    elif learner is not None:
        # the options act only through the decisions, and the log is the decisions' own
        # (MethodSpec.learner): any method of this learner with these decisions
        values["method"], values["method_options"] = f"learner:{learner}", {}
        values["decisions"] = decision_digest(policy, run, d, log_names=False)
        why = f"the decisions on this network of any {learner} method"
    else:
        values["decisions"] = decision_digest(policy, run, d)
        why = "the method's decisions on this network"
    blob = json.dumps(values, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest(), why


@dataclass(frozen=True)
class Reuse:
    """How a cell with a trajectory ``key`` runs: trained and recorded (``source`` None), or
    re-timed from the trajectory recorded in the finished run directory ``source``."""

    key: str
    source: Path | None = None

    def trajectory(self) -> Trajectory:
        """An empty trajectory to record into, or the source's (checked against the key)."""
        if self.source is None:
            return Trajectory(self.key)
        loaded = load_trajectory(self.source, self.key)
        if loaded is None:
            raise DecobenchError(f"{self.source} holds no recorded trajectory with key "
                                 f"{self.key[:12]}; rerun its cell, or sweep with --no-reuse")
        return loaded

    def describe(self, run_dir: Path) -> dict[str, Any]:
        """``config.yaml``'s ``trajectory`` of the run in ``run_dir``: the key, and the file
        it recorded or the run it was re-timed from (relative to ``run_dir``)."""
        if self.source is None:
            return {"key": self.key, "recorded": TRAJECTORY}
        return {"key": self.key, "retimed_from": os.path.relpath(self.source, run_dir)}


def load_trajectory(run_dir: Path, key: str) -> Trajectory | None:
    """The trajectory a finished run recorded, if it has this key."""
    path = Path(run_dir) / TRAJECTORY
    if not path.is_file():
        return None
    trajectory = Trajectory.load(path)
    return trajectory if trajectory.key == key else None


__all__ = ["KEY_EXCLUDED", "NETWORK_FIELDS", "TRAJECTORY", "RecordedLearner",
           "RecordingLearner", "Reuse", "Step", "Trajectory", "decision_digest", "decision_policy",
           "load_trajectory", "not_reusable", "reuse_key"]
