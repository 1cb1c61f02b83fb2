"""Command line of one emulated rank: ``python -m decobench.emulated`` (or via torchrun).

Takes the same run options as ``decobench run`` (and ``--config FILE.yaml``), plus how
this rank reaches the network. The torch.distributed rendezvous comes from the environment
torchrun sets (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK, LOCAL_WORLD_SIZE).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from decobench.errors import DecobenchError
from decobench.netem.tcp import host_changes_from_env

EPILOG = """\
examples:
  torchrun --nproc-per-node 4 -m decobench.emulated --config run.yaml --out runs/emu
  torchrun --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr HOST0 \\
      --master-port 29500 -m decobench.emulated --config run.yaml --out /results/run

--latency-mechanism: on links that already have the trace's latency (real WAN, netem,
docker-tc) use kernel (auto and netem mean the same for a rank); with rate-only shaping,
comm-layer makes this rank deliver each message at transmission end + l·b(t). 'decobench run --backend emulated' builds shaped namespaces and starts the ranks
for you (docs/emulation.md).
"""


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    from decobench.cli.flags import add_method_flags, add_run_flags

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--method")
    chosen = pre.parse_known_args(list(argv))[0].method
    parser = argparse.ArgumentParser(
        prog="python -m decobench.emulated",
        description="One rank of an emulated decobench run: real torch.distributed "
        "collectives (gloo on CPU, NCCL on GPUs) overlapping computation; times measured. "
        "Rank 0 writes the run directory.", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_flags(parser)
    add_method_flags(parser, chosen)
    g = parser.add_argument_group("this rank")
    g.add_argument("--timeout-s", type=float, help="seconds a collective may take before a "
                   "peer counts as lost (default: 60 + twice a dense message's transfer at "
                   "the trace's lowest bandwidth)")
    g.add_argument("--attach", action="store_true", help="the run directory was created by "
                   "the launcher: fill it, do not check or clear it")
    g.add_argument("--start-file", metavar="PATH", help="rank 0 writes the monotonic start "
                   "time here (a trace player waits for it)")
    g.add_argument("--addresses", metavar="IP,IP,...", help="each rank's address, to name a "
                   "lost rank in errors")
    g.add_argument("--shaper-ready", metavar="PATH", help="before the rendezvous, wait for "
                   "this file, which the trace player writes once this rank's link is shaped "
                   "(python -m decobench.netem.player --ready-file), and check that its "
                   "latency mechanism agrees with --latency-mechanism")
    g.add_argument("--shaper-ready-timeout", metavar="S", type=float, default=120.0,
                   help="seconds to wait for --shaper-ready (default 120)")
    g.add_argument("--probe", action="store_true", help="before training, measure every "
                   "ring link's goodput and round trip against the trace's first row and "
                   "fail naming any link more than 10%% off; the report goes to "
                   "network_probe.json in the run directory (links a launcher did not "
                   "build: Docker, your own hosts)")
    g.add_argument("--network-info", metavar="JSON", help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    import json

    from decobench.cli.flags import run_values
    from decobench.emulated.comm import PeerLost
    from decobench.emulated.worker import (
        EmulationSettings,
        RankEnvironment,
        default_timeout_s,
        run_rank,
    )
    from decobench.runs.config import build_run_config
    from decobench.runs.runner import prepare
    from decobench.runs.tracking import wandb_tracker_factory
    from decobench.tasks.base import parameter_count

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    rank = "?"
    try:
        env = RankEnvironment.from_environ()
        rank = str(env.rank)
        values = run_values(args)
        for key in ("timeout_s", "attach", "start_file", "addresses",
                    "network_info", "shaper_ready", "shaper_ready_timeout", "probe"):
            values.pop(key, None)
        values["backend"] = "emulated"
        if args.resume and args.overwrite:
            raise DecobenchError("--resume continues a run and --overwrite starts it over: "
                                 "give one of them")
        run = prepare(build_run_config(values))
        timeout = args.timeout_s or run.config.emulation.timeout_s
        if timeout is None:
            d = parameter_count(run.task, run.profile)
            timeout = default_timeout_s(d, run.condition.trace_for(d, run.compute_time_s),
                                        run.config.workers, run.config.topology)
        settings = EmulationSettings(
            latency_mechanism=("comm-layer" if run.config.emulation.latency_mechanism == "comm-layer"
                               else "kernel"), timeout_s=timeout, attach=args.attach,
            overwrite=args.overwrite, resume=args.resume, start_file=Path(args.start_file) if args.start_file else None,
            addresses=tuple(args.addresses.split(",")) if args.addresses else (),
            network=json.loads(args.network_info) if args.network_info else {},
            probe=args.probe, shaper_ready=Path(args.shaper_ready) if args.shaper_ready else None,
            ready_timeout_s=args.shaper_ready_timeout,
            host_changes=tuple(host_changes_from_env(os.environ)))
        summary = run_rank(run, env, settings, show_progress=not args.no_progress,
                           tracker_factory=wandb_tracker_factory(not args.no_wandb))
    except DecobenchError as exc:
        print(f"decobench rank {rank}: error: {exc}", file=sys.stderr)
        return 2
    except PeerLost as exc:
        print(f"decobench rank {rank}: error: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print(f"decobench rank {rank}: interrupted", file=sys.stderr)
        return 130
    if summary is not None:
        ttt = summary["time_to_target_s"]
        print(f"rank 0: {summary['method']} on {summary['task']}: status {summary['status']}, "
              f"{summary['iterations']} iterations in {summary['sim_time_s']:.2f} s measured, "
              f"time to target {'not reached' if ttt is None else f'{ttt:.2f} s'}",
              file=sys.stderr)
    return 0
