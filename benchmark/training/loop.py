"""The training loop: one, for every backend, written against a :class:`Transport`.

Iteration k of the process (which holds the workers ``transport.rows``)::

    method.observe(o)              for each transfer the transport reports before k
    g = ∇f_i(x_k) for the workers i this process holds      (learner.compute)
    sent = method.send(k, x_k, g)                            worker half (docs/design.md §2)
    transport.submit(k, sent)      the collective on the emulated backend, the event clock
                                   (docs/design.md §4) on the simulated one
    due = transport.due(k)         the messages with s + τ_s = k, each the mean over n
    method.receive(k, x_k, due)    aggregation half → x_{k+1}
    the leader: the metrics row, evaluation when due (timed when x_{k+1} exists), targets

A run ends when the target is met (``stop_at_target``), the iteration or time budget is
spent, or a loss is not finite or above ``divergence_loss``, or an evaluation is not finite
(status ``diverged``). On the emulated backend the ranks agree on stopping through the
transport (a stop asked for at iteration k takes effect when its message is due everywhere),
so every rank leaves after the same iteration.

What differs between backends lives in the transport: which workers a process computes,
the clock (simulated or measured), the fields of the row that time an iteration, how a
stop or a divergence is agreed. Set-up, evaluation, targets, status, rows, progress and
tracking are here, once. The model side (gradients, the method's halves, evaluation) is a
:class:`Learner`: the model itself (:class:`ModelLearner`), or a recorded trajectory played
back on another network's clock (:mod:`decobench.runs.trajectory`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from decobench.errors import DecobenchError
from decobench.methods import Due, MethodContext, MethodOptions, MethodSpec, Observation, Sent
from decobench.methods.optimizer import OptimizerConfig
from decobench.methods.rules import UpdateRules, clip_rows
from decobench.planning.estimators import NetworkEstimate
from decobench.tasks import Task, TaskData, TaskProfile
from decobench.tasks.base import build_seeded_model
from decobench.training.allocator import keep_freed_memory
from decobench.training.devices import describe, set_matmul_precision
from decobench.training.evaluation import EvaluationSchedule, TargetBook
from decobench.training.flat import FlatLayout
from decobench.training.gradients import AUTOCAST, WorkerGradients
from decobench.training.progress import RunProgress
from decobench.training.sharding import ShardedBatches


def above_ceiling(recent: Sequence[float], ceiling: float | None, window: int) -> bool:
    """Whether the run diverged by ``--divergence-loss`` (docs/design.md §6.4): the median
    of its last ``window`` training losses is above ``ceiling``, once ``window`` exist. A
    window of 5 lets a one-off spike pass (D-SGD's γ ramp on GPT-2 mid had single losses
    of 11.5 and 12.3 and went on training at 6.3)."""
    if ceiling is None or len(recent) < window:
        return False
    return statistics.median(recent[-window:]) > ceiling

class LoopConfig(Protocol):
    """The fields of a run's config the loop reads (:class:`decobench.runs.config.RunConfig`
    has them; the runs floor sits above this one)."""

    workers: int
    seed: int
    method: str
    topology: str
    matmul_precision: str
    autocast: str
    gradient_engine: str
    target: float
    stop_at_target: bool
    log_every: int
    max_sim_time: float | None


class LoopRun(Protocol):
    """What the loop reads of a prepared run (:class:`decobench.runs.runner.PreparedRun`)."""

    config: LoopConfig
    task: Task
    profile: TaskProfile
    spec: MethodSpec
    options: MethodOptions
    optimizer: OptimizerConfig
    rules: UpdateRules
    batch_size: int
    max_iters: int
    replay: tuple[Any, ...] | None

    def condition_means(self, d: int) -> NetworkEstimate | None:
        """The condition's mean network for a model of ``d`` parameters, or None."""


class StateSaver(Protocol):
    """Saves the whole state when it is due (:class:`decobench.runs.checkpoint.Checkpointer`,
    or a ``RankCheckpointer`` on the emulated backend)."""

    def due(self) -> bool:
        """Whether the wall-time interval since the last save has passed."""

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state``."""


class RefineRecorder(Protocol):
    """Keeps the state after evaluations, for a refine pass to start from
    (:class:`decobench.runs.checkpoint.RefineStarts`)."""

    def after_evaluation(self, iteration: int, hits: Any, state: Any, fine: bool) -> None:
        """An evaluation after ``iteration`` iterations (see ``RefineStarts``)."""


@dataclass(frozen=True)
class IterationTimes:
    """How the transport timed one iteration, for its metrics row: ``sim_time_s`` (end of
    the iteration on the run's clock), ``bubble_s`` (total time spent waiting so far),
    ``compute_s``, backend-specific ``extra`` fields, and the network at that time."""

    sim_time_s: float
    bubble_s: float
    compute_s: float
    bandwidth_mbps: float
    latency_ms: float
    extra: dict[str, float] = field(default_factory=dict)


class Transport(Protocol):
    """What lies between the worker half and the aggregation half of a method.

    ``rows``: the workers whose gradients this process computes (all n, or one rank's);
    ``leader``: this process evaluates and writes the run directory; ``device``: where the
    model lives.
    """

    rows: slice
    leader: bool
    device: torch.device
    time_basis: str

    def start(self, d: int, state: dict[str, Any] | None = None) -> None:
        """Training starts now (after set-up) for a model of ``d`` parameters; ``state``:
        what :meth:`state_dict` saved, when the run resumes from a checkpoint."""

    def observations(self, iteration: int) -> Sequence[Observation]:
        """Transfers that completed before ``iteration`` starts, to give the method."""

    def flag_divergence(self, iteration: int) -> None:
        """This process's loss at ``iteration`` is not finite."""

    def submit(self, iteration: int, sent: Sent, loss: float) -> None:
        """Send this process's messages of ``iteration`` (``loss``: the mean loss of its
        workers, which the leader's row reports as a mean over all n)."""

    def due(self, iteration: int) -> list[Due]:
        """The messages due at ``iteration`` (s + τ_s = iteration), in send order, each the
        mean over the n workers; waits for them if they have not arrived."""

    def losses(self) -> dict[int, float]:
        """Mean losses over the n workers that became known since the last call, by
        iteration (at once with one process; when its message is due on the emulated
        backend)."""

    def finish(self) -> None:
        """Training ended on every worker: learn what is still in flight (its losses)."""

    def complete(self, iteration: int, sent: Sent, work_s: float) -> IterationTimes:
        """The iteration is done (``work_s``: wall time of its computation here)."""

    def in_flight(self) -> list[Due]:
        """The messages sent but not applied yet, each the mean over the n workers (waits
        for their arrival on the emulated backend; they stay due where they were)."""

    def now_s(self) -> float:
        """The run's clock (simulated or measured training time)."""

    def model_ready_s(self) -> float:
        """When x_{k+1} of the last completed iteration exists (a metric's time)."""

    def evaluation_pause(self) -> contextlib.AbstractContextManager[None]:
        """Evaluation happens inside this context (a measured clock excludes it)."""

    def request_stop(self) -> None:
        """This process asks every worker to stop (target met or time budget spent)."""

    def stopping(self, iteration: int) -> bool:
        """All workers agreed to stop after ``iteration``."""

    def diverged_at(self) -> int | None:
        """The first iteration (1-based) whose loss was not finite, once agreed; else None."""

    def totals(self) -> dict[str, float]:
        """``sim_time_s``, ``bubble_s`` and ``bubble_fraction`` of the whole run."""

    def checkpoint_now(self, iteration: int, due: bool) -> bool:
        """Whether every process saves a checkpoint after ``iteration`` (``due``: this
        process's checkpointer asks for one; on the emulated backend the leader's request
        travels with its messages and every rank saves at the iteration they agree on)."""

    def state_dict(self) -> dict[str, Any]:
        """The transport's part of a checkpoint taken after the last completed iteration
        (the emulated transport waits for its messages in flight to hold them)."""


@dataclass
class Outcome:
    """How a run ended, filled in as it trains."""

    status: str = "budget_exhausted"
    reached: bool = False
    time_to_target_s: float | None = None
    iters_to_target: int | None = None
    final_metric: float | None = None
    diverged_at_iteration: int | None = None
    bits_sent: int = 0
    iterations: int = 0


@dataclass
class Trained:
    """One pass of training: how it ended, its targets, and what it evaluated when."""

    outcome: Outcome
    book: TargetBook
    d: int
    metrics_at: dict[int, float]


def record_evaluation(outcome: Outcome, book: TargetBook, target: float | None,
                      row: dict[str, Any], iterations: int, metric: float, metric_name: str,
                      metric_time_s: float) -> None:
    """One evaluation of the model after ``iterations`` iterations, existing at
    ``metric_time_s``: into the metrics row, the outcome and the target book."""
    outcome.final_metric = metric
    row.update(metric=metric, metric_name=metric_name, metric_time_s=metric_time_s)
    met = book.record(iterations, metric, metric_time_s)
    if met:
        row["targets_met"] = met
    if target is not None and target in met:
        outcome.reached = True
        outcome.time_to_target_s, outcome.iters_to_target = metric_time_s, iterations
        row["target_reached"] = True


class Learner(Protocol):
    """The model side of training, which the loop drives over a :class:`Transport`: the
    gradients, the method's two halves and evaluation (:class:`ModelLearner`), or a recorded
    trajectory played back on another clock (:class:`decobench.runs.trajectory.RecordedLearner`).

    ``d``: the model's parameter count; ``gradients_info``: how the per-worker gradients are
    computed and why (``config.yaml`` ``gradients``).
    """

    d: int
    gradients_info: dict[str, Any]

    def observe(self, observation: Observation) -> None:
        """A transfer has arrived (before iteration ``k`` starts): give it to the method."""

    def compute(self, iteration: int) -> float:
        """The gradients of iteration ``iteration`` for the workers this process holds;
        returns their mean loss."""

    def send(self, iteration: int) -> Sent:
        """The method's worker half on those gradients."""

    def receive(self, iteration: int, due: Sequence[Due]) -> dict[str, Any]:
        """The method's aggregation half: x_{k+1} from the messages due; its log fields."""

    def evaluate(self, iterations: int, in_flight: Callable[[], Sequence[Due]]) -> float:
        """The task's metric of the model after ``iterations`` iterations."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue after the last completed iteration."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`."""


class ModelLearner:
    """A :class:`Learner` that trains: the model, its flat parameters and per-worker
    gradients, the method, and the batches, all built from the run's seed.

    ``rows``: the workers whose gradients this process computes; the gradient engine is
    chosen on a probe batch (the first B examples of each of those workers; the data order
    is untouched) by :meth:`decobench.training.gradients.WorkerGradients.select`. The process keeps
    freed memory for the next step (:func:`decobench.training.allocator.keep_freed_memory`).
    """

    def __init__(self, run: LoopRun, data: TaskData, rows: slice, device: torch.device) -> None:
        config, task = run.config, run.task
        n = config.workers
        allocator = keep_freed_memory()
        precision = set_matmul_precision(device, config.matmul_precision)
        model = build_seeded_model(task, run.profile, config.seed).to(device)
        layout = FlatLayout.of(model)
        self.params = layout.flatten(model).to(device)
        try:
            self.gradients = WorkerGradients(model, layout, task.loss, vectorise=task.vectorise,
                                             engine=config.gradient_engine,
                                             autocast=AUTOCAST[config.autocast])
        except ValueError as exc:             # --gradient-engine grouped on a model without rules
            raise DecobenchError(f"--gradient-engine {config.gradient_engine}: {exc}") from exc
        self.batches = ShardedBatches(data.num_train, n, run.batch_size, config.seed)
        held = range(n)[rows]
        local = len(held)
        self.method = run.spec.build(
            MethodContext(d=layout.d, workers=n, topology=config.topology,
                          optimizer=run.optimizer,
                          param_shapes=tuple(zip(layout.names, layout.shapes, strict=True)),
                          device=device, seed=config.seed,
                          iterations_per_epoch=self.batches.iterations_per_epoch,
                          max_iters=run.max_iters, gradient_rows=None if local == n else local,
                          first_worker=held.start, condition=run.condition_means(layout.d),
                          rules=run.rules),
            run.options)
        if run.replay is not None and not self.method.replay(run.replay):
            raise DecobenchError(f"method {config.method} cannot follow a recorded schedule "
                                 "(--replay-schedule): it has no (δ, τ) controller")
        probe = torch.arange(local * self.batches.batch_size).reshape(local, -1) % data.num_train
        probe_inputs, probe_targets = data.train_batch(probe)
        self.gradients_info = {**self.gradients.select(
            self.method.worker_params(self.params), probe_inputs.to(device),
            probe_targets.to(device)), "allocator": allocator, "device": describe(device),
            "matmul_precision": precision}
        self.d = layout.d
        self.clip_norm = run.rules.clip_norm
        self.data, self.task, self.rows, self.device = data, task, rows, device
        self._grads: torch.Tensor | None = None

    def observe(self, observation: Observation) -> None:
        self.method.observe(observation)

    def compute(self, iteration: int) -> float:
        inputs, targets = self.data.train_batch(self.batches.next()[self.rows])
        self._grads, losses = self.gradients(self.method.worker_params(self.params),
                                             inputs.to(self.device), targets.to(self.device))
        return float(losses.mean())

    def send(self, iteration: int) -> Sent:
        grads, self._grads = self._grads, None
        assert grads is not None, "send() follows compute()"
        if self.clip_norm is not None:           # the clipping rule, every method alike (§2.5)
            grads = clip_rows(grads, self.clip_norm)
        return self.method.send(iteration, self.params, grads)

    def receive(self, iteration: int, due: Sequence[Due]) -> dict[str, Any]:
        return self.method.receive(iteration, self.params, due)

    def evaluate(self, iterations: int, in_flight: Callable[[], Sequence[Due]]) -> float:
        eval_params = self.method.evaluation_params(self.params, in_flight)
        return self.task.evaluate(
            lambda inputs: self.gradients.forward(eval_params, inputs.to(self.device)),
            self.data)

    def state_dict(self) -> dict[str, Any]:
        return {"params": self.params, "method": self.method, "batches": self.batches,
                "model": self.gradients.module.state_dict(), "rng": torch.get_rng_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.params.copy_(state["params"].to(self.device))
        self.method, self.batches = state["method"], state["batches"]
        self.gradients.module.load_state_dict(state["model"])
        torch.set_rng_state(state["rng"])


def train(run: LoopRun, data: TaskData, transport: Transport, evaluations: EvaluationSchedule,
          book: TargetBook, log: Callable[[dict[str, Any]], None], *, wall_start: float,
          show_progress: bool, begin: Callable[[int, dict[str, Any]], None] | None = None,
          checkpoint: StateSaver | None = None, resume: dict[str, Any] | None = None,
          learner: Learner | None = None, refine_starts: RefineRecorder | None = None) -> Trained:
    """Train once over ``transport``: ``learner`` (default: a :class:`ModelLearner` built
    from the run's seed for the transport's rows) drives the model side.

    ``run`` is a :class:`decobench.runs.runner.PreparedRun`; ``log`` receives the leader's
    metrics rows; ``begin(d, gradients)`` is called once the model exists, before training
    (``gradients``: the engine :meth:`~decobench.training.gradients.WorkerGradients.select` chose,
    and why, for ``config.yaml``).
    ``checkpoint`` (a :class:`decobench.runs.checkpoint.Checkpointer`, or a
    :class:`~decobench.runs.checkpoint.RankCheckpointer` on the emulated backend) saves the whole
    state when the transport agrees it is due; ``resume``: a saved state to continue from.
    ``refine_starts`` (a :class:`decobench.runs.checkpoint.RefineStarts`, simulated backend) is
    given the state after each evaluation, for a refine pass to start from.
    """
    config, task = run.config, run.task
    if learner is None:
        learner = ModelLearner(run, data, transport.rows, transport.device)
    if begin is not None:
        begin(learner.d, learner.gradients_info)
    leader = transport.leader
    outcome = Outcome()
    metrics_at: dict[int, float] = {}
    rows_out = _RowsInOrder(_noting(log))
    progress = RunProgress(total=run.max_iters, metric_name=task.metric_name,
                           enabled=show_progress and leader)

    ceiling = run.config.divergence_loss   # a finite loss above it diverged too (§6.4)
    window = run.config.divergence_window
    recent: list[float] = []               # the last `window` losses, for the ceiling
    first = 0
    if resume is not None:                 # continue after the checkpointed iteration
        learner.load_state_dict(resume["learner"])
        outcome, book, metrics_at = resume["outcome"], resume["book"], resume["metrics_at"]
        first = resume["iteration"]
        recent = list(resume.get("recent_losses", []))
    transport.start(learner.d, None if resume is None else resume["transport"])

    def state_after(k: int) -> dict[str, Any]:
        """The whole state after iteration k (a checkpoint's contents)."""
        state = transport.state_dict()
        if leader:                         # the rows waiting for their loss can be written
            rows_out.known(transport.losses())
        assert not rows_out.pending, "a checkpoint needs every row written"
        return {"iteration": k + 1, "learner": learner.state_dict(), "outcome": outcome,
                "book": book, "metrics_at": metrics_at, "transport": state,
                "recent_losses": list(recent), "wall_time_s": time.perf_counter() - wall_start}

    def save_checkpoint(k: int) -> None:
        """After iteration k, when the transport says every process saves now."""
        if checkpoint is not None and transport.checkpoint_now(k, checkpoint.due()):
            checkpoint.save(state_after(k))
    with progress:
        for k in range(first, run.max_iters):
            for observation in transport.observations(k):
                learner.observe(observation)
            t0 = time.perf_counter()
            loss = learner.compute(k)
            recent = (recent + [loss])[-window:]
            if not math.isfinite(loss) or above_ceiling(recent, ceiling, window):
                transport.flag_divergence(k)
            if transport.diverged_at() is not None:      # agreed at once (one process)
                outcome.status = "diverged"
                outcome.diverged_at_iteration = _first(outcome.diverged_at_iteration, k + 1)
                if leader:
                    rows_out.add(k, {"iteration": k + 1, "loss": loss, "diverged": True,
                                     "sim_time_s": transport.now_s(),
                                     "wall_time_s": time.perf_counter() - wall_start})
                    rows_out.known({k: loss})
                break
            sent = learner.send(k)
            transport.submit(k, sent, loss)
            due = transport.due(k)
            step = sent.result(len(due), learner.receive(k, due))
            times = transport.complete(k, sent, time.perf_counter() - t0)
            outcome.bits_sent += step.bits_per_worker
            outcome.iterations = k + 1
            diverged_at = transport.diverged_at()       # agreed through the messages
            if not leader:
                if diverged_at is not None or transport.stopping(k):
                    break
                save_checkpoint(k)
                continue
            row = _row(k, times, step, loss, outcome.bits_sent)
            if diverged_at is not None:
                outcome.status = "diverged"
                outcome.diverged_at_iteration = _first(outcome.diverged_at_iteration,
                                                       diverged_at)
                row["diverged"] = True
                row["wall_time_s"] = time.perf_counter() - wall_start
                rows_out.add(k, row)
                rows_out.known(transport.losses())
                break
            if config.max_sim_time is not None and transport.now_s() >= config.max_sim_time:
                transport.request_stop()
            last = k + 1 == run.max_iters or transport.stopping(k)
            if evaluations.due(k + 1, book) or last:
                ready = transport.model_ready_s()
                with transport.evaluation_pause():
                    metric = learner.evaluate(k + 1, transport.in_flight)
                metrics_at[k + 1] = metric
                record_evaluation(outcome, book, config.target, row, k + 1, metric,
                                  task.metric_name, ready)
                if not math.isfinite(metric) and outcome.diverged_at_iteration is None:
                    outcome.diverged_at_iteration = k + 1   # e.g. perplexity past 1e308
                    row["diverged"] = True
                    transport.request_stop()
                if outcome.reached and config.stop_at_target:
                    transport.request_stop()
            if (k + 1) % config.log_every == 0 or "metric" in row or last:
                row["wall_time_s"] = time.perf_counter() - wall_start
                rows_out.add(k, row)
            rows_out.known(transport.losses())
            progress.update(k + 1, times.sim_time_s, outcome.final_metric, step.delta,
                            step.staleness)
            if outcome.reached and config.stop_at_target and transport.stopping(k):
                outcome.status = "finished"
                break
            if last or transport.stopping(k):
                outcome.status = ("diverged" if outcome.diverged_at_iteration is not None
                                  else "finished" if config.target is None or outcome.reached
                                  else "budget_exhausted")   # diverged: an evaluation (§6.4)
                break
            if refine_starts is not None and k + 1 in metrics_at:
                refine_starts.after_evaluation(k + 1, book.hits,
                                               functools.partial(state_after, k),
                                               fine=evaluations.fine(book))
            save_checkpoint(k)
    transport.finish()
    if leader:
        rows_out.known(transport.losses())
        rows_out.close()
    return Trained(outcome, book, learner.d, metrics_at)


def _first(evaluated: int | None, loss: int) -> int:
    """Where a run diverged: at an evaluation that was not finite when one came before the
    loss that diverged (on the emulated backend the ranks train on until the stop is agreed)."""
    return loss if evaluated is None else min(evaluated, loss)


def _noting(log: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """``log``, printing each distinct ``warning`` a method put in a row (e.g. DeCo-SGD's
    plan held across a bandwidth change) once to stderr as a ``decobench: note:`` line; the
    row keeps it in metrics.jsonl."""
    seen: set[str] = set()

    def out(row: dict[str, Any]) -> None:
        text = row.get("warning")
        if isinstance(text, str) and text not in seen:
            seen.add(text)
            print(f"decobench: note: iteration {row.get('iteration')}: {text}",
                  file=sys.stderr)
        log(row)

    return out


class _RowsInOrder:
    """The leader's metrics rows, written in iteration order once each row's loss (the mean
    over the n workers) is known; until then a row holds this process's own loss."""

    def __init__(self, log: Callable[[dict[str, Any]], None]) -> None:
        self.log = log
        self.pending: dict[int, dict[str, Any]] = {}
        self.losses: dict[int, float] = {}

    def add(self, iteration: int, row: dict[str, Any]) -> None:
        self.pending[iteration] = row
        self._flush()

    def known(self, losses: dict[int, float]) -> None:
        self.losses.update(losses)
        self._flush()

    def _flush(self) -> None:
        while self.pending:
            first = min(self.pending)
            if first not in self.losses:
                return
            row = self.pending.pop(first)
            row["loss"] = self.losses[first]
            self.log(row)
        # rows come in iteration order, so losses below the first pending row are never read
        floor = min(self.pending) if self.pending else None
        self.losses = ({} if floor is None
                       else {k: v for k, v in self.losses.items() if k >= floor})

    def close(self) -> None:
        """Write what is left (a loss never learnt keeps this process's own)."""
        for iteration in sorted(self.pending):
            self.log(self.pending.pop(iteration))


def _row(k: int, times: IterationTimes, step: Any, loss: float,
         bits_sent: int) -> dict[str, Any]:
    """The metrics row of iteration k (docs/design.md §9.3)."""
    return {
        "iteration": k + 1,
        "sim_time_s": times.sim_time_s,
        "loss": loss,
        "delta": step.delta,
        "tau": step.staleness,
        "bits": step.bits_per_worker,
        "bits_sent": bits_sent,
        "bubble_s": times.bubble_s,
        "compute_s": times.compute_s,
        **times.extra,
        "applied_messages": step.applied_messages,
        "bandwidth_mbps": times.bandwidth_mbps,
        "latency_ms": times.latency_ms,
        **step.log,
    }


@contextlib.contextmanager
def no_pause() -> Iterator[None]:
    """Evaluation on a simulated clock takes no time."""
    yield
