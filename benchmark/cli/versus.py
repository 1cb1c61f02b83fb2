"""``decobench versus``: these methods on this trace, with a fair budget, in one command
(docs/suites.md "Budgets").

It writes a one-experiment suite (one task, one trace, the methods, the seeds) to the results
folder, runs it with :func:`decobench.sweeps.sweep.sweep` (parallel, resumable: the same command
again resumes it), writes the report and prints the time-to-target table.

Every method gets the same *simulated-time* budget, by default the time D-SGD needs for the
profile's iteration budget on the trace (:func:`decobench.clock.budget.dense_time_budget`), and an
iteration cap that cannot end a run before that time (:func:`decobench.clock.budget.iterations_within`).
An iteration budget would be unfair: a method whose iterations cost 1/100 of another's
simulated time would stop 100 times earlier.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from decobench.atomicio import check_output_dir
from decobench.errors import DecobenchError

SUMMARY = ("run methods on one trace with the same simulated-time budget; print their "
           "times to target")

DEFAULT_METHODS = ("d-sgd", "accordion", "dga", "cocktail-sgd", "deco-sgd")
"""The paper's five methods (its Table 1)."""

EPILOG = """\
examples:
  decobench versus --task cnn-fmnist --profile cpu --trace my-link.csv --target 0.75 \\
      --methods deco-sgd,d-sgd,cocktail-sgd-topk --data-root ../shared/data/fashion-mnist-mini
  decobench versus --task gpt2-wikitext --profile cpu --trace aws-oregon-virginia \\
      --target 600 --seeds 0,1,2 --budget-s 3000

Budget: every method runs until it reaches --target or has used the same simulated time.
By default that time is what D-SGD (a dense message every iteration, the costliest
iteration here) needs for the profile's iteration budget on the trace, from the time model
(--budget-iters N: for N iterations; --budget-s S: S seconds). The iteration cap is set so
that no method can reach it first. A run that is stopped again resumes with the same
command. The results folder gets the suite file, the runs and the full report (report.md).
"""


def add_versus_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "versus", help=SUMMARY, description="Run several methods on one network trace with "
        "the same simulated-time budget and print their times to target, speed-ups included.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True, help="a registered task, e.g. cnn-fmnist")
    parser.add_argument("--trace", required=True, metavar="TRACE", help="trace CSV file "
                        "(docs/traces.md) or the name of a bundled trace")
    parser.add_argument("--target", required=True, type=float, help="accuracy in [0, 1], or "
                        "perplexity for language modelling; the time to it is what is compared")
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS), metavar="M1,M2,...",
                        help="registered methods, comma-separated (default: the paper's five: "
                        "%(default)s)")
    parser.add_argument("--profile", default="cpu", help="task profile (default: cpu, sized "
                        "for a CPU; paper: the paper's model)")
    parser.add_argument("--workers", type=int, default=4, help="workers n (default 4)")
    parser.add_argument("--seeds", default="0", metavar="S1,S2,...", help="seeds, "
                        "comma-separated (default 0); 3 or more give the table a range")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--budget-s", type=float, metavar="S", help="simulated seconds each "
                        "method may run (default: D-SGD's time for --budget-iters)")
    budget.add_argument("--budget-iters", type=int, metavar="N", help="size the budget as "
                        "D-SGD's simulated time for N iterations (default: the profile's "
                        "max_iters)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="any `decobench run` option for every run (repeatable), e.g. "
                        "eval_every=20 or lr=0.05 (YAML values)")
    parser.add_argument("--data-root", metavar="DIR", help="existing copy of the task's data "
                        "set (no download)")
    parser.add_argument("--out", metavar="DIR", help="results folder (default "
                        "results/versus-TASK-TRACE)")
    parser.add_argument("--jobs", "-j", type=int, help="parallel runs (default: one per core)")
    parser.add_argument("--no-wandb", action="store_true", help="do not log to Weights & Biases")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=cmd_versus)


def _listed(text: str, flag: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise DecobenchError(f"{flag} is empty: give at least one value")
    if len(set(items)) != len(items):
        raise DecobenchError(f"{flag} {text!r} names a value twice")
    return items


def _options(items: list[str]) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise DecobenchError(f"--option {item!r}: expected KEY=VALUE, e.g. eval_every=20")
        out[key.strip().replace("-", "_")] = yaml.safe_load(value)
    return out


def suite_data(args: argparse.Namespace, budget_s: float | None = None,
               max_iters: int | None = None) -> dict[str, Any]:
    """The one-experiment suite of a ``versus`` command (budget fields when known)."""
    methods = _listed(args.methods, "--methods")
    try:
        seeds = [int(s) for s in _listed(args.seeds, "--seeds")]
    except ValueError:
        raise DecobenchError(f"--seeds {args.seeds!r}: expected integers, e.g. 0,1,2") from None
    condition = Path(args.trace).stem
    options = {"profile": args.profile} | _options(args.option)
    for reserved in ("max_iters", "max_sim_time", "target", "trace", "task", "method",
                     "workers", "seed"):
        if reserved in options:
            raise DecobenchError(f"--option {reserved}=...: versus sets {reserved} itself; "
                                 "use its own flag (--budget-s, --target, --trace, ...)")
    experiment: dict[str, Any] = {
        "name": "versus", "role": "other", "tasks": [args.task], "conditions": [condition],
        "methods": methods, "workers": [args.workers], "seeds": seeds, "target": args.target,
        "options": options}
    if budget_s is not None:
        experiment |= {"max_sim_time": budget_s, "max_iters": max_iters}
    return {"name": "versus",
            "description": f"{', '.join(methods)} on {args.trace} ({args.task}), the same "
                           "simulated-time budget for each (decobench versus)",
            "conditions": {condition: {"trace": args.trace}},
            "experiments": [experiment]}


def fair_budget(run: Any, iterations: int | None) -> tuple[float, str]:
    """(budget in simulated s, how it was chosen) for a prepared run of the suite's one
    condition: D-SGD's simulated time for ``iterations`` (default: the profile's
    ``max_iters``) on the trace as the run's model sees it."""
    from decobench.clock.budget import dense_time_budget
    from decobench.tasks.base import parameter_count

    d = parameter_count(run.task, run.profile)
    n = iterations or run.max_iters
    trace = run.condition.trace_for(d, run.compute_time_s)
    budget = dense_time_budget(trace, d, run.compute_time_s, n, topology=run.config.topology,
                               workers=run.config.workers, transport=run.transport)
    source = "--budget-iters" if iterations else f"profile {run.profile.name}'s max_iters"
    return budget, f"D-SGD's simulated time for {n} iterations on this trace ({source})"


def cmd_versus(args: argparse.Namespace) -> int:
    from decobench.clock.budget import iterations_within
    from decobench.reports.build import write_report
    from decobench.reports.render import TableBlock, to_markdown
    from decobench.reports.runs import load_runs
    from decobench.reports.tables import Table, budget_warnings, ttt_table
    from decobench.runs.runner import prepare
    from decobench.sweeps.suite import expand_cells, parse_suite
    from decobench.sweeps.sweep import SweepInterrupted, sweep

    if args.budget_s is not None and not args.budget_s > 0:
        raise DecobenchError(f"--budget-s {args.budget_s:g} must be > 0 simulated seconds")
    if args.budget_iters is not None and args.budget_iters < 1:
        raise DecobenchError(f"--budget-iters {args.budget_iters} must be >= 1")
    out = check_output_dir(Path(args.out) if args.out else
                           Path("results") / f"versus-{args.task}-{Path(args.trace).stem}",
                           "--out")
    data_roots = {args.task: args.data_root} if args.data_root else {}
    suite = parse_suite(suite_data(args), "versus")
    runs = [prepare(cell.config) for cell in expand_cells(suite, out / "traces", data_roots)]
    if any(run.compute_time_s is None for run in runs):
        raise DecobenchError("a measured compute time (compute_time=measured) is not known "
                             "before the runs, so the budget cannot be sized from it: drop "
                             "it, or give the budget with --budget-s")
    compute_s = min(run.compute_time_s for run in runs)
    if args.budget_s is not None:
        budget_s, how = args.budget_s, "--budget-s"
    else:
        budget_s, how = fair_budget(runs[0], args.budget_iters)
    cap = iterations_within(budget_s, compute_s)
    data = suite_data(args, budget_s, cap)
    suite = parse_suite(data, "versus")
    experiment = suite.experiments[0]
    print(f"versus: {len(experiment.methods)} methods x {len(experiment.seeds)} seed(s), "
          f"each with {budget_s:.2f} simulated s ({how}) and at most {cap} iterations (an "
          f"iteration costs at least T = {compute_s:g} s, so the cap never comes first) "
          f"-> {out}", file=sys.stderr)
    try:
        sweep(suite, out, jobs=args.jobs, data_roots=data_roots, wandb=not args.no_wandb,
              show_progress=not args.no_progress)
    except SweepInterrupted as stop:
        print(f"decobench: interrupted: {stop.finished} of {stop.total} runs finished; resume "
              f"with the same command: {shlex.join(['decobench', *sys.argv[1:]])}",
              file=sys.stderr)
        return 130
    finished = load_runs(out).runs
    table = ttt_table(finished)
    speedups = tuple(c for c in table.columns if c.startswith("speed-up over"))
    shown = ("label", "seeds reached", "median TTT (s)", "range (s)", "median iterations",
             "not reached", *speedups)
    print(to_markdown([TableBlock(Table(table.name, f"Time to target: {args.task} on "
                                        f"{args.trace}", shown, table.rows, note=table.note))]))
    for line in budget_warnings(finished):
        print(f"decobench: warning: {line}", file=sys.stderr)
    report = write_report(out)
    print(f"report: {report.markdown}", file=sys.stderr)
    return 0
