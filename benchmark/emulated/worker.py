"""One rank of an emulated run: real computation, real collectives, measured time.

The rank trains with the one training loop (:mod:`decobench.training.loop`) over a
:class:`~decobench.emulated.transport.DistributedTransport` (its rows: this rank's worker;
its clock: measured; its messages: background collectives, applied τ iterations after they
were sent). The method objects are the simulated backend's, built for one row of gradients
(``MethodContext.gradient_rows = 1``). Rank 0 writes the run directory; every rank keeps
its own checkpoints in ``RUN_DIR/checkpoints/`` (:class:`~decobench.runs.checkpoint.RankCheckpointer`)
and, with ``--resume``, restores the newest iteration all ranks hold.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from decobench.atomicio import write_text_atomic
from decobench.clock.topology import topology_factors
from decobench.clock.transport_model import TRANSPORT_MODEL_FILE
from decobench.clock.wire import dense_wire_bits
from decobench.emulated.comm import PeerLost
from decobench.emulated.transport import DistributedTransport
from decobench.errors import DecobenchError
from decobench.netem.probe import ProbeReport
from decobench.netem.tcp import HostChange
from decobench.netem.trace import Trace
from decobench.runs.checkpoint import RankCheckpointer, common_iteration, wall_start_for
from decobench.runs.identity import identity
from decobench.runs.lifecycle import RunRecord
from decobench.runs.rundir import PROBE, RANK_CHECKPOINTS
from decobench.runs.runner import (
    PreparedRun,
    evaluation_plan,
    load_task_data,
    resolved_config,
    summary_fields,
)
from decobench.runs.tracking import TrackerFactory
from decobench.training.devices import resolve_device
from decobench.training.loop import train
from decobench.training.sharding import check_batch_size


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
    run directory (and put the probe in it). ``resume``: continue from the newest
    checkpoint every rank holds (:func:`agree_on_checkpoint`). ``start_file``: rank 0 writes the monotonic
    time of the common start there (the trace player waits for it). ``addresses``: each
    rank's IP, to name a lost rank from the transport's error message. ``shaper_ready``:
    wait (up to ``ready_timeout_s``) for the file the trace player writes once this rank's
    link is shaped (``--ready-file``), and check that its latency mechanism agrees with
    ``latency_mechanism``. ``probe``: measure the ring links before training
    (:mod:`decobench.emulated.ring_probe`) and fail if one is more than 10% off.
    ``host_changes``: host settings changed for this run by whoever started it (the Docker
    stack: :data:`decobench.netem.tcp.HOST_CHANGES_ENV`), recorded with the probe.
    """

    latency_mechanism: str
    timeout_s: float
    attach: bool = False
    overwrite: bool = False
    resume: bool = False
    start_file: Path | None = None
    addresses: tuple[str, ...] = ()
    network: dict[str, Any] = field(default_factory=dict)
    probe: bool = False
    shaper_ready: Path | None = None
    ready_timeout_s: float = 120.0
    host_changes: tuple[HostChange, ...] = ()


def default_timeout_s(d: int, trace: Trace, workers: int, topology: str) -> float:
    """60 s plus twice the transfer time of a dense message at the trace's lowest bandwidth."""
    h = max(topology_factors(topology, workers, dense=True).h, 1.0)
    lowest = min(trace.bandwidth_bps)
    return 60.0 + 2.0 * h * dense_wire_bits(d) / lowest


def _device(env: RankEnvironment, requested: str) -> tuple[torch.device, str]:
    """This rank's device and process-group backend: its local GPU (nccl) under ``--device``
    auto when torch sees one, and under cuda or cuda:N (an error where there is none); the
    CPU (gloo) otherwise."""
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu"), "gloo"
    resolve_device("cuda")
    return torch.device("cuda", env.local_rank % torch.cuda.device_count()), "nccl"


def run_rank(run: PreparedRun, env: RankEnvironment, settings: EmulationSettings,
             show_progress: bool = True,
             tracker_factory: TrackerFactory | None = None) -> dict[str, Any] | None:
    """Train this rank; rank 0 writes the run directory and returns the summary."""
    config = run.config
    if env.world_size != config.workers:
        raise DecobenchError(f"the run asks for --workers {config.workers} but "
                             f"{env.world_size} processes were started (WORLD_SIZE)")
    device, backend = _device(env, config.device)
    threads = int(os.environ.get("DECOBENCH_THREADS", "0")) or max(
        1, (os.cpu_count() or 1) // max(1, env.local_world_size))
    torch.set_num_threads(threads)
    shaped_by = (wait_for_shaper(settings.shaper_ready, settings.latency_mechanism,
                                 settings.ready_timeout_s)
                 if settings.shaper_ready is not None else None)
    if shaped_by is not None:
        settings = replace(settings, network={**settings.network, "shaper": shaped_by})
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
    config = run.config
    if run.spec.emulation is not None:
        raise DecobenchError(f"method {config.method} cannot run on the emulated backend: "
                             f"{run.spec.emulation}")
    data = load_task_data(run)
    check_batch_size(data.num_train, config.workers, run.batch_size)

    @functools.cache
    def trace_for(d: int) -> Trace:                 # begin() and the transport share it
        return run.condition.trace_for(d, run.compute_time_s)

    probe = probe_links_before_training(run, env, settings) if settings.probe else None
    checkpoints = RankCheckpointer(run.out / RANK_CHECKPOINTS, env.rank,
                                   config.checkpoint_every_s, identity(config))
    state = agree_on_checkpoint(checkpoints, env, run.out, device) if settings.resume else None
    transport = DistributedTransport(
        env.rank, config.workers, config.topology, trace_for, settings.latency_mechanism,
        settings.timeout_s, device, addresses=settings.addresses,
        start_file=settings.start_file, checkpoints=checkpoints,
        collectives_in_flight=config.emulation.collectives_in_flight,
        calibrate_to=(run.out / TRANSPORT_MODEL_FILE if config.emulation.calibrate_transport
                      else None),
        shaper_burst=_shaper_burst(settings))
    leader = transport.leader
    record = RunRecord(run.out, "emulated", tracker_factory)

    def begin(d: int, gradients: dict[str, Any]) -> None:
        if not leader:
            return
        trace = trace_for(d)
        if state is not None:
            print(f"resuming {run.out} after iteration {state['iteration']} (the newest "
                  "checkpoint every rank holds)", file=sys.stderr)
        record.open(resume_after=None if state is None else state["iteration"],
                    overwrite=settings.overwrite, attach=settings.attach)
        resolved = resolved_config(run, d, data, trace, gradients)
        resolved["emulation"] = {
            "latency_mechanism": settings.latency_mechanism, "process_group": backend,
            "device": str(device), "torch_threads_per_rank": threads,
            "timeout_s": settings.timeout_s, "time_basis": "measured",
            "collectives_in_flight": transport.collectives_in_flight,
            "estimator_burst": ("the shaper's token bucket "
                                "(decobench.netem.tc.burst_payload_bits)"
                                if transport.shaper_burst is not None else "none"),
            **settings.network}
        record.begin(resolved, None if run.condition.kind == "trace" else trace,
                     run.condition.label,
                     files={PROBE: _probe_json(probe, settings)} if probe is not None else None)

    evaluations, book = evaluation_plan(run)
    wall_start = wall_start_for(state)
    try:
        trained = train(run, data, transport, evaluations, book, record.log,
                        wall_start=wall_start, show_progress=show_progress, begin=begin,
                        checkpoint=checkpoints, resume=state)
        checkpoints.remove()
        dist.barrier()
        if leader:
            with contextlib.suppress(OSError):             # empty once every rank is done
                checkpoints.folder.rmdir()
    except BaseException as exc:
        if not isinstance(exc, PeerLost):
            try:
                transport.close(drain=False)
            except BaseException:  # noqa: BLE001 - the first error is the one to report
                pass
        if leader:
            record.fail(exc)
        raise
    if not leader:
        return None
    summary = summary_fields(run, trained.outcome, trained.d, time.perf_counter() - wall_start,
                             transport.trace, **transport.totals(), time_basis="measured",
                             book=trained.book)
    summary.update(latency_mechanism=settings.latency_mechanism, process_group=backend,
                   evaluation_pause_s=transport.clock.paused_s)
    record.finish(summary)
    return summary


def _shaper_burst(settings: EmulationSettings) -> Callable[[float], float] | None:
    """Where decobench's own tc shaper shapes the links (the launcher's namespaces, or the
    trace player's ready file under Docker), the bits its token bucket passes at line rate,
    which DeCo's estimators take out of a transfer (``Observation.burst_bits``); None on
    links it does not shape (torchrun over real links)."""
    from decobench.netem.tc import burst_payload_bits

    ours = "shaping" in settings.network or "shaper" in settings.network
    return burst_payload_bits if ours else None


def wait_for_shaper(path: Path, latency_mechanism: str, timeout_s: float) -> dict[str, Any]:
    """Wait for the trace player's ready file (``--ready-file``: written once the link is
    shaped and read back) and check its latency mechanism against this rank's: a shaper that
    adds no latency (``comm-layer``) under ``kernel``, or one that adds it under
    ``comm-layer``, would give the run the wrong latency without a word."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise DecobenchError(f"waited {timeout_s:g} s for {path}, which the trace player "
                                 "writes once this rank's link is shaped: is its shaper "
                                 "running? (see its logs)")
        time.sleep(0.2)
    shaper = json.loads(path.read_text())
    mechanism = shaper.get("mechanism")
    if latency_mechanism == "kernel" and mechanism == "comm-layer":
        raise DecobenchError(f"the shaper of this rank's link ({path}) shapes the rate only "
                             "(latency mechanism comm-layer: its kernel has neither netem nor "
                             "NFQUEUE), so the network adds no latency: run the workers with "
                             "--latency-mechanism comm-layer to add it in the ranks")
    if latency_mechanism == "comm-layer" and mechanism in ("netem", "nfqueue"):
        raise DecobenchError(f"the shaper of this rank's link ({path}) already adds the "
                             f"latency ({mechanism}) and --latency-mechanism comm-layer would "
                             "add it again: run the workers with --latency-mechanism kernel")
    return shaper


def _probe_json(report: ProbeReport, settings: EmulationSettings) -> str:
    """``network_probe.json`` as the ranks write it: the report, who probed, and the host
    settings changed for the run (the same key the namespace launcher writes)."""
    return json.dumps(report.to_dict() | {
        "probed_by": "ranks",
        "host_changes": [change.to_dict() for change in settings.host_changes]}, indent=2)


def probe_links_before_training(run: PreparedRun, env: RankEnvironment,
                                settings: EmulationSettings) -> ProbeReport:
    """Every rank probes its ring link against the trace's first row
    (:func:`decobench.emulated.ring_probe.probe_ring`); all raise if one is off."""
    from decobench.emulated.ring_probe import own_address, probe_ring
    from decobench.netem.tc import LinkSetting
    from decobench.tasks.base import parameter_count

    trace = run.condition.trace_for(parameter_count(run.task, run.profile), run.compute_time_s)
    setting = LinkSetting(rate_bps=trace.bandwidth_at(0.0), latency_s=trace.latency_at(0.0))
    mechanism = settings.network.get("shaper", {}).get("mechanism") or settings.latency_mechanism
    report = probe_ring(env.rank, env.world_size, own_address(env.master_addr, env.master_port),
                        setting, mechanism)
    if not report.ok:
        if env.rank == 0:
            run.out.mkdir(parents=True, exist_ok=True)
            write_text_atomic(run.out / PROBE, _probe_json(report, settings))
        report.check()
    return report


def agree_on_checkpoint(checkpoints: RankCheckpointer, env: RankEnvironment, out: Path,
                        device: torch.device) -> dict[str, Any]:
    """Every rank's state at the newest iteration all ranks hold a checkpoint of (two
    all-gathers before training: which iterations each rank holds, and whether each could
    load its file), so every rank restores the same iteration or all of them stop."""
    held: list[Any] = [None] * env.world_size
    dist.all_gather_object(held, checkpoints.iterations())
    iteration = common_iteration(held, out)
    problem, state = "", None
    try:
        state = checkpoints.load(iteration, device)
    except DecobenchError as exc:
        problem = str(exc)
    problems: list[Any] = [None] * env.world_size
    dist.all_gather_object(problems, problem)
    failed = [(r, p) for r, p in enumerate(problems) if p]
    if failed:
        rank, first = failed[0]
        raise DecobenchError(first if rank == env.rank else
                             f"--resume: rank {rank} cannot restore iteration {iteration}: "
                             f"{first}")
    assert state is not None
    checkpoints.discard_after(iteration)
    return state
