"""``make bench``: performance figures written to a JSON file (no timed asserts anywhere).

1. Gradient engines (``gradient_engines``): wall time of the n workers' per-worker
   gradients with each engine of :mod:`decobench.training.gradients` (``grouped``, ``vmap``) on the
   cpu-profile CNN, ViT and GPT-2 for n = 1, 4, 8, 16, against one plain PyTorch
   forward/backward over the same n·B samples (which yields only the summed gradient).
   ``ratio_grouped`` and ``ratio_vmap`` are the figures. The process keeps freed memory
   as training does (:mod:`decobench.training.allocator`; ``machine.allocator`` says how).
2. Top-k + error feedback per iteration for d = 1e6, 1e7, 1e8 at δ = 0.01 (one worker),
   against ``torch.topk`` alone on the same vector.
3. Trajectory reuse (``sweep_reuse``): wall time of one fixed grid sweep (D-SGD, a static
   DD-EF-SGD, DGA and DeCo-SGD on the CNN, 6 conditions, 2 seeds: 48 runs) with trajectory
   reuse and with ``--no-reuse``, and whether both give the same results.
4. CLI start-up times.
5. The emulated backend's wire codec (``wire_codec``): encode + decode of a Top-k message
   of the cpu-profile CNN (d = 454,922) at δ = 0.01 (packed format) and 0.1 (mask format),
   the figure ``make test`` used to assert below 0.5 s (tests/test_emulated_codec.py now
   checks that the work is vectorised by counting Python lines, which load cannot move).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from decobench.atomicio import write_text_atomic
from decobench.clock.wire import topk_count
from decobench.compression.compressors import TopKCompressor
from decobench.compression.error_feedback import ErrorFeedback
from decobench.training.allocator import keep_freed_memory
from decobench.training.flat import FlatLayout
from decobench.training.gradients import WorkerGradients


def _time_paired(plain: Callable[[], object], fn: Callable[[], object], repeats: int,
                 warmup: int = 2) -> tuple[dict[str, float], dict[str, float]]:
    """:func:`_time` of ``plain`` and ``fn`` in alternating order (plain first in even
    rounds, second in odd ones): on CPU a call's time depends on what ran before it (the
    allocator's state, page faults on fresh buffers), so neither gets a fixed advantage."""
    for _ in range(warmup):
        plain()
        fn()
    samples: tuple[list[float], list[float]] = ([], [])
    for r in range(repeats):
        for which in ((0, 1) if r % 2 == 0 else (1, 0)):
            t0 = time.perf_counter()
            (plain, fn)[which]()
            samples[which].append(time.perf_counter() - t0)
    a, b = ({"median_s": statistics.median(t), "min_s": min(t), "repeats": repeats}
            for t in samples)
    return a, b


def _time(fn: Callable[[], object], repeats: int, warmup: int = 2) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(samples), "min_s": min(samples),
            "repeats": repeats}


ENGINE_TASKS = ("cnn-fmnist", "vit-imagenet", "gpt2-wikitext")
"""Tasks whose cpu-profile models the gradient-engine benchmark times."""


def _probe_batch(task: Any, model: torch.nn.Module, n: int, batch: int,
                 gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random inputs ``[n, B, ...]`` and targets in the task's real shapes."""
    if task.name == "gpt2-wikitext":
        vocab, context = model.gpt.config.vocab_size, model.gpt.config.n_positions
        tokens = torch.randint(0, vocab, (n, batch, context + 1), generator=gen)
        return tokens[..., :-1], tokens[..., 1:]
    if task.name == "vit-imagenet":
        size = model.patch_embed.img_size
        return (torch.randn(n, batch, 3, *size, generator=gen),
                torch.randint(0, model.num_classes, (n, batch), generator=gen))
    return (torch.randn(n, batch, 1, 28, 28, generator=gen),
            torch.randint(0, 10, (n, batch), generator=gen))


def bench_engines(tasks: tuple[str, ...], workers: list[int], repeats: int,
                  batch: int | None = None) -> list[dict]:
    """Per-worker gradients of n workers (each engine of :mod:`decobench.training.gradients`)
    against one plain forward/backward over the same n·B samples (which yields only the
    summed gradient): ``ratio`` = engine time / plain time, per task (cpu profile) and n."""
    from decobench.tasks import get_task
    from decobench.tasks.base import build_seeded_model

    results = []
    for name in tasks:
        task = get_task(name)
        profile = task.profiles["cpu"]
        model = build_seeded_model(task, profile, 0)
        layout = FlatLayout.of(model)
        params = layout.flatten(model)
        b = batch or profile.batch_size
        for n in workers:
            x, y = _probe_batch(task, model, n, b, torch.Generator().manual_seed(n))
            flat_x, flat_y = x.reshape(n * b, *x.shape[2:]), y.reshape(n * b, *y.shape[2:])

            def plain(model=model, task=task, flat_x=flat_x, flat_y=flat_y) -> None:
                model.zero_grad()
                task.loss(model(flat_x), flat_y).backward()

            row: dict[str, Any] = {"task": name, "profile": "cpu", "workers": n,
                                   "batch_per_worker": b, "parameters": layout.d}
            for engine in ("grouped", "vmap"):
                grads = WorkerGradients(model, layout, task.loss, engine=engine)
                row[f"plain_nB_beside_{engine}"], row[engine] = _time_paired(
                    plain, lambda g=grads, p=params, x=x, y=y: g(p, x, y), repeats)
                row[f"ratio_{engine}"] = (row[engine]["median_s"]
                                          / row[f"plain_nB_beside_{engine}"]["median_s"])
            row["plain_nB"] = row["plain_nB_beside_grouped"]
            results.append(row)
            print(f"{name} n={n} B={b}: plain n·B {row['plain_nB']['median_s'] * 1e3:.1f} ms, "
                  f"grouped {row['grouped']['median_s'] * 1e3:.1f} ms "
                  f"({row['ratio_grouped']:.2f}x), vmap {row['vmap']['median_s'] * 1e3:.1f} ms "
                  f"({row['ratio_vmap']:.2f}x)", flush=True)
    return results


def bench_topk(sizes: list[int], delta: float, repeats: int) -> list[dict]:
    results = []
    gen = torch.Generator().manual_seed(0)
    for d in sizes:
        g = torch.randn(1, d, generator=gen)
        ef = ErrorFeedback(1, d)
        compressor = TopKCompressor()
        k = topk_count(delta, d)
        ours = _time(lambda g=g, ef=ef, c=compressor: ef.step(g, c, delta), repeats,
                     warmup=1)
        ref = _time(lambda g=g, k=k: torch.topk(g.abs(), k, dim=1, sorted=False), repeats,
                    warmup=1)
        results.append({"d": d, "delta": delta, "k": k, "topk_with_error_feedback": ours,
                        "torch_topk_alone": ref,
                        "ratio": ours["median_s"] / ref["median_s"]})
        print(f"d={d:.0e}: Top-k + EF {ours['median_s'] * 1e3:.1f} ms, torch.topk "
              f"{ref['median_s'] * 1e3:.1f} ms (ratio {results[-1]['ratio']:.2f})", flush=True)
        del g, ef
    return results


def bench_codec(repeats: int, d: int = 454_922) -> list[dict]:
    """Encode + decode of a Top-k message of ``d`` coordinates at δ = 0.01 and 0.1."""
    from decobench.compression.codec import decode_sparse, encode_sparse, sparse_format

    x = torch.randn(d, generator=torch.Generator().manual_seed(0))
    results = []
    for delta in (0.01, 0.1):
        k = topk_count(delta, d)
        _, indices = torch.topk(x.abs(), k, sorted=False)
        values = x[indices]
        timing = _time(lambda v=values, i=indices, k=k: decode_sparse(encode_sparse(v, i, d),
                                                                      k, d), repeats)
        results.append({"d": d, "delta": delta, "k": k, "format": sparse_format(k, d),
                        "encode_decode": timing})
        print(f"codec d={d} k={k} ({results[-1]['format']}): encode + decode "
              f"{timing['median_s'] * 1e3:.2f} ms", flush=True)
    return results


CLI_COMMANDS = {
    "decobench --help": ["--help"],
    "decobench run --help": ["run", "--help"],
    "decobench run --method deco-sgd --help": ["run", "--method", "deco-sgd", "--help"],
    "decobench sweep --help": ["sweep", "--help"],
    "decobench plan --help": ["plan", "--help"],
    "decobench trace --help": ["trace", "--help"],
    "decobench data --help": ["data", "--help"],
    "an edge error (run --lr inf)": ["run", "--task", "cnn-fmnist", "--method", "d-sgd",
                                     "--trace", "constant-1gbps-10ms", "--lr", "inf"],
    "an edge error (plan, 1e-300 Mbit/s)": ["plan", "--params", "10", "--compute-ms", "1",
                                            "--bandwidth-mbps", "1e-300", "--latency-ms", "1"],
}
"""Command lines whose start-up time (process start to exit) the benchmark records."""


def bench_cli(repeats: int) -> dict[str, Any]:
    """Seconds from start to exit of each of :data:`CLI_COMMANDS` in a fresh process (the
    median of ``repeats``, the run-parser metadata cache warm), and of ``run --help`` with
    the cache cold (the first command after an install or an edit of a method)."""
    import statistics
    import subprocess
    import sys
    import tempfile

    def once(args: list[str], env: dict[str, str]) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "decobench.cli.main", *args], env=env,
                       capture_output=True, check=False)
        return time.perf_counter() - start

    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "DECOBENCH_CACHE_DIR": cache}
        cold = once(["run", "--help"], env)
        timings = {name: statistics.median(once(args, env) for _ in range(repeats))
                   for name, args in CLI_COMMANDS.items()}
    for name, seconds in timings.items():
        print(f"cli: {name}: {seconds:.3f} s", flush=True)
    print(f"cli: decobench run --help, metadata cache cold: {cold:.3f} s", flush=True)
    return {"median_s": timings, "run_help_cold_cache_s": cold, "repeats": repeats}


REUSE_CONDITIONS = ("aws-virginia-ohio", "aws-oregon-virginia", "aws-oregon-tokyo",
                    "aws-virginia-singapore", "aws-sydney-frankfurt", "wan-200ms-lowbw-varying")
"""The grid of the reuse benchmark: the five measured AWS links and the acceptance WAN."""


def reuse_suite(iterations: int) -> dict[str, Any]:
    """The fixed grid of :func:`bench_reuse`: D-SGD, a static DD-EF-SGD, DGA (automatic D) and
    DeCo-SGD on the CNN, 6 conditions, 2 seeds, 4 workers, every run its whole budget."""
    return {
        "name": "bench-reuse",
        "description": "make bench: 3 network-independent or once-deciding methods and "
                       "DeCo-SGD, 6 conditions, 2 seeds on the CNN",
        "defaults": {"eval_every": 25},
        "conditions": {name: {"trace": name} for name in REUSE_CONDITIONS},
        "experiments": [{
            "name": "grid", "tasks": ["cnn-fmnist"], "conditions": list(REUSE_CONDITIONS),
            "methods": ["d-sgd", {"method": "dd-ef-sgd", "options": {"delta": 0.05, "tau": 2}},
                        "dga", {"method": "deco-sgd", "options": {"deco_interval": 25}}],
            "workers": [4], "seeds": [0, 1], "max_iters": iterations}],
    }


def bench_reuse(fmnist_root: str | None, iterations: int, jobs: int | None) -> dict[str, Any]:
    """Wall time of one sweep of :func:`reuse_suite` with trajectory reuse and without
    (``--no-reuse``), each into a fresh folder, and whether their results are equal
    (metrics and summaries, wall-clock fields and the folder aside)."""
    import tempfile

    from decobench.runs.rundir import read_summary
    from decobench.sweeps.suite import parse_suite
    from decobench.sweeps.sweep import sweep

    suite = parse_suite(reuse_suite(iterations), "bench-reuse")
    roots = {"cnn-fmnist": fmnist_root} if fmnist_root else None
    timings: dict[str, float] = {}
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, reuse in (("without_reuse", False), ("with_reuse", True)):
            out = Path(scratch) / name
            start = time.perf_counter()
            plan = sweep(suite, out, jobs=jobs, data_roots=roots, wandb=False,
                         show_progress=False, reuse=reuse)
            timings[name] = time.perf_counter() - start
            if reuse:
                trained = sum(read_summary(run_dir)["retimed_from"] is None
                              for run_dir in (out / "runs").iterdir())
            results[name] = {}
            for run_dir in sorted((out / "runs").iterdir()):
                summary = read_summary(run_dir)
                for key in ("wall_time_s", "retimed_from", "trace_path"):
                    summary.pop(key)
                rows = [json.loads(line) for line in
                        (run_dir / "metrics.jsonl").read_text().splitlines()]
                for row in rows:
                    row.pop("wall_time_s", None)
                results[name][run_dir.name] = (summary, rows)
    figures = {"runs": len(plan.cells), "trained_with_reuse": trained,
               "iterations_per_run": iterations, "jobs": jobs or os.cpu_count(),
               "seconds_without_reuse": timings["without_reuse"],
               "seconds_with_reuse": timings["with_reuse"],
               "speedup": timings["without_reuse"] / timings["with_reuse"],
               "results_equal": results["with_reuse"] == results["without_reuse"]}
    print(f"reuse: {figures['runs']} runs, {trained} trained with reuse: "
          f"{timings['without_reuse']:.1f} s without, {timings['with_reuse']:.1f} s with "
          f"({figures['speedup']:.2f}x), results equal: {figures['results_equal']}", flush=True)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decobench.cli.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench-results/bench.json", help="JSON file to write")
    parser.add_argument("--repeats", type=int, default=10, help="timed repetitions per case")
    parser.add_argument("--batch", type=int, default=None, help="per-worker batch size "
                        "(default: each task's cpu profile)")
    parser.add_argument("--tasks", default=",".join(ENGINE_TASKS),
                        help="comma-separated tasks for the gradient-engine benchmark")
    parser.add_argument("--workers", default="1,4,8,16",
                        help="comma-separated worker counts n for the gradient-engine benchmark")
    parser.add_argument("--sizes", default="1e6,1e7,1e8",
                        help="comma-separated model sizes d for the Top-k benchmark")
    parser.add_argument("--fmnist-root", default=None, help="Fashion-MNIST folder for the "
                        "reuse benchmark's sweeps (default: download)")
    parser.add_argument("--reuse-iters", type=int, default=150,
                        help="iterations per run of the reuse benchmark's sweeps")
    parser.add_argument("--jobs", type=int, default=None,
                        help="worker processes of the reuse benchmark's sweeps (default: cores)")
    parser.add_argument("--only", default=None, help="comma-separated parts to run: "
                        "gradient_engines, topk_error_feedback, sweep_reuse, cli_startup, wire_codec")
    args = parser.parse_args(argv)
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    parts: dict[str, Callable[[], Any]] = {
        "gradient_engines": lambda: bench_engines(tuple(args.tasks.split(",")),
                                                  [int(n) for n in args.workers.split(",")],
                                                  args.repeats, args.batch),
        "topk_error_feedback": lambda: bench_topk(sizes, 0.01, max(3, args.repeats // 2)),
        "sweep_reuse": lambda: bench_reuse(args.fmnist_root, args.reuse_iters, args.jobs),
        "cli_startup": lambda: bench_cli(max(3, args.repeats // 2)),
        "wire_codec": lambda: bench_codec(args.repeats),
    }
    chosen = list(parts) if args.only is None else args.only.split(",")
    unknown = sorted(set(chosen) - set(parts))
    if unknown:
        parser.error(f"--only: unknown part(s) {', '.join(unknown)}; choose from "
                     f"{', '.join(parts)}")
    result: dict[str, Any] = {
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "torch": str(torch.__version__), "threads": torch.get_num_threads(),
                    "cpus": os.cpu_count(),
                    # as in training (decobench.training.loop.ModelLearner): both sides of each ratio
                    "allocator": keep_freed_memory()}}
    for name in chosen:
        result[name] = parts[name]()
    write_text_atomic(Path(args.out), json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
