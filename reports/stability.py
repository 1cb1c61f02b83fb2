"""The largest stable step of a γ-ramp run (issue 43; docs/tasks/gpt2-wikitext.md "Stability
at 124M"; the ramps of the ``gpt2-stability`` suite).

A ramp run raises γ linearly every iteration (``schedule: warmup`` over the whole budget).
Its training loss first falls, then, past some step, leaves its trend for good. That step is
read from the logged loss and γ:

- the loss is smoothed by a trailing median of ``window`` iterations (robust to one-off
  spikes), and a non-finite loss counts as +∞;
- the run has left its trend at the first iteration k* after which the smoothed loss stays
  more than ``margin`` nats above its running minimum to the end of the run;
- the largest stable step is γ at iteration k* − 1, the last one still on trend. A run that
  never leaves its trend reports its last γ as a lower bound (``censored``).

A ramp stopped by ``--divergence-loss`` (gpt2-stability's ramps stop at 11 nats) ends on a loss
above the ceiling, so "to the end of the run" means to that stop: γ only grows on a ramp.

The window and margin are this project's reading, named here; with window 5 the trailing
median lags a sustained rise by 2 iterations, which at the suite's ramp rate (0.0005 per
iteration) is 0.001 in γ.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from decobench.methods.optimizer import OptimizerConfig, learning_rate
from decobench.methods.rules import UpdateRules
from decobench.reports.runs import Run, as_float
from decobench.reports.tables import Table, group

WINDOW = 5
"""Iterations in the trailing median of the loss."""
MARGIN = 0.5
"""Nats above the running minimum of the smoothed loss that count as off the trend."""


@dataclass(frozen=True)
class StableStep:
    """``gamma``: the largest stable step (a lower bound when ``censored``); ``left_at``: the
    iteration k* at which the run left its trend (None when it never did)."""

    gamma: float
    censored: bool
    left_at: int | None


def smoothed(losses: Sequence[float], window: int = WINDOW) -> list[float]:
    """Trailing median of the last ``window`` losses (fewer at the start); non-finite = +∞."""
    clean = [x if math.isfinite(x) else math.inf for x in losses]
    return [statistics.median(clean[max(0, i - window + 1):i + 1]) for i in range(len(clean))]


def largest_stable_step(iterations: Sequence[int], losses: Sequence[float],
                        steps: Sequence[float], window: int = WINDOW,
                        margin: float = MARGIN) -> StableStep:
    """The largest stable γ of a ramp run (module docstring) from its per-iteration
    ``losses`` and the ``steps`` γ_k of the same ``iterations``."""
    if not (len(iterations) == len(losses) == len(steps)) or not iterations:
        raise ValueError("iterations, losses and steps must be equally long and not empty")
    curve = smoothed(losses, window)
    off = [False] * len(curve)
    best = math.inf
    for i, value in enumerate(curve):
        off[i] = value > best + margin
        best = min(best, value)
    first = len(off)
    while first > 0 and off[first - 1]:
        first -= 1
    if first == len(off):
        return StableStep(steps[-1], True, None)
    return StableStep(steps[max(0, first - 1)], False, iterations[first])


def is_ramp(run: Run) -> bool:
    """Whether the run raised γ over its whole budget: a linear warm-up (``schedule:
    warmup``) at least as long as its iterations."""
    config = run.config
    iterations = int(config.get("max_iters") or 0)
    return (config.get("schedule") == "warmup" and iterations > 0
            and int(config.get("warmup_iters") or 0) >= iterations)


def ramp_steps(run: Run, iterations: Sequence[int]) -> list[float]:
    """γ of each logged iteration of a ramp run, from its resolved optimizer settings
    (``config.yaml``): row k (1-based) ran at γ of iteration k − 1."""
    config = run.config
    optimizer = OptimizerConfig(lr=float(config["lr"]), schedule=config["schedule"],
                                warmup_iters=int(config["warmup_iters"]))
    return [learning_rate(optimizer, k - 1) for k in iterations]


def loss_rows(run: Run) -> tuple[list[int], list[float]]:
    """The iterations and training losses a run logged (NaN where a loss is not a number)."""
    rows = [r for r in run.metrics if "loss" in r and "iteration" in r]
    return ([int(r["iteration"]) for r in rows],
            [v if (v := as_float(r["loss"])) is not None else math.nan for r in rows])


def run_stable_step(run: Run) -> StableStep:
    """:func:`largest_stable_step` of a ramp run's logged losses."""
    iterations, losses = loss_rows(run)
    return largest_stable_step(iterations, losses, ramp_steps(run, iterations))


def evaluations(run: Run) -> list[tuple[int, float]]:
    """The (iteration, metric) of each evaluation a run logged, in order."""
    return [(int(r["iteration"]), v) for r in run.metrics
            if "iteration" in r and (v := as_float(r.get("metric"))) is not None]


def iterations_to(curve: Sequence[tuple[int, float]], perplexity: float) -> float | None:
    """The iteration at which a perplexity ``curve`` of (iteration, perplexity) evaluations
    first reaches ``perplexity`` (at or below), read between the two evaluations around the
    crossing with the logarithm (the mean loss) linear in the iteration; the first
    evaluation's iteration when it is there already, or when the one before it is not finite
    (nothing to read between); None when the curve never reaches it. This is the reading the
    curves of issue 43 are compared by (docs/results/gpt2-stability.md, "log-linear")."""
    found = _crossing(curve, perplexity)
    return None if found is None else found[0]


def _crossing(curve: Sequence[tuple[int, float]], perplexity: float
              ) -> tuple[float, bool] | None:
    """:func:`iterations_to`'s iteration, and whether it is only a bound (reached at or
    before that evaluation: nothing finite before it to read between)."""
    before: tuple[int, float] | None = None
    for iteration, value in curve:
        if value <= perplexity:
            if before is None or not math.isfinite(before[1]):
                return float(iteration), True
            start, high = before
            part = (math.log(high) - math.log(perplexity)) / (math.log(high) - math.log(value))
            return start + part * (iteration - start), False
        before = (iteration, value)
    return None


def ramp_table(runs: Sequence[Run]) -> Table:
    """Per ramp run: its update rules, momentum, the largest stable γ and where it left its
    trend."""
    rows = []
    for (task, condition, label), rs in group([r for r in runs if is_ramp(r)],
                                              lambda r: (r.task, r.condition, r.label)).items():
        for run in rs:
            found = run_stable_step(run)
            rules = UpdateRules(**run.config.get("update_rules", {}))
            rows.append({
                "task": task, "condition": condition, "label": label,
                "seed": str(run.seed), "update rules": rules.describe(),
                "momentum": f"{float(run.config.get('momentum') or 0):g}",
                "ramp": f"0 → {float(run.config['lr']):g} over {run.config['max_iters']}",
                "largest stable γ": f"{'≥ ' if found.censored else ''}{found.gamma:.4g}",
                "left its trend at": "-" if found.left_at is None else str(found.left_at),
                "gamma": found.gamma, "censored": found.censored})
    return Table("stability", "Largest stable step of each γ-ramp run",
                 ("task", "condition", "label", "seed", "update rules", "momentum", "ramp",
                  "largest stable γ", "left its trend at"), tuple(rows),
                 ("gamma", "censored"),
                 note=f"The training loss, smoothed by a trailing median of {WINDOW} "
                 f"iterations, leaves its trend for good where it stays more than {MARGIN:g} "
                 "nats above its running minimum to the end of the run (a non-finite loss "
                 "counts as above); the largest stable γ is the step of the iteration before. "
                 "≥: the run never left its trend (reports/stability.py). With momentum μ the "
                 "step taken is about γ/(1 − μ).")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m decobench.reports.stability RESULTS --reference LABEL --at N``: the
    perplexity the reference curve (a run that is not a ramp) reached at its evaluation of
    iteration N, and every other curve's iterations to it (:func:`iterations_to`) and their
    ratio to N: issue 43 point 3's criterion (within 1.5x of D-SGD's iterations to the
    perplexity D-SGD reaches in 1,000)."""
    import argparse

    from decobench.reports.runs import load_runs

    parser = argparse.ArgumentParser(prog="python -m decobench.reports.stability",
                                     description=main.__doc__)
    parser.add_argument("results", help="a results folder of decobench sweep (or a copy of "
                        "its runs/, as docs/results/gpt2-stability)")
    parser.add_argument("--reference", required=True, metavar="LABEL",
                        help="the label of the reference curve, e.g. d-sgd+clip1")
    parser.add_argument("--at", required=True, type=int, metavar="N",
                        help="an iteration the reference curve evaluated at, e.g. 1000")
    args = parser.parse_args(None if argv is None else list(argv))
    curves = [r for r in load_runs(args.results).runs if not is_ramp(r)]
    references = [r for r in curves if r.label == args.reference]
    if len(references) != 1:
        labels = ", ".join(sorted({r.label for r in curves})) or "none"
        parser.error(f"--reference {args.reference}: {len(references)} curve runs have that "
                     f"label (curve labels here: {labels})")
    reference = references[0]
    evaluated = dict(evaluations(reference))
    reached = evaluated.get(args.at)
    if reached is None or not math.isfinite(reached):
        parser.error(f"--at {args.at}: {args.reference} has no finite evaluation at iteration "
                     f"{args.at} (its evaluations: {', '.join(map(str, evaluated))})")
    print(f"{args.reference} at iteration {args.at}: perplexity {reached:,.1f}; each other "
          "curve's iterations to it (log-linear between evaluations; by: at or before its "
          "first evaluation)")
    for run in sorted(curves, key=lambda r: r.label):
        if run is reference or (run.task, run.condition) != (reference.task,
                                                              reference.condition):
            continue
        curve = evaluations(run)
        crossing = _crossing(curve, reached)
        if crossing is None:
            last = curve[-1][0] if curve else 0
            print(f"  {run.label}: not reached by iteration {last} (over {last / args.at:.2f}x)")
        else:
            found, bound = crossing
            where = f"by iteration {found:.0f}" if bound else f"at iteration {found:.1f}"
            print(f"  {run.label}: {where} ({found / args.at:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
