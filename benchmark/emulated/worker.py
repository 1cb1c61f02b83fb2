"""One rank of an emulated run: real computation, real collectives, measured time.

Every rank trains the same DD-EF-SGD method object as the simulated backend
(:class:`decobench.methods.ddefsgd.DDEFSGD`), built for one row of gradients
(``MethodContext.gradient_rows = 1``). Iteration k on rank i:

    g = ∇f_i(x_k) on rank i's own batch (the same shard and order as simulated worker i)
    (δ_k, τ_k), Δ^i = C_δ(e^i + g), e^i ← e^i + g − Δ^i          (method.compress_local)
    submit Δ^i to the background collective                      (Communicator.submit)
    for every message s with s + τ_s = k: wait until delivered,  (blocks only if late)
        queue its mean update u_s;  x_{k+1} = optimizer step on Σ u_s   (method.apply_due)

Clocks: the trace clock is wall time since the ranks left a common barrier (the trace
player and the communication layer's latency use it); the training clock is the trace
clock minus the time rank 0 spent evaluating, and is what ``metrics.jsonl`` reports as
``sim_time_s`` (``time_basis: measured``).

Agreement between ranks: every message's header carries its sender's measurements of the
transfer it last applied and stop / divergence flags. All ranks apply message s at
iteration s + τ_s and read the same n headers there, so adaptive methods (DeCo-SGD) see the
same observations at the same iteration on every rank and choose the same (δ, τ), and all
ranks stop after the same iteration.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from decobench.atomicio import write_text_atomic
from decobench.emulated.comm import Arrival, Communicator, PeerLost, encode_message
from decobench.emulated.delivery import DeliveryDelay
from decobench.errors import DecobenchError
from decobench.flat import FlatLayout
from decobench.gradients import WorkerGradients
from decobench.methods import MethodContext, Observation
from decobench.methods.ddefsgd import DDEFSGD
from decobench.netem.trace import Trace, write_trace
from decobench.progress import RunProgress
from decobench.rundir import RunDirectory
from decobench.runner import (
    Outcome,
    PreparedRun,
    evaluation_plan,
    load_task_data,
    record_evaluation,
    resolved_config,
    summary_fields,
)
from decobench.sharding import ShardedBatches
from decobench.tasks.base import build_seeded_model
from decobench.topology import topology_factors
from decobench.tracking import NullTracker, TrackerFactory
from decobench.wire import dense_wire_bits

FLAG_STOP = 1
"""Header flag: the sender asks every rank to stop (target met or time budget spent)."""
FLAG_DIVERGED = 2
"""Header flag: the sender's loss was not finite at the message's iteration."""

FAILURE = "failure.json"
"""Written (atomically) into the run directory when an emulated run fails."""


@dataclass(frozen=True)
class RankEnvironment:
    """The torch.distributed environment torchrun (or ``decobench run``) sets."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> RankEnvironment:
        env = dict(os.environ if environ is None else environ)
        missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
                   if k not in env]
        if missing:
            raise DecobenchError(f"{', '.join(missing)} not set: start the workers with "
                                 "torchrun (e.g. torchrun --nproc-per-node 4 -m "
                                 "decobench.emulated --config run.yaml) or let "
                                 "'decobench run --backend emulated' launch them")
        world = int(env["WORLD_SIZE"])
        return cls(rank=int(env["RANK"]), world_size=world,
                   local_rank=int(env.get("LOCAL_RANK", env["RANK"])),
                   local_world_size=int(env.get("LOCAL_WORLD_SIZE", world)),
                   master_addr=env["MASTER_ADDR"], master_port=int(env["MASTER_PORT"]))


@dataclass(frozen=True)
class EmulationSettings:
    """How this rank talks to the others and where it reports.

    ``latency_mechanism``: ``kernel`` (the network adds the latency) or ``comm-layer``
    (:class:`DeliveryDelay` adds ``l·b(t)``). ``attach``: the launcher already created the
    run directory (and put the probe in it). ``start_file``: rank 0 writes the monotonic
    time of the common start there (the trace player waits for it). ``addresses``: each
    rank's IP, to name a lost rank from the transport's error message.
    """

    latency_mechanism: str
    timeout_s: float
    attach: bool = False
    overwrite: bool = False
    start_file: Path | None = None
    addresses: tuple[str, ...] = ()
    network: dict[str, Any] = field(default_factory=dict)


def default_timeout_s(d: int, trace: Trace, workers: int, topology: str) -> float:
    """60 s plus twice the transfer time of a dense message at the trace's lowest bandwidth."""
    h = max(topology_factors(topology, workers, dense=True).h, 1.0)
    lowest = min(trace.bandwidth_bps)
    return 60.0 + 2.0 * h * dense_wire_bits(d) / lowest


@dataclass
class _Sent:
    staleness: int
    dense: bool
    bits: int
    compute_s: float
    arrival: Arrival | None = None


def _device(env: RankEnvironment) -> tuple[torch.device, str]:
    if torch.cuda.is_available():
        return torch.device("cuda", env.local_rank % torch.cuda.device_count()), "nccl"
    return torch.device("cpu"), "gloo"


def _consensus_observation(headers: list[dict[str, float]], sent: dict[int, _Sent],
                           workers: int, topology: str) -> Observation | None:
    """The transfer every header reports on, as all ranks agree to see it: the slowest
    rank's compute, the latest start, end and arrival (seconds on the ranks' own clocks,
    which start together at the barrier)."""
    iterations = {h["obs_iteration"] for h in headers}
    if len(iterations) != 1:
        return None
    j = next(iter(iterations))
    if not math.isfinite(j) or int(j) not in sent:
        return None
    record = sent[int(j)]
    factors = topology_factors(topology, workers, dense=record.dense)
    tx_start = max(h["obs_tx_start_s"] for h in headers)
    tx_end = max(max(h["obs_tx_end_s"] for h in headers), tx_start)
    arrive = max(max(h["obs_arrive_s"] for h in headers), tx_end)
    return Observation(iteration=int(j), compute_s=max(h["obs_compute_s"] for h in headers),
                       link_bits=factors.h * record.bits, tx_start_s=tx_start, tx_end_s=tx_end,
                       arrive_s=arrive, latency_factor=factors.l)


class _Clock:
    """Trace clock (since the common start) and training clock (minus evaluation pauses)."""

    def __init__(self) -> None:
        self.origin = time.monotonic()
        self.paused_s = 0.0

    def trace_s(self) -> float:
        return time.monotonic() - self.origin

    def train_s(self) -> float:
        return self.trace_s() - self.paused_s


def run_rank(run: PreparedRun, env: RankEnvironment, settings: EmulationSettings,
             show_progress: bool = True,
             tracker_factory: TrackerFactory | None = None) -> dict[str, Any] | None:
    """Train this rank; rank 0 writes the run directory and returns the summary."""
    config = run.config
    if env.world_size != config.workers:
        raise DecobenchError(f"the run asks for --workers {config.workers} but "
                             f"{env.world_size} processes were started (WORLD_SIZE)")
    device, backend = _device(env)
    threads = int(os.environ.get("DECOBENCH_THREADS", "0")) or max(
        1, (os.cpu_count() or 1) // max(1, env.local_world_size))
    torch.set_num_threads(threads)
    dist.init_process_group(backend, init_method=f"tcp://{env.master_addr}:{env.master_port}",
                            rank=env.rank, world_size=env.world_size,
                            timeout=timedelta(seconds=settings.timeout_s))
    try:
        return _train(run, env, settings, device, backend, threads, show_progress,
                      tracker_factory)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _train(run: PreparedRun, env: RankEnvironment, settings: EmulationSettings,
           device: torch.device, backend: str, threads: int, show_progress: bool,
           tracker_factory: TrackerFactory | None) -> dict[str, Any] | None:
    config, task = run.config, run.task
    n, rank, leader = config.workers, env.rank, env.rank == 0
    data = load_task_data(run)
    model = build_seeded_model(task, run.profile, config.seed).to(device)
    layout = FlatLayout.of(model)
    params = layout.flatten(model).to(device)
    gradients = WorkerGradients(model, layout, task.loss, vectorise=task.vectorise)
    batches = ShardedBatches(data.num_train, n, run.batch_size, config.seed)
    method = run.spec.build(
        MethodContext(d=layout.d, workers=n, topology=config.topology, optimizer=run.optimizer,
                      param_shapes=tuple(zip(layout.names, layout.shapes, strict=True)),
                      device=device, seed=config.seed,
                      iterations_per_epoch=batches.iterations_per_epoch,
                      max_iters=run.max_iters, gradient_rows=1),
        run.options)
    if not isinstance(method, DDEFSGD):
        raise DecobenchError(f"method {config.method} has no emulated implementation")
    trace = run.condition.trace_for(layout.d, run.compute_time_s)
    delay = DeliveryDelay(trace, "kernel" if settings.latency_mechanism == "kernel"
                          else "comm-layer", config.topology, n)

    rundir = tracker = None
    if leader:
        rundir = (RunDirectory.attach(run.out) if settings.attach
                  else RunDirectory(run.out, overwrite=settings.overwrite))
        resolved = resolved_config(run, layout.d, data.source, trace)
        resolved["emulation"] = {
            "latency_mechanism": settings.latency_mechanism, "process_group": backend,
            "device": str(device), "torch_threads_per_rank": threads,
            "timeout_s": settings.timeout_s, "time_basis": "measured", **settings.network}
        rundir.write_config(resolved)
        if run.condition.kind != "trace":
            write_trace(trace, rundir.path / "trace.csv", comment=f"network of this run: "
                        f"{run.condition.label}")
        tracker = tracker_factory(resolved, rundir.path) if tracker_factory else NullTracker()
        rundir.open_metrics()

    clock = _Clock()
    comm = Communicator(rank=rank, workers=n, d=layout.d, delay=delay, clock=clock.trace_s,
                        timeout_s=settings.timeout_s, device=device,
                        addresses=settings.addresses)
    dist.barrier()
    clock.origin = time.monotonic()
    if leader and settings.start_file is not None:
        write_text_atomic(settings.start_file, f"{clock.origin!r}\n")
    comm.start()

    outcome = Outcome()
    evaluations, book = evaluation_plan(run)
    sent: dict[int, _Sent] = {}
    unapplied: list[int] = []
    report_next: int | None = None  # the transfer our next header reports on
    stop_after: int | None = None
    request_stop = False
    diverged_at: int | None = None
    bubble_total = 0.0
    last_end = 0.0
    wall_start = time.perf_counter()
    progress = RunProgress(total=run.max_iters, metric_name=task.metric_name,
                           enabled=show_progress and leader)

    def log(row: dict[str, Any]) -> None:
        assert rundir is not None and tracker is not None
        rundir.log(row)
        tracker.log(row)

    try:
        with progress:
            for k in range(run.max_iters):
                start = clock.train_s()
                batch = batches.next()[rank: rank + 1]
                inputs, targets = data.train_batch(batch)
                grads, losses = gradients(params, inputs.to(device), targets.to(device))
                loss = float(losses[0])
                schedule, compressed = method.compress_local(k, grads)
                flags = (FLAG_STOP if request_stop else 0) | (
                    0 if math.isfinite(loss) else FLAG_DIVERGED)
                header = {"iteration": float(k), "flags": float(flags)}
                if report_next is not None and sent[report_next].arrival is not None:
                    record, arrival = sent[report_next], sent[report_next].arrival
                    header.update(obs_iteration=float(report_next),
                                  obs_compute_s=record.compute_s,
                                  obs_tx_start_s=arrival.tx_start_s,
                                  obs_tx_end_s=arrival.tx_end_s, obs_arrive_s=arrival.arrive_s)
                comm.submit(encode_message(compressed, header, rank, n))
                end = clock.train_s()
                sent[k] = _Sent(staleness=schedule.staleness, dense=compressed.dense,
                                bits=compressed.bits_per_worker, compute_s=end - start)
                unapplied.append(k)
                outcome.bits_sent += compressed.bits_per_worker
                outcome.iterations = k + 1

                due = [s for s in unapplied if s + sent[s].staleness <= k]
                waited, transfer = 0.0, None
                report_next = None
                for s in due:
                    arrival, wait_s = comm.wait(s)
                    waited += wait_s
                    sent[s].arrival = arrival
                    transfer = arrival
                    unapplied.remove(s)
                    report_next = s
                    observation = _consensus_observation(arrival.headers, sent, n,
                                                         config.topology)
                    if observation is not None:
                        method.observe(observation)
                    raised = [int(h["flags"]) for h in arrival.headers]
                    if any(f & FLAG_STOP for f in raised):
                        stop_after = k
                    if any(f & FLAG_DIVERGED for f in raised):
                        stop_after = k
                        diverged_at = s + 1 if diverged_at is None else min(diverged_at, s + 1)
                    method.queue.push(s, sent[s].staleness, arrival.update)
                applied = method.apply_due(k, params)
                bubble_total += waited
                for s in [s for s in sent if s < k - 64 and s not in unapplied]:
                    del sent[s]                      # keep the record bounded
                if not leader:
                    if stop_after == k:
                        break
                    continue

                step = method.result(schedule, compressed, applied)
                row = {"iteration": k + 1, "sim_time_s": end, "loss": loss,
                       "delta": step.delta, "tau": step.staleness, "bits": step.bits_per_worker,
                       "bits_sent": outcome.bits_sent, "bubble_s": bubble_total,
                       "compute_s": end - start, "wait_s": waited,
                       **({} if transfer is None else {
                           "tx_s": transfer.tx_end_s - transfer.tx_start_s,
                           "tx_start_s": transfer.tx_start_s - clock.paused_s,
                           "arrive_s": transfer.arrive_s - clock.paused_s}),
                       "applied_messages": applied,
                       "bandwidth_mbps": trace.bandwidth_at(clock.trace_s()) / 1e6,
                       "latency_ms": trace.latency_at(clock.trace_s()) * 1e3,
                       **step.log}
                last_end = end
                if diverged_at is not None:
                    outcome.status, outcome.diverged_at_iteration = "diverged", diverged_at
                    row["diverged"] = True
                    row["wall_time_s"] = time.perf_counter() - wall_start
                    log(row)
                    break
                last = k + 1 == run.max_iters or stop_after == k
                if evaluations.due(k + 1, book) or last:
                    ready = clock.train_s()
                    paused = time.monotonic()
                    metric = task.evaluate(
                        lambda x: gradients.forward(method.evaluation_params(params), x), data)
                    clock.paused_s += time.monotonic() - paused
                    record_evaluation(run, outcome, book, row, k + 1, metric, ready)
                    if row.get("target_reached") and config.stop_at_target:
                        request_stop = True
                if config.max_sim_time is not None and clock.train_s() >= config.max_sim_time:
                    request_stop = True
                if (k + 1) % config.log_every == 0 or "metric" in row or last:
                    row["wall_time_s"] = time.perf_counter() - wall_start
                    log(row)
                progress.update(k + 1, end, outcome.final_metric, step.delta, step.staleness)
                if last:
                    outcome.status = ("finished" if config.target is None or outcome.reached
                                      else "budget_exhausted")
                    break
        comm.close(drain=True)
        dist.barrier()
    except BaseException as exc:
        if not isinstance(exc, PeerLost):
            try:
                comm.close(drain=False)
            except BaseException:  # noqa: BLE001 - the first error is the one to report
                pass
        if rundir is not None:
            rundir.abandon_metrics()
            assert tracker is not None
            tracker.fail(exc)
        if leader:
            write_failure(run.out, exc)
        raise
    if not leader:
        return None
    assert rundir is not None and tracker is not None
    rundir.close_metrics()
    total = last_end
    summary = summary_fields(run, outcome, layout.d, time.perf_counter() - wall_start, trace,
                             sim_time_s=total, bubble_s=bubble_total,
                             bubble_fraction=bubble_total / total if total > 0 else 0.0,
                             time_basis="measured", book=book)
    summary.update(latency_mechanism=settings.latency_mechanism, process_group=backend,
                   evaluation_pause_s=clock.paused_s)
    tracker.finish(summary)
    rundir.write_summary(summary)
    return summary


def write_failure(out: Path, exc: BaseException, lost_ranks: tuple[int, ...] | None = None,
                  origin: str = "rank 0") -> None:
    """``failure.json``: status ``failed``, the error and the lost ranks (never a summary)."""
    import json

    lost = lost_ranks if lost_ranks is not None else getattr(exc, "lost_ranks", ())
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / FAILURE, json.dumps({
        "status": "failed", "backend": "emulated", "error": str(exc) or type(exc).__name__,
        "error_type": type(exc).__name__, "lost_ranks": list(lost), "reported_by": origin,
    }, indent=2) + "\n")
