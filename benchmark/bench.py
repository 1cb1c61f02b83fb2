"""``make bench``: performance figures written to a JSON file (no timed asserts anywhere).

1. Gradient engines (``gradient_engines``): wall time of the n workers' per-worker
   gradients with each engine of :mod:`decobench.gradients` (``grouped``, ``vmap``) on the
   cpu-profile CNN, ViT and GPT-2 for n = 1, 4, 8, 16, against one plain PyTorch
   forward/backward over the same n·B samples (which yields only the summed gradient).
   ``ratio_grouped`` and ``ratio_vmap`` are the figures.
2. Top-k + error feedback per iteration for d = 1e6, 1e7, 1e8 at δ = 0.01 (one worker),
   against ``torch.topk`` alone on the same vector.
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
from decobench.compressors import TopKCompressor
from decobench.error_feedback import ErrorFeedback
from decobench.flat import FlatLayout
from decobench.gradients import WorkerGradients
from decobench.wire import topk_count


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
    """Per-worker gradients of n workers (each engine of :mod:`decobench.gradients`)
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
        subprocess.run([sys.executable, "-m", "decobench.cli", *args], env=env,
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decobench.bench", description=__doc__,
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
    args = parser.parse_args(argv)
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    result = {
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "torch": str(torch.__version__), "threads": torch.get_num_threads()},
        "gradient_engines": bench_engines(tuple(args.tasks.split(",")),
                                          [int(n) for n in args.workers.split(",")],
                                          args.repeats, args.batch),
        "topk_error_feedback": bench_topk(sizes, 0.01, max(3, args.repeats // 2)),
        "cli_startup": bench_cli(max(3, args.repeats // 2)),
    }
    write_text_atomic(Path(args.out), json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
