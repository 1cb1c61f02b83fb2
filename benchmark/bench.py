"""``make bench``: performance figures written to a JSON file (no timed asserts anywhere).

1. Simulated backend: wall time per iteration of the vectorised n-worker gradient pass
   (``torch.func.vmap`` over workers) for n = 1, 4, 8, against one plain PyTorch
   forward/backward over the same n·B samples (which yields only the summed gradient), and
   against n separate per-worker forward/backward passes. ``ratio_vs_plain`` is the figure.
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
import torch.nn.functional as F

from decobench.atomicio import write_text_atomic
from decobench.compressors import TopKCompressor
from decobench.error_feedback import ErrorFeedback
from decobench.flat import FlatLayout
from decobench.gradients import WorkerGradients
from decobench.tasks.cnn_fmnist import PaperCNN
from decobench.wire import topk_count


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


def _bench_workers(model: torch.nn.Module, grads: WorkerGradients, params: torch.Tensor,
                   n: int, batch: int, repeats: int) -> dict:
    x = torch.randn(n, batch, 1, 28, 28)
    y = torch.randint(0, 10, (n, batch))

    def plain() -> None:
        model.zero_grad()
        F.cross_entropy(model(x.reshape(n * batch, 1, 28, 28)), y.reshape(-1)).backward()

    def per_worker_loop() -> None:
        for i in range(n):
            model.zero_grad()
            F.cross_entropy(model(x[i]), y[i]).backward()

    vec = _time(lambda: grads(params, x, y), repeats)
    ref = _time(plain, repeats)
    loop = _time(per_worker_loop, repeats)
    return {"workers": n, "batch_per_worker": batch, "parameters": params.numel(),
            "vectorised": vec, "plain_loop_nB": ref, "per_worker_loop": loop,
            "ratio_vs_plain": vec["median_s"] / ref["median_s"],
            "ratio_vs_per_worker_loop": vec["median_s"] / loop["median_s"]}


def bench_backend(workers: list[int], batch: int, repeats: int) -> list[dict]:
    torch.manual_seed(0)
    model = PaperCNN()
    layout = FlatLayout.of(model)
    params = layout.flatten(model)
    grads = WorkerGradients(model, layout, F.cross_entropy)
    results = []
    for n in workers:
        r = _bench_workers(model, grads, params, n, batch, repeats)
        results.append(r)
        print(f"n={n}: vectorised {r['vectorised']['median_s'] * 1e3:.1f} ms, plain n·B "
              f"{r['plain_loop_nB']['median_s'] * 1e3:.1f} ms (ratio {r['ratio_vs_plain']:.2f}), "
              f"per-worker loop {r['per_worker_loop']['median_s'] * 1e3:.1f} ms", flush=True)
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
    parser.add_argument("--batch", type=int, default=32, help="per-worker batch size")
    parser.add_argument("--sizes", default="1e6,1e7,1e8",
                        help="comma-separated model sizes d for the Top-k benchmark")
    args = parser.parse_args(argv)
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    result = {
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "torch": str(torch.__version__), "threads": torch.get_num_threads()},
        "simulated_backend": bench_backend([1, 4, 8], args.batch, args.repeats),
        "topk_error_feedback": bench_topk(sizes, 0.01, max(3, args.repeats // 2)),
        "cli_startup": bench_cli(max(3, args.repeats // 2)),
    }
    write_text_atomic(Path(args.out), json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
