"""What a suite costs, computed from documented per-iteration times, each on the machine it
was measured on: one GPU for the paper-size models, a 2-core CPU for the CNNs (an upper bound
for a GPU) (``decobench sweep SUITE --dry-run`` prints it; README "GPU tier").

The simulated backend computes the n workers' gradients in one process, so one iteration of
a run takes about n × t, t being one worker's forward/backward on the device, and an
evaluation takes e. A run stops at its target or its budget; the estimate is an **upper
bound**: every run uses its whole iteration budget ``max_iters``, and evaluates every E
iterations plus, near each target it tracks, at most two evaluation intervals at the fine
cadence E_F (``2·E/E_F`` more evaluations per target; with ``--ttt-resolution`` the cadence
may be every iteration, so ``2·E``). Method overheads (Top-k over d
values, the planner) are not counted; they are milliseconds per iteration, except at the
GPT-2 ``mid`` profile's 27.4M parameters, whose entry is the measured loop time.

The per-iteration times and their sources are in :data:`STEP_TIMES`; a (task, profile)
without one is reported as not estimated, never guessed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from decobench.runs.config import RunConfig


@dataclass(frozen=True)
class StepTime:
    """One worker's forward/backward ``step_s`` and one evaluation ``eval_s`` on ``device``."""

    step_s: float
    eval_s: float
    device: str
    source: str


STEP_TIMES: dict[tuple[str, str], StepTime] = {
    ("vit-imagenet", "paper"): StepTime(
        0.260, 6.8, "one NVIDIA H200 (TensorFloat-32, --matmul-precision auto)",
        "step: measured, decobench run --device cuda on one H200 (torch 2.11, 2026-11-26): "
        "ViT-B/16 from scratch, 4 workers x 128 images at 224x224 (the ImageNet stand-in "
        "resized: the same compute as ImageNet's images), the auto gradient engine fell back "
        "to one worker at a time (4 x 128 in float32 overflow 141 GB): 1.041 s per iteration "
        "after the fifth, i.e. 0.260 s per worker step (2.02 s per iteration in full float32; "
        "timm's published 0.327 s for a step of 128 on an RTX 3090 with AMP is the profile's "
        "T); evaluation: 10,000 validation images at a third of a training step's time per "
        "image (forward only): 10,000 x 0.260 / 128 / 3 = 6.8 s. Not counted: decoding real "
        "ImageNet JPEGs, which this process does itself (512 per iteration)"),
    ("gpt2-wikitext", "paper"): StepTime(
        0.146, 1.1, "one NVIDIA H200 (TensorFloat-32, --matmul-precision auto)",
        "step: measured, decobench run --device cuda on one H200 (torch 2.11, 2026-11-26): "
        "GPT-2 small (124M) from scratch, 4 workers x 12 x 1024 tokens of WikiText-2, one "
        "worker at a time (the auto engine's fall-back): 0.583 s per iteration after the "
        "fifth, i.e. 0.146 s per worker step (1.36 s per iteration in full float32; the "
        "profile's T, 0.079 s, is an A100 at 40% model-FLOPs utilisation with 6N FLOPs per "
        "token); evaluation: WikiText-103's test split, about 280 blocks of 1024 tokens, at a "
        "third of a training step's time per block: 280 x 0.146 / 12 / 3 = 1.1 s. `make "
        "gpu-check` on one H200 (torch 2.11, 2026-11-28) measured 0.126 s (D-SGD) and 0.128 s "
        "(DeCo-SGD) per worker step and 1.30-1.34 s per evaluation of the WikiText-2 slice's "
        "test split in the sweep's own loop, so these figures stay an upper bound"),
    ("gpt2-wikitext", "mid"): StepTime(
        1.75, 7.3, "a 2-core CPU (2 threads)",
        "measured in suite gpt2-stability on an idle 2-core VM (2026-11-28): DeCo-SGD 7.0 s "
        "per iteration of 4 workers, so 1.75 s per worker, D-SGD 5.5 s (1.38 s); the "
        "profile's T, one forward/backward of 4 x 256 tokens at 27.4M parameters, is 1.06 s, "
        "and the rest is the loop's work on 27.4M-value tensors (Top-k, error feedback, "
        "averaging), which is not milliseconds at this size; evaluation: its 64 test "
        "blocks, 16 per forward pass, 1.76-1.88 s per pass measured = 7.3 s"),
    ("cnn-fmnist", "paper"): StepTime(
        0.016, 0.5, "a 2-core CPU (an upper bound for a GPU)",
        "the cnn-fmnist cpu profile's measured T (the same CNN and batch); evaluation: the "
        "measured 0.5-1.2 s for 10,000 test images' forward on 2 cores"),
    ("cnn-cifar10", "paper"): StepTime(
        0.018, 0.6, "a 2-core CPU (an upper bound for a GPU)",
        "the cnn-cifar10 cpu profile's measured T (the same CNN and batch); evaluation "
        "assumed like cnn-fmnist's"),
}
"""Documented per-iteration times, by (task, profile)."""


@dataclass(frozen=True)
class RunCost:
    config: RunConfig
    iterations: int
    evaluations: int
    seconds: float | None


@dataclass(frozen=True)
class SuiteCost:
    runs: tuple[RunCost, ...]

    @property
    def seconds(self) -> float:
        """Upper bound over the runs that have a documented step time."""
        return sum(r.seconds for r in self.runs if r.seconds is not None)

    @property
    def missing(self) -> list[str]:
        """(task, profile) pairs without a documented step time."""
        return sorted({f"{r.config.task}/{r.config.profile}" for r in self.runs
                       if r.seconds is None})

    def by_task(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for r in self.runs:
            if r.seconds is not None:
                out[r.config.task] = out.get(r.config.task, 0.0) + r.seconds
        return dict(sorted(out.items()))


def run_cost(config: RunConfig, max_iters: int, eval_every: int) -> RunCost:
    """The upper bound of one run (module docstring)."""
    targets = (1 if config.target is not None else 0) + len(config.milestones)
    if config.ttt_resolution is not None:
        fine = 2 * eval_every * targets           # a cadence as fine as every iteration
    elif config.fine_eval_every:
        fine = 2 * math.ceil(eval_every / config.fine_eval_every) * targets
    else:
        fine = 0
    evaluations = math.ceil(max_iters / eval_every) + fine
    step = STEP_TIMES.get((config.task, config.profile))
    seconds = (None if step is None
               else max_iters * config.workers * step.step_s + evaluations * step.eval_s)
    return RunCost(config, max_iters, evaluations, seconds)


def suite_cost(configs: Sequence[RunConfig]) -> SuiteCost:
    """Upper bounds of the runs of a suite; budgets and cadences default to the profiles'."""
    from decobench.tasks import get_task

    out = []
    for config in configs:
        profile = get_task(config.task).profile(config.profile)
        out.append(run_cost(config, config.max_iters or profile.max_iters,
                            config.eval_every or profile.eval_every))
    return SuiteCost(tuple(out))


def describe(cost: SuiteCost) -> str:
    """Lines for ``--dry-run``: the bound, on the machine each time was measured on (a
    GPU's, or a CPU's where that is all the task has), per task, and what it assumes."""
    if not cost.runs:
        return "cost: no runs"
    counted = [r for r in cost.runs if r.seconds is not None]
    devices: dict[str, float] = {}
    for r in counted:
        device = STEP_TIMES[(r.config.task, r.config.profile)].device
        devices[device] = devices.get(device, 0.0) + (r.seconds or 0.0)
    where = "; ".join(f"{seconds / 3600:.1f} h at the times of {device}"
                      for device, seconds in devices.items())
    lines = [f"cost, upper bound (every run uses its whole budget): {cost.seconds / 3600:.1f} h "
             f"for {len(counted)} of {len(cost.runs)} runs" + (f" ({where})" if where else "")]
    for task, seconds in cost.by_task().items():
        lines.append(f"  {task}: {seconds / 3600:.1f} h")
    for (task, profile), step in STEP_TIMES.items():
        if any(r.config.task == task and r.config.profile == profile for r in counted):
            lines.append(f"  {task}/{profile}: {step.step_s:g} s per worker-iteration, "
                         f"{step.eval_s:g} s per evaluation on {step.device} ({step.source})")
    if cost.missing:
        lines.append("  not estimated (no documented step time): " + ", ".join(cost.missing))
    return "\n".join(lines)


def measured_step_time(rows: Sequence[dict], workers: int, skip: int = 5) -> dict[str, float]:
    """One worker's step and one evaluation as a run's ``metrics.jsonl`` (logged every
    iteration) measured them, in the units of :class:`StepTime`: ``step_s`` = the median
    wall time of an iteration without an evaluation after the first ``skip`` (start-up,
    kernel selection) divided by the n workers the simulated backend computes in turn;
    ``eval_s`` = the median extra time of an iteration with one (NaN without any);
    ``iteration_s`` = that median before dividing."""
    times = [(int(r["iteration"]), float(r["wall_time_s"]), "metric" in r) for r in rows
             if "wall_time_s" in r and "iteration" in r]
    steps, evals = [], []
    for (k0, t0, _), (k1, t1, evaluated) in zip(times, times[1:], strict=False):
        if k1 == k0 + 1 and k1 > skip:
            (evals if evaluated else steps).append(t1 - t0)
    if not steps:
        raise ValueError(f"no iteration after the first {skip} logged one by one")
    iteration = statistics.median(steps)
    extra = statistics.median(evals) - iteration if evals else math.nan
    return {"iteration_s": iteration, "step_s": iteration / workers, "eval_s": extra,
            "iterations": float(len(steps))}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m decobench.sweeps.cost RESULTS``: each finished run's measured step and
    evaluation times (:func:`measured_step_time`) and loss curve, written to
    ``RESULTS/step_times.json`` and ``RESULTS/curves.csv`` (the GPU check of ``make
    gpu-check``, docs/suites.md)."""
    import argparse
    import csv
    import io
    import json
    from pathlib import Path

    from decobench.atomicio import write_text_atomic
    from decobench.runs.rundir import read_config, read_metrics

    parser = argparse.ArgumentParser(prog="python -m decobench.sweeps.cost",
                                     description=main.__doc__)
    parser.add_argument("results", type=Path, help="a results folder of decobench sweep")
    args = parser.parse_args(argv)
    times: dict[str, dict] = {}
    curves = io.StringIO()
    writer = csv.writer(curves, lineterminator="\n")
    writer.writerow(["run", "label", "iteration", "loss", "metric", "delta", "tau"])
    for folder in sorted((args.results / "runs").glob("*/")):
        if not (folder / "summary.json").is_file():
            continue
        config = read_config(folder)
        rows = read_metrics(folder)
        try:
            measured = measured_step_time(rows, int(config["workers"]))
        except ValueError as exc:
            print(f"{folder.name}: not measured ({exc})")
            continue
        times[folder.name] = {**measured, "label": config.get("label"),
                              "device": config.get("gradients", {}).get("device"),
                              "task": config["task"], "profile": config["profile"]}
        print(f"{folder.name}: {measured['iteration_s']:.3f} s per iteration, "
              f"{measured['step_s']:.3f} s per worker step, {measured['eval_s']:.2f} s per "
              "evaluation")
        for r in rows:
            writer.writerow([folder.name, config.get("label"), r.get("iteration"),
                             r.get("loss"), r.get("metric", ""), r.get("delta"), r.get("tau")])
    write_text_atomic(args.results / "step_times.json", json.dumps(times, indent=2) + "\n")
    write_text_atomic(args.results / "curves.csv", curves.getvalue())
    return 0 if times else 1


if __name__ == "__main__":
    raise SystemExit(main())
