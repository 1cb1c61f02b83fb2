"""``decobench run --backend emulated``: a whole emulated run on this Linux host.

1. Checks (before anything is created): root, ``ip``/``tc``, a method with an emulated
   implementation, n >= 2, the latency mechanism the kernel can give.
2. One network namespace per worker, joined by veth pairs to a bridge namespace; each
   worker's egress shaped from the trace's first row (:mod:`decobench.netem.netns`, :mod:`decobench.netem.tc`).
3. The probe measures every link and the run fails if it is more than 10% off the request;
   ``network_probe.json`` keeps the result and the exact tc commands (:mod:`decobench.netem.probe`).
4. The trace player replays the trace live with ``tc ... change`` from the moment rank 0
   says training started (:mod:`decobench.netem.player`).
5. n ranks of ``python -m decobench.emulated`` start inside the namespaces with the
   torchrun environment; rank 0 writes the run directory, the others log to
   ``workers/rankR.log``.
6. If a rank dies, the others stop on their own (the collective fails) or are stopped
   within :data:`GRACE_S`; ``failure.json`` names the lost rank and no summary is written.
   Ctrl-C, SIGTERM or an error in the launcher stop the ranks the same way. The namespaces
   are deleted in every case (``python -m decobench.netem.netns --cleanup`` removes leftovers of a
   launcher that was SIGKILLed).
7. ``--resume`` builds and probes the links again and starts the ranks with ``--resume``:
   they restore the newest checkpoint every rank holds and the trace continues from there.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from decobench.atomicio import write_text_atomic
from decobench.emulated.worker import default_timeout_s
from decobench.errors import DecobenchError
from decobench.runs.backends import Backend
from decobench.runs.lifecycle import record_failure
from decobench.runs.rundir import (
    DELAY_REPORT,
    LAUNCH_DIR,
    PROBE,
    QDISC_REPORT,
    START_FILE,
    SUMMARY,
    TC_COMMANDS,
    TRACE_PLAYER_LOG,
    WORKER_LOGS,
    RunDirectory,
    read_summary,
)
from decobench.runs.runner import PreparedRun
from decobench.tasks.base import parameter_count

GRACE_S = 45.0
"""Seconds the surviving ranks get to notice a lost rank before the launcher stops them."""

MASTER_PORT = 29500
"""Rank 0's rendezvous port inside its namespace (each run has its own namespaces)."""

LAUNCH_CONFIG = f"{LAUNCH_DIR}/run.yaml"


class RunFailed(DecobenchError):
    """An emulated run ended without success; ``failure.json`` says why."""


def check_emulation(run: PreparedRun) -> None:
    """Everything checkable before creating anything (the backend's ``check``); the latency
    mechanism is resolved by :func:`launch`, once, as it probes the kernel."""
    from decobench.netem.netns import require_root

    config = run.config
    if run.spec.emulation is not None:
        raise DecobenchError(f"method {config.method} cannot run on the emulated backend: "
                             f"{run.spec.emulation} (it runs on the simulated backend)")
    if config.workers < 2:
        raise DecobenchError("the emulated backend needs --workers 2 or more (one worker has "
                             "no link to emulate)")
    if config.emulation.latency_mechanism == "kernel":
        raise DecobenchError("--latency-mechanism kernel is for ranks started by torchrun on "
                             "links that already have their latency; 'decobench run --backend "
                             "emulated' shapes its own links: use auto, netem or comm-layer")
    require_root()


@dataclass
class _Rank:
    rank: int
    process: subprocess.Popen[bytes]
    log: Path | None


def _die_with_parent() -> None:
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    os.setpgrp()                     # Ctrl-C reaches the launcher, which stops the ranks


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def launch(run: PreparedRun, overwrite: bool = False, show_progress: bool = True,
           wandb: bool = True, resume: bool = False) -> dict[str, Any]:
    """Run ``run`` on the emulated backend; returns rank 0's summary or raises
    :class:`RunFailed` (after writing ``failure.json``). ``resume``: continue the
    interrupted run in ``run.out`` from the newest checkpoint every rank holds (the links
    are built and probed again; the trace continues where the run stopped)."""
    from decobench.netem.netns import NamespaceNetwork, NetworkPlan, resolve_latency_mechanism
    from decobench.netem.player import NetnsShaper, TracePlayer
    from decobench.netem.probe import probe_links, write_probe
    from decobench.netem.tc import LinkSetting

    check_emulation(run)
    config = run.config
    mechanism = resolve_latency_mechanism(config.emulation.latency_mechanism)
    d = parameter_count(run.task, run.profile)
    trace = run.condition.trace_for(d, run.compute_time_s)
    timeout_s = config.emulation.timeout_s or default_timeout_s(d, trace, config.workers,
                                                                config.topology)
    if resume:
        check_resumable(run.out)
        out = RunDirectory.attach(run.out).path
        (out / START_FILE).unlink(missing_ok=True)   # the player waits for a new start
    else:
        out = RunDirectory(run.out, overwrite=overwrite).path
    setting = LinkSetting(rate_bps=trace.bandwidth_at(0.0), latency_s=trace.latency_at(0.0))
    plan = NetworkPlan.new(workers=config.workers)
    ranks: list[_Rank] = []
    player = None
    net = None
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with NamespaceNetwork(plan, setting, mechanism=mechanism) as net:
            try:
                if not config.emulation.skip_probe:
                    report = probe_links(net, setting)
                    write_probe(report, net, out / PROBE)
                    report.check()
                if config.emulation.packet_loss:
                    net.set_loss(config.emulation.packet_loss)   # after the probe: the
                    # probe checks the shaping, which loss would hide
                player = TracePlayer(trace, NetnsShaper(net))
                player.wait_for_start_file(out / START_FILE)
                ranks = _start_ranks(run, net, mechanism, timeout_s, out, show_progress, wandb,
                                     resume)
                _supervise(ranks, out, timeout_s, watch=lambda: _broken_network(net, player))
            finally:
                for r in ranks:
                    _stop(r.process)
                if player is not None:
                    _stop_player(player, out)
                write_text_atomic(out / TC_COMMANDS, "".join(
                    f"{line}\n" for line in net.commands))
    except KeyboardInterrupt:
        _record_failure(out, "interrupted (Ctrl-C or SIGTERM); the ranks were stopped and the "
                        "namespaces deleted", lost=())
        raise
    except RunFailed:
        raise
    except BaseException as exc:
        _record_failure(out, f"launcher error: {exc}", lost=())
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        if net is not None and net.delay_stats:
            write_text_atomic(out / DELAY_REPORT, json.dumps(net.delay_report(), indent=2) + "\n")
        if net is not None and net.qdisc_stats:
            write_text_atomic(out / QDISC_REPORT, json.dumps(net.qdisc_report(), indent=2) + "\n")
    if not (out / SUMMARY).is_file():
        raise RunFailed(_record_failure(out, "rank 0 exited without writing summary.json",
                                        lost=()))
    return read_summary(out)


def check_resumable(out: Path) -> None:
    """One line unless ``out`` holds an unfinished emulated run with per-rank checkpoints."""
    from decobench.runs.checkpoint import has_rank_checkpoints
    from decobench.runs.rundir import RANK_CHECKPOINTS

    if (out / SUMMARY).is_file():
        raise DecobenchError(f"--resume: {out} holds a finished run; nothing to resume (pass "
                             "--overwrite to run it again)")
    if not has_rank_checkpoints(out):
        raise DecobenchError(f"--resume: no checkpoints in {out / RANK_CHECKPOINTS} (the ranks "
                             "write them every --checkpoint-every-s seconds); run without "
                             "--resume to start over")


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _start_ranks(run: PreparedRun, net: Any, mechanism: str, timeout_s: float, out: Path,
                 show_progress: bool, wandb: bool, resume: bool = False) -> list[_Rank]:
    config = run.config
    launch_config = out / LAUNCH_CONFIG
    launch_config.parent.mkdir(parents=True, exist_ok=True)
    values = config.model_dump()
    values.update(out=str(out), backend="emulated", latency_mechanism=mechanism)
    write_text_atomic(launch_config, yaml.safe_dump(values, sort_keys=True))
    addresses = [net.worker_address(i) for i in range(config.workers)]
    network = {"namespaces": [net.worker_namespace(i) for i in range(config.workers)],
               "addresses": addresses, "shaping": "tc on each worker's egress (veth)",
               "launcher_latency_mechanism": mechanism,
               "packet_loss": config.emulation.packet_loss,
               "tcp": net.tcp.to_dict() if getattr(net, "tcp", None) else None}
    logs = out / WORKER_LOGS
    logs.mkdir(exist_ok=True)
    threads = max(1, (os.cpu_count() or 1) // config.workers)
    ranks = []
    for i in range(config.workers):
        env = {**os.environ, "RANK": str(i), "WORLD_SIZE": str(config.workers),
               "LOCAL_RANK": str(i), "LOCAL_WORLD_SIZE": str(config.workers),
               "MASTER_ADDR": addresses[0], "MASTER_PORT": str(MASTER_PORT),
               "DECOBENCH_THREADS": str(threads), "OMP_NUM_THREADS": str(threads),
               "PYTHONUNBUFFERED": "1",
               # gloo/NCCL would otherwise pick the address the host name resolves to
               # (loopback inside a namespace); the shaped device is the only way out
               "GLOO_SOCKET_IFNAME": net.worker_device(i),
               "NCCL_SOCKET_IFNAME": net.worker_device(i)}
        argv = [*net.exec_prefix(i), sys.executable, "-m", "decobench.emulated",
                "--config", str(launch_config), "--attach", "--start-file", str(out / START_FILE),
                "--timeout-s", str(timeout_s), "--addresses", ",".join(addresses),
                "--network-info", json.dumps(network)]
        if not wandb:
            argv.append("--no-wandb")
        if resume:
            argv.append("--resume")
        log = None if i == 0 else logs / f"rank{i}.log"
        if i != 0 or not show_progress:
            argv.append("--no-progress")
        stream = None if log is None else open(log, "wb")  # noqa: SIM115
        try:
            process = subprocess.Popen(argv, env=env, stdout=stream,
                                       stderr=subprocess.STDOUT if stream else None,
                                       preexec_fn=_die_with_parent)
        finally:
            if stream is not None:
                stream.close()
        ranks.append(_Rank(i, process, log))
    return ranks


def _broken_network(net: Any, player: Any) -> str | None:
    """Why the emulated network no longer follows the trace, or None: the trace player
    stopped on an error (e.g. a change tc did not make), or an NFQUEUE delayer exited."""
    if player is not None and player.error is not None:
        return f"the trace player stopped: {player.error}"
    dead = net.dead_delayers()
    if dead:
        return (f"the NFQUEUE delayer of worker {', '.join(map(str, dead))} exited, so its "
                "link drops every packet (see the launcher's log)")
    return None


def _supervise(ranks: list[_Rank], out: Path, timeout_s: float,
               watch: Callable[[], str | None] = lambda: None) -> None:
    """Wait for every rank. The first rank to fail is the lost one; the others get
    :data:`GRACE_S` seconds to stop by themselves, then are stopped. ``watch`` is asked
    every poll for a broken part of the network (a message stops the run)."""
    first_failure: tuple[_Rank, int, float] | None = None
    while True:
        broken = watch()
        if broken is not None:
            for r in ranks:
                _stop(r.process)
            raise RunFailed(_record_failure(out, f"emulated run failed: {broken}", lost=()))
        codes = {r.rank: r.process.poll() for r in ranks}
        if first_failure is None:
            failed = [r for r in ranks if codes[r.rank] not in (None, 0)]
            if failed:
                # a rank that died of a signal is the cause; the others then fail on it
                failed.sort(key=lambda r: (codes[r.rank] >= 0, r.rank))  # type: ignore[operator]
                culprit = failed[0]
                first_failure = (culprit, codes[culprit.rank], time.monotonic())  # type: ignore[arg-type]
                print(f"decobench: worker rank {culprit.rank} "
                      f"{_describe_exit(codes[culprit.rank])}; waiting up to {GRACE_S:.0f} s for "  # type: ignore[arg-type]
                      "the other ranks to stop", file=sys.stderr)
        if all(code is not None for code in codes.values()):
            break
        if first_failure is not None and time.monotonic() - first_failure[2] > GRACE_S:
            for r in ranks:
                _stop(r.process)
            break
        time.sleep(0.2)
    if first_failure is None:
        return
    culprit, code, _ = first_failure
    exits = {r.rank: r.process.returncode for r in ranks}
    lost = (culprit.rank,)
    message = (f"emulated run failed: lost rank {culprit.rank} (it {_describe_exit(code)}); "
               f"exit statuses {exits}")
    raise RunFailed(_record_failure(out, message, lost=lost, exits=exits))


def _record_failure(out: Path, message: str, lost: tuple[int, ...],
                    exits: dict[int, int | None] | None = None) -> str:
    """The launcher's view into ``failure.json``, merged with rank 0's record if it wrote one
    (:func:`decobench.runs.lifecycle.record_failure`); returns the message."""
    record_failure(out, message, backend="emulated", reported_by="launcher", lost_ranks=lost,
                   exit_statuses=exits)
    return message


def _stop(process: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=grace_s)


def _stop_player(player: Any, out: Path) -> None:
    """Stop the player and write each change it applied to ``trace_player.jsonl``."""
    try:
        player.stop()
    finally:
        write_text_atomic(out / TRACE_PLAYER_LOG, "".join(
            json.dumps(dataclasses.asdict(change)) + "\n" for change in player.records))


def _launch(run: PreparedRun, *, overwrite: bool = False, show_progress: bool = True,
            wandb: bool = True, resume: bool = False) -> dict[str, Any]:
    from decobench.runs.tracking import wandb_tracker_factory

    wandb_tracker_factory(wandb)                     # a bad WANDB_MODE fails here
    return launch(run, overwrite=overwrite, show_progress=show_progress, wandb=wandb,
                  resume=resume)


EMULATED = Backend(
    "emulated", "n worker processes (torch.distributed) in network namespaces over links "
    "shaped live from the trace; times measured (root)",
    check=check_emulation, run=_launch, parallel_cells=False)
"""The emulated backend (entry point ``emulated`` of ``decobench.backends``); its settings
are ``RunConfig.emulation``."""
