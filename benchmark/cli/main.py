"""The ``decobench`` command line (docs/design.md §9.2).

Subcommands: ``run`` (one training run), ``sweep`` (a suite of runs, in parallel and
resumable), ``report`` (tables and figures of finished runs), ``plan`` (DeCo's (δ, τ) for
given conditions), ``trace`` (generate, validate, convert, plot traces), ``data`` (build the
offline CIFAR-10 and ImageNet stand-ins, :mod:`decobench.tasks.standins`), ``compare`` (two
results folders cell by cell), ``versus`` (methods on one trace with one simulated-time
budget, :mod:`decobench.cli.versus`), ``dashboard`` (the W&B comparison views,
:mod:`decobench.reports.dashboard`), ``fidelity`` (simulated against emulated). Bad input
ends with one ``decobench: error: ...`` line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from decobench.atomicio import check_output_dir
from decobench.cli.flags import add_method_flags, add_run_flags, run_values
from decobench.cli.versus import SUMMARY as VERSUS_SUMMARY
from decobench.errors import DecobenchError

RUN_EPILOG = """\
examples:
  decobench run --task cnn-fmnist --method deco-sgd --workers 4 \\
      --trace wan-200ms-lowbw-varying --target 0.75 --data-root ../shared/data/fashion-mnist-mini
  decobench run --task cnn-fmnist --profile cpu --regime paper-wan --method deco-sgd \\
      --data-root ../shared/data/fashion-mnist-mini   (the paper profile's WAN, mapped)
  decobench run --config run.yaml --seed 3          (flags override the YAML file)
  decobench run --method dd-ef-sgd --help           (shows only that method's options)

Each method's card (paper, what it sends, knobs, this project's decisions) is
docs/methods/METHOD.md.

The run directory (--out) receives config.yaml, metrics.jsonl and summary.json, and,
while it trains, checkpoint.pt (emulated: checkpoints/, one file per rank) for --resume,
removed when it finishes.
"""


def _tasks_and_methods_epilog() -> str:
    from decobench.cli.metadata import run_metadata

    metadata = run_metadata()
    lines = ["tasks:"] + [f"  {n:14s} {text}" for n, text in metadata["tasks"].items()]
    lines += ["methods:"] + [f"  {n:14s} {m['summary']}" for n, m in metadata["methods"].items()]
    lines += ["regime aliases (--regime):"] + [f"  {n:18s} {spec}" for n, spec
                                                in metadata["regimes"].items()]
    return RUN_EPILOG + "\n" + "\n".join(lines)


def _plan_flags(parser: argparse.ArgumentParser) -> None:
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--params", type=int, metavar="D", help="number of parameters d")
    size.add_argument("--task", help="take d (and T, unless --compute-ms) from a task's model")
    parser.add_argument("--profile", default="paper", help="task profile (with --task)")
    parser.add_argument("--workers", type=int, default=4, help="number of workers n")
    parser.add_argument("--compute-ms", type=float, help="per-iteration compute time T (ms)")
    parser.add_argument("--bandwidth-mbps", type=float, required=True,
                        help="bandwidth a (Mbit/s)")
    parser.add_argument("--latency-ms", type=float, required=True, help="one-way latency b (ms)")
    parser.add_argument("--topology", choices=["paper", "ring"], default="paper")
    parser.add_argument("--tau-max", type=int, default=32, help="largest staleness considered")
    parser.add_argument("--delta-min", type=float, default=1e-4,
                        help="smallest compression ratio considered")
    parser.add_argument("--kappa", type=float, default=1.0,
                        help="κ of the fallback objective T_avg·(1 + κ·sqrt(Φ))")
    parser.add_argument("--phi", default="paper", help="Φ model name")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


class OneLineParser(argparse.ArgumentParser):
    """argparse with the project's error format: one line naming the command and where its
    help is, exit status 2 (argparse prints the whole usage block)."""

    def error(self, message: str) -> NoReturn:
        where = "" if self.prog == "decobench" else f"{self.prog}: "
        self.exit(2, f"decobench: error: {where}{message} (see {self.prog} --help)\n")


SUBCOMMANDS: dict[str, str] = {
    "run": "one training run",
    "plan": "print DeCo's (δ, τ) for given conditions (no training)",
    "report": "tables and figures of the finished runs in a results folder",
    "sweep": "run a suite of runs in parallel, resumably",
    "fidelity": "the same runs on the simulated and emulated backends, per-iteration time "
                "compared (root)",
    "trace": "generate, validate, convert and plot network traces",
    "data": "offline data: build stand-in data sets; fetch a run's data",
    "compare": "compare two results folders (or snapshots) cell by cell; exit 1 on a "
               "regression (CI gate)",
    "dashboard": "the W&B comparison dashboard of a results folder, as code (saved views)",
    "versus": VERSUS_SUMMARY,
}
"""The subcommands and their one-line help, in ``decobench --help`` order."""


def _chosen_subcommand(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option)."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The command line parser. Only the subcommand named in ``argv`` is built in full
    (with its flags, which may import the registries, and through them torch); the others
    are one-line entries, so ``decobench --help`` and a light subcommand start fast. With
    an empty ``argv`` every subcommand is built."""
    parser = OneLineParser(
        prog="decobench", description="Distributed training over wide-area networks: DeCo-SGD "
        "and baselines on simulated network traces.", epilog="Bad input ends with one line "
        "'decobench: error: ...' and exit status 2; add --debug anywhere on the command line "
        "to see the Python traceback instead. Troubleshooting: docs/troubleshooting.md.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = _chosen_subcommand(argv)
    builders = {"run": _add_run, "plan": _add_plan, "report": _add_report, "sweep": _add_sweep,
                "fidelity": _add_fidelity, "trace": _add_trace, "data": _add_data,
                "compare": _add_compare, "dashboard": _add_dashboard, "versus": _add_versus}
    for name, summary in SUBCOMMANDS.items():
        if not argv or chosen == name:
            builders[name](sub, argv)
        else:
            sub.add_parser(name, help=summary)
    return parser


def _add_trace(sub: Any, argv: Sequence[str]) -> None:
    from decobench.netem.cli import add_trace_parser

    add_trace_parser(sub)


def _add_data(sub: Any, argv: Sequence[str]) -> None:
    from decobench.cli.data import add_data_parser

    add_data_parser(sub)


def _add_versus(sub: Any, argv: Sequence[str]) -> None:
    from decobench.cli.versus import add_versus_parser

    add_versus_parser(sub)


def _add_run(sub: Any, argv: Sequence[str]) -> None:
    pre = OneLineParser(prog="decobench", add_help=False)
    pre.add_argument("--method")
    chosen_method = pre.parse_known_args(list(argv))[0].method
    run = sub.add_parser("run", help=SUBCOMMANDS["run"], description="One training run: on "
                         "the simulated network clock (default), or with --backend emulated "
                         "as n real worker processes over shaped Linux links (root).",
                         epilog=_tasks_and_methods_epilog(),
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_flags(run)
    add_method_flags(run, chosen_method)
    run.set_defaults(func=cmd_run)


def _add_plan(sub: Any, argv: Sequence[str]) -> None:
    plan = sub.add_parser("plan", help=SUBCOMMANDS["plan"],
                          description="DeCo's plan (docs/design.md §5) for a model size, compute "
                          "time, bandwidth and latency.")
    _plan_flags(plan)
    plan.set_defaults(func=cmd_plan)


def _add_report(sub: Any, argv: Sequence[str]) -> None:
    report = sub.add_parser(
        "report", help=SUBCOMMANDS["report"],
        description="The report of every finished run under RESULTS_DIR (a sweep's folder or "
        "any folder of run directories): report.md and report.html (figures embedded), "
        "tables/*.csv and *.tex, figures/*.png and *.svg; time to target with speed-ups over "
        "D-SGD and CocktailSGD, time-to-accuracy curves, scaling, adaptivity, theory and a "
        "per-run table, under MLPerf-style rules (docs/reports.md). With a sweep's "
        "manifest.json, a missing run is an error. Also logged to W&B as a report run.")
    report.add_argument("results_dir", metavar="RESULTS_DIR")
    report.add_argument("--out", metavar="DIR", help="write the report here (default: "
                        "RESULTS_DIR)")
    report.add_argument("--no-wandb", action="store_true", help="do not log the report to "
                        "Weights & Biases")
    report.set_defaults(func=cmd_report)


def _add_compare(sub: Any, argv: Sequence[str]) -> None:
    from decobench.reports.compare import DEFAULT_TOLERANCE, METRICS

    compare = sub.add_parser(
        "compare", help=SUBCOMMANDS["compare"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Compare NEW with BASE cell by cell: time and iterations to target, final "
        "metric, bits sent and status. BASE and NEW are results folders (a sweep's, or any "
        "folder of run directories, e.g. decobench run --out's) or snapshot files written by "
        "--save (the golden results kept in a repository). Time to target and the status "
        "decide a cell's verdict (and the final metric where neither side reached the "
        "target); iterations, bits and the final metric are shown beside them and flagged "
        "when worse beyond the tolerance, deciding only with --decisive. Each cell's "
        "config.yaml fields that differ are listed (field: BASE -> NEW). Prints a table, "
        "writes compare.md and compare.json, and exits 1 when a cell regressed or a cell of "
        "BASE is missing in NEW, 0 otherwise (2: bad input).",
        epilog="tolerance: exact when both sides ran on the simulated clock on the same "
        "platform with the same versions (such runs are deterministic); otherwise, per cell and "
        "metric, the relative spread of BASE's seeds of that cell (one seed: the largest "
        f"spread of its task's cells), at least {DEFAULT_TOLERANCE:.0%}. Cells are named "
        "experiment/task/condition/label/nN/sSEED (two plain runs that differ only in the "
        "condition, named after their network, are paired); a cell whose configuration "
        "changed is compared and its changed fields are listed, leaving out bookkeeping "
        "(output and data paths, checkpoint interval, versions, gradient engine and "
        "trajectory provenance, emulated hosts; docs/ci.md).\n\n"
        "examples:\n"
        "  decobench compare benchmark/suites/golden/smoke.json results/smoke\n"
        "  decobench compare results/base results/new --metric time_to_target_s "
        "--only '*deco-sgd*'\n"
        "  decobench compare benchmark/suites/golden/smoke.json results/smoke "
        "--save benchmark/suites/golden/smoke.json   # accept NEW as the golden results\n"
        "docs/ci.md has the CI workflow that runs it.")
    compare.add_argument("base", metavar="BASE", help="the reference: results folder or "
                         "snapshot file")
    compare.add_argument("new", metavar="NEW", help="the results to check: results folder or "
                         "snapshot file")
    compare.add_argument("--metric", action="append", choices=METRICS, metavar="METRIC",
                         help="compare only this metric (repeatable; default: all of "
                         f"{', '.join(METRICS)})")
    compare.add_argument("--tolerance", type=float, metavar="X", help="one relative "
                         "tolerance for every cell, e.g. 0.05 for 5%% (0: exact); default: "
                         "exact or the seed spread, as below")
    compare.add_argument("--decisive", action="append", default=[], metavar="METRICS",
                         help="let these metrics decide too (comma-separated, repeatable), "
                         "e.g. iters_to_target,bits_sent: a cell whose iterations rose beyond "
                         "the tolerance then regresses even when its time to target fell; "
                         "default: only time_to_target_s and status decide")
    compare.add_argument("--only", action="append", default=[], metavar="GLOB",
                         help="compare only cells whose name matches this glob, e.g. "
                         "'*/cnn-fmnist/*' (repeatable: any may match)")
    compare.add_argument("--out", metavar="DIR", help="where compare.md and compare.json go "
                         "(default: NEW if it is a folder, else the current folder)")
    compare.add_argument("--save", metavar="FILE", help="also write NEW as a snapshot to FILE "
                         "(refreshing a golden file): NEW becomes the baseline, so the exit "
                         "status is 0 whatever the comparison says")
    compare.set_defaults(func=cmd_compare)


def _add_dashboard(sub: Any, argv: Sequence[str]) -> None:
    dashboard = sub.add_parser(
        "dashboard", help=SUBCOMMANDS["dashboard"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The W&B comparison dashboard of RESULTS, built with wandb-workspaces: "
        "one saved view\n(workspace) per task and network condition, holding the runs of "
        "RESULTS (by W&B run id,\nfrom each run directory's wandb.json) grouped by method "
        "(label):\n"
        "  - the metric (eval/accuracy or eval/perplexity) and train/loss against simulated "
        "time\n"
        "  - time to target per method (bar chart of the summary time_to_target_s)\n"
        "  - comm/delta (δ), comm/tau (τ) and net/bandwidth_mbps against simulated time",
        epilog="offline (the default: WANDB_MODE unset, offline or disabled): nothing is "
        "sent; the views'\nspecifications go to RESULTS/wandb-dashboard.json (or --out).\n"
        "online (WANDB_MODE=online, after `wandb login`): the views are also saved to the "
        "runs' W&B\nproject (entity: WANDB_ENTITY, else your default) and their URLs are "
        "printed; `wandb sync`\nthe runs first so the views find them. Each online call "
        "saves new views.\n\n"
        "examples:\n"
        "  decobench dashboard results/smoke\n"
        "  WANDB_MODE=online decobench dashboard results/smoke\n"
        "  decobench dashboard results/new --compare results/base   # plus BASE against NEW\n"
        "docs/wandb.md \"Dashboards as code\" shows what each view holds.")
    dashboard.add_argument("results_dir", metavar="RESULTS", help="a results folder written "
                           "by `decobench sweep` (or any folder of run directories)")
    dashboard.add_argument("--compare", metavar="BASE", help="also one view per condition "
                           "with BASE's runs (grey) over RESULTS' (orange), cell by cell: BASE "
                           "is what `decobench compare BASE RESULTS` takes (a results folder, "
                           "or a snapshot of runs logged online)")
    dashboard.add_argument("--out", metavar="FILE", help="where the views' specifications go "
                           "(default: RESULTS/wandb-dashboard.json)")
    dashboard.set_defaults(func=cmd_dashboard)


def _add_sweep(sub: Any, argv: Sequence[str]) -> None:
    sweep = sub.add_parser(
        "sweep", help=SUBCOMMANDS["sweep"],
        description="Run every cell of a suite (tasks × methods × conditions × workers × seeds) "
        "in parallel worker processes. Finished runs are skipped (a run's identity is the hash "
        "of its resolved configuration and seed), so a killed sweep resumes where it stopped. "
        "Every cell is checked before the first one starts.",
        epilog=_sweep_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    sweep.add_argument("suite", metavar="SUITE", help="suite YAML file, or the name of a shipped "
                       "suite (see below)")
    sweep.add_argument("--out", metavar="DIR", help="results folder (default results/SUITE_NAME)")
    sweep.add_argument("--jobs", "-j", type=int, help="parallel worker processes (default: one "
                       "per GPU where torch sees any, each worker on its own GPU; else one per "
                       "CPU core); each uses cores/jobs torch threads")
    sweep.add_argument("--data-root", action="append", default=[], metavar="TASK=DIR",
                       help="existing copy of a task's data set (repeatable), e.g. "
                       "cnn-fmnist=../shared/data/fashion-mnist-mini; tasks without one "
                       "download their data")
    sweep.add_argument("--backend", metavar="NAME", help="run every cell on this backend "
                       "(default: simulated); emulated cells run one at a time (root; "
                       "docs/emulation.md) and have their own identities and run folders")
    sweep.add_argument("--dry-run", action="store_true", help="check the suite, list the "
                       "runs still to do and their cost (an upper bound from per-iteration "
                       "times documented for one GPU, or a 2-core CPU for the CNNs; the "
                       "machine is named); run nothing")
    sweep.add_argument("--executor", choices=("local", "slurm", "ray"), default="local",
                       help="where the cells run: local worker processes (default), Slurm "
                       "jobs through submitit (one job array per wave of ready cells; "
                       "resources from the suite's `resources`), or Ray tasks; the results "
                       "folder must be on a filesystem the cluster's nodes share "
                       "(docs/suites.md \"Clusters\")")
    sweep.add_argument("--ray-address", metavar="ADDR", help="with --executor ray: the "
                       "cluster to join, e.g. 10.0.0.1:6379 or auto (default: start a local "
                       "one)")
    sweep.add_argument("--slurm-partition", metavar="NAME", help="with --executor slurm: "
                       "the partition (default: the cluster's default)")
    sweep.add_argument("--retries", type=int, default=2, metavar="N", help="with --executor "
                       "slurm or ray: run a cell again up to N times when its job or worker "
                       "dies (it resumes from its checkpoint; default 2)")
    sweep.add_argument("--no-reuse", action="store_true", help="train every cell; by "
                       "default cells that would train the same trajectory (same task, seed and "
                       "options, and a method that decides the same on their networks) train "
                       "it once and the others are re-timed from it on the event clock "
                       "(docs/suites.md \"Trajectory reuse\")")
    sweep.add_argument("--no-wandb", action="store_true", help="do not log runs to Weights & "
                       "Biases (default: offline logs in each run directory)")
    sweep.add_argument("--no-progress", action="store_true", help="no progress bar (one line "
                       "per finished run is still printed)")
    sweep.set_defaults(func=cmd_sweep)


def _add_fidelity(sub: Any, argv: Sequence[str]) -> None:
    fidelity = sub.add_parser(
        "fidelity", help=SUBCOMMANDS["fidelity"],
        description="Run each method on the emulated backend (n processes over shaped Linux "
        "links, time measured), then on the simulated backend replaying its (δ, τ) with "
        "each iteration's T set to the time rank 0 spent not waiting for messages, and "
        "compare the per-iteration time after a warm-up; adaptive methods also plan for "
        "themselves on the simulated backend from what the emulated ranks observed, and "
        "the first plans are compared. Writes OUT/fidelity.md and fidelity.json and the "
        "runs under OUT/emulated, OUT/simulated, OUT/simulated-ideal and "
        "OUT/simulated-own-plan. Needs root (network namespaces, tc); see docs/emulation.md.",
        epilog="example:\n  decobench fidelity --task cnn-fmnist --workers 2 --trace "
        "constant-20mbps-100ms \\\n      --data-root ../shared/data/fashion-mnist-mini",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    fidelity.add_argument("--task", default="cnn-fmnist", help="task (default cnn-fmnist)")
    fidelity.add_argument("--profile", default="cpu", help="task profile (default cpu)")
    fidelity.add_argument("--methods", default="d-sgd,accordion,dga,cocktail-sgd,deco-sgd",
                          help="comma-separated methods (default: the five of the paper's "
                          "comparison, d-sgd,accordion,dga,cocktail-sgd,deco-sgd)")
    fidelity.add_argument("--workers", type=int, default=2, help="number of workers (default 2)")
    fidelity.add_argument("--trace", default="constant-20mbps-100ms", metavar="CSV|NAME",
                          help="network trace (default constant-20mbps-100ms)")
    fidelity.add_argument("--topology", choices=["ring", "paper"], default="ring",
                          help="time-model topology factors (default ring: the emulated "
                          "collectives are rings)")
    fidelity.add_argument("--max-iters", type=int, default=40, help="iterations per run "
                          "(default 40)")
    fidelity.add_argument("--warmup", type=int, default=5, help="iterations left out of the "
                          "per-iteration time (default 5)")
    fidelity.add_argument("--batch-size", type=int, help="per-worker batch size (default: "
                          "the profile's)")
    fidelity.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    fidelity.add_argument("--data-root", metavar="DIR", help="existing copy of the data set")
    fidelity.add_argument("--latency-mechanism", choices=["auto", "netem", "nfqueue",
                                                           "comm-layer"],
                          default="auto", help="who adds the latency on the emulated side "
                          "(default auto: netem if the kernel has it, else nfqueue where "
                          "iptables can queue packets, else comm-layer)")
    fidelity.add_argument("--out", default="results/fidelity", metavar="DIR",
                          help="output folder (default results/fidelity)")
    fidelity.add_argument("--overwrite", action="store_true", help="replace earlier runs")
    fidelity.add_argument("--no-progress", action="store_true", help="no progress bars")
    fidelity.set_defaults(func=cmd_fidelity)


def cmd_fidelity(args: argparse.Namespace) -> int:

    from decobench.emulated.fidelity import render_markdown, run_fidelity
    from decobench.methods import get_method_spec
    from decobench.runs.config import build_run_config

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for method in methods:
        get_method_spec(method)
    values: dict[str, Any] = {
        "task": args.task, "profile": args.profile, "method": methods[0],
        "workers": args.workers, "trace": args.trace, "topology": args.topology,
        "max_iters": args.max_iters, "seed": args.seed,
        "latency_mechanism": args.latency_mechanism}
    if args.batch_size is not None:
        values["batch_size"] = args.batch_size
    if args.data_root is not None:
        values["data_root"] = args.data_root
    base = build_run_config(values)
    rows = run_fidelity(base, methods, check_output_dir(args.out, "--out"), warmup=args.warmup,
                        overwrite=args.overwrite, show_progress=not args.no_progress)
    print(render_markdown(rows, {"output": args.out}))
    return 0


def _sweep_epilog() -> str:
    from decobench.sweeps.suite import load_suite, shipped_suites

    lines = ["shipped suites:"]
    for name in shipped_suites():
        suite, _ = load_suite(name)
        lines.append(f"  {name:9s} {suite.description.strip().splitlines()[0] if suite.description else ''}")
        if suite.cost:
            lines.append(f"  {'':9s} cost: {suite.cost}")
    lines += ["", "examples:",
              "  decobench sweep smoke --data-root cnn-fmnist=../shared/data/fashion-mnist-mini",
              "  decobench sweep my-suite.yaml --out results/mine --jobs 4",
              "  decobench report results/smoke", "",
              "Suite file format: docs/suites.md."]
    return "\n".join(lines)


def _parse_data_roots(items: list[str]) -> dict[str, str]:
    roots: dict[str, str] = {}
    for item in items:
        task, sep, folder = item.partition("=")
        if not sep or not task or not folder:
            raise DecobenchError(f"--data-root {item!r}: expected TASK=DIR, e.g. "
                                 "cnn-fmnist=../shared/data/fashion-mnist-mini")
        roots[task] = folder
    return roots


def cmd_sweep(args: argparse.Namespace) -> int:
    import shlex
    from pathlib import Path

    from decobench.sweeps.executors import ExecutorConfig
    from decobench.sweeps.suite import load_suite
    from decobench.sweeps.sweep import SweepInterrupted, sweep

    suite, _ = load_suite(args.suite)
    out = check_output_dir(Path(args.out) if args.out else Path("results") / suite.name,
                           "--out")
    tasks = sorted({task for experiment in suite.experiments for task in experiment.tasks})
    data_roots = _parse_data_roots(args.data_root)
    # a root for a registered task the suite does not run is ignored (`make reproduce`
    # passes every task's root to every suite); an unregistered name is a typo
    from decobench.tasks import TASKS

    unknown = sorted(set(data_roots) - set(tasks) - set(TASKS.names()))
    if unknown:
        raise DecobenchError(f"--data-root names {', '.join(unknown)}, which suite "
                             f"{suite.name} does not run (its tasks: {', '.join(tasks)})")
    data_roots = {task: root for task, root in data_roots.items() if task in tasks}
    executor = ExecutorConfig(args.executor, args.ray_address, args.slurm_partition,
                              args.retries)
    try:
        plan = sweep(suite, out, jobs=args.jobs, data_roots=data_roots,
                     wandb=not args.no_wandb, show_progress=not args.no_progress,
                     dry_run=args.dry_run, backend=args.backend, reuse=not args.no_reuse,
                     executor=executor)
    except SweepInterrupted as stop:
        again = ["decobench", "sweep", args.suite, "--out", str(out),
                 *(f"--data-root={root}" for root in args.data_root),
                 *(["--backend", args.backend] if args.backend else []),
                 *(["--no-reuse"] if args.no_reuse else []),
                 *(["--executor", args.executor] if args.executor != "local" else []),
                 *(["--ray-address", args.ray_address] if args.ray_address else []),
                 *(["--slurm-partition", args.slurm_partition] if args.slurm_partition
                   else []),
                 *(["--jobs", str(args.jobs)] if args.jobs else [])]
        print(f"decobench: interrupted: {stop.finished} of {stop.total} runs finished, the "
              f"ones in flight were stopped; resume with: {shlex.join(again)}",
              file=sys.stderr)
        return 130
    if not args.dry_run:
        print(f"suite {suite.name}: all {len(plan.cells)} runs finished in {out}; "
              f"next: decobench report {out}", file=sys.stderr)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from decobench.runs.config import build_run_config

    config = build_run_config(run_values(args))     # flag values: no task imported yet
    if args.resume and args.overwrite:
        raise DecobenchError("--resume continues a run and --overwrite starts it over: give "
                             "one of them")
    from decobench.runs.backends import get_backend
    from decobench.runs.runner import prepare

    run = prepare(config)
    check_output_dir(run.out, "--out")
    backend = get_backend(config.backend)
    backend.check(run)
    extra = {"resume": True} if args.resume else {}
    summary = backend.run(run, overwrite=args.overwrite, show_progress=not args.no_progress,
                          wandb=not args.no_wandb, **extra)
    ttt = summary["time_to_target_s"]
    shown = "not reached" if ttt is None else f"{ttt:.2f} s (iteration {summary['iters_to_target']})"
    clock = "simulated" if summary.get("time_basis", "simulated") == "simulated" else "measured"
    print(f"{summary['method']} on {summary['task']}: status {summary['status']}, "
          f"time to target {shown}, final {summary['metric_name']} "
          f"{summary['final_metric']}, {clock} time {summary['sim_time_s']:.2f} s, "
          f"{summary['iterations']} iterations -> {run.out}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    import math

    from decobench.clock.timemodel import t_avg
    from decobench.clock.topology import topology_factors
    from decobench.clock.wire import dense_wire_bits, wire_bits
    from decobench.netem.trace import MAX_BANDWIDTH_BPS, MAX_LATENCY_S, MIN_BANDWIDTH_BPS
    from decobench.planning.phi import get_phi
    from decobench.planning.planner import plan

    d, compute_s = args.params, None
    if args.task:
        from decobench.tasks import get_task
        from decobench.tasks.base import build_seeded_model
        from decobench.training.flat import FlatLayout

        task = get_task(args.task)
        profile = task.profile(args.profile)
        d = FlatLayout.of(build_seeded_model(task, profile, 0)).d
        compute_s = profile.compute_time_s
    if args.compute_ms is not None:
        compute_s = args.compute_ms / 1e3
    if compute_s is None:
        raise DecobenchError("--compute-ms is required with --params")
    a, b = args.bandwidth_mbps * 1e6, args.latency_ms / 1e3
    if 0 < a < MIN_BANDWIDTH_BPS or MAX_BANDWIDTH_BPS < a < math.inf:
        raise DecobenchError(f"--bandwidth-mbps {args.bandwidth_mbps:g} lies outside "
                             f"[{MIN_BANDWIDTH_BPS / 1e6:g}, {MAX_BANDWIDTH_BPS / 1e6:g}] Mbit/s")
    if MAX_LATENCY_S < b < math.inf:
        raise DecobenchError(f"--latency-ms {args.latency_ms:g} exceeds "
                             f"{MAX_LATENCY_S * 1e3:g} ms")
    chosen = plan(d, args.workers, compute_s, a, b, topology=args.topology,
                  phi=get_phi(args.phi), tau_max=args.tau_max, delta_min=args.delta_min,
                  kappa=args.kappa)
    dense = topology_factors(args.topology, args.workers, dense=True)
    dsgd_s = t_avg(compute_s, dense_wire_bits(d), a, b, 0, h=dense.h, l=dense.l)
    result = {"parameters": d, "workers": args.workers, "compute_s": compute_s,
              "bandwidth_bps": a, "latency_s": b, "topology": args.topology,
              "delta": chosen.delta, "tau": chosen.staleness, "bubble_free": chosen.bubble_free,
              "t_avg_s": chosen.t_avg_s, "phi": chosen.phi,
              "wire_bits": wire_bits(chosen.delta, d), "dsgd_t_avg_s": dsgd_s}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"d = {d}, n = {args.workers}, T = {compute_s * 1e3:.3g} ms, "
              f"a = {args.bandwidth_mbps:g} Mbit/s, b = {args.latency_ms:g} ms ({args.topology})")
        print(f"plan: δ = {chosen.delta:.6g}, τ = {chosen.staleness}, "
              f"{'bubble-free' if chosen.bubble_free else 'NOT bubble-free (fallback objective)'}")
        print(f"predicted time per iteration T_avg = {chosen.t_avg_s * 1e3:.4g} ms "
              f"(D-SGD: {dsgd_s * 1e3:.4g} ms), Φ = {chosen.phi:.4g}, "
              f"W = {result['wire_bits']} bits per message")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from decobench.reports.build import write_report
    from decobench.runs.rundir import MANIFEST
    from decobench.runs.tracking import log_report, project_name, resolve_mode

    resolve_mode(not args.no_wandb)                 # a bad WANDB_MODE fails before any work
    check_output_dir(args.out or args.results_dir, "--out" if args.out else "RESULTS_DIR")
    output = write_report(args.results_dir, args.out)
    print(output.markdown.read_text(encoding="utf-8"))
    manifest = Path(args.results_dir) / MANIFEST
    suite = json.loads(manifest.read_text())["suite"] if manifest.is_file() else None
    log_report(Path(args.out or args.results_dir), project=project_name(suite),
               tables=dict(output.rows),
        figures=[png for png, _ in output.figures.values()], report_files=output.files,
        enabled=not args.no_wandb)
    print(f"report: {output.markdown} and {output.html} ({len(output.csv)} tables, "
          f"{len(output.figures)} figures)", file=sys.stderr)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from decobench.reports.compare import (
        METRICS,
        compare,
        load_results,
        print_table,
        write_comparison,
        write_snapshot,
    )

    base, _ = load_results(args.base)
    new, unfinished = load_results(args.new)
    decisive = [m.strip() for value in args.decisive for m in value.split(",") if m.strip()]
    comparison = compare(base, new, metrics=args.metric or METRICS, tolerance=args.tolerance,
                         only=args.only, unfinished=unfinished, decisive=decisive)
    out = args.out or (args.new if Path(args.new).is_dir() else ".")
    check_output_dir(out, "--out" if args.out else "NEW")
    print_table(comparison)
    markdown, data = write_comparison(comparison, out)
    print(f"compare: {markdown} and {data}", file=sys.stderr)
    if args.save:
        print(f"compare: NEW saved as the baseline {write_snapshot(new, args.save)}",
              file=sys.stderr)
        return 0
    return 1 if comparison.failed else 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    from pathlib import Path

    from decobench.reports.dashboard import make_dashboard
    from decobench.runs.tracking import resolve_mode

    mode = resolve_mode()                           # a bad WANDB_MODE fails before any work
    if args.out and Path(args.out).is_dir():
        raise DecobenchError(f"--out {args.out} is a folder: give a file name, e.g. "
                             f"{Path(args.out) / 'wandb-dashboard.json'}")
    check_output_dir(Path(args.out).parent if args.out else args.results_dir,
                     "--out" if args.out else "RESULTS")
    result = make_dashboard(args.results_dir, base=args.compare, out=args.out, mode=mode)
    for note in result.notes:
        print(f"decobench: note: {note}", file=sys.stderr)
    for url in result.urls:
        print(url)
    saved = f"saved {len(result.urls)} W&B views (above); " if result.urls else ""
    print(f"dashboard: {saved}view specifications in {result.path}", file=sys.stderr)
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _subparser(parser: argparse.ArgumentParser, args: argparse.Namespace
               ) -> argparse.ArgumentParser:
    """The deepest (sub)command parser the parsed ``args`` went through (``decobench trace
    generate constant``), so a usage error names that command and its --help."""
    current = parser
    while True:
        actions = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions:
            return current
        chosen = getattr(args, actions[0].dest, None)
        if chosen not in actions[0].choices:
            return current
        current = actions[0].choices[chosen]


def main(argv: Sequence[str] | None = None) -> int:
    import signal

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    parser = build_parser(argv)
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:                              # named by the subcommand that was given
            _subparser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as stop:                 # --help (0) or a one-line usage error (2)
        return int(stop.code or 0)
    previous = signal.signal(signal.SIGTERM, _interrupt)     # SIGTERM stops like Ctrl-C
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("decobench: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        line, status = _error_line(exc)
        print(line, file=sys.stderr)
        return status
    finally:
        signal.signal(signal.SIGTERM, previous)


def _error_line(exc: Exception) -> tuple[str, int]:
    """The one line an error ends with, and the exit status: bad input (a DecobenchError,
    or an OSError on a path the edge could not foresee, e.g. a full disk) is 2; anything
    else is a bug, 1, with the hint to rerun with --debug for the traceback."""
    if isinstance(exc, DecobenchError):
        return f"decobench: error: {exc}", 2
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"decobench: error: {where}{exc.strerror or exc}", 2
    first = (str(exc).strip().splitlines() or [""])[0]
    return (f"decobench: internal error: {type(exc).__name__}: {first} (rerun with --debug "
            "for the traceback, and please report it)"), 1


if __name__ == "__main__":
    sys.exit(main())
