"""Time-to-target table with speed-ups over D-SGD (deco-sgd.md §6).

Speed-up of A over B = TTT_B / TTT_A. When B did not reach the target within its budget,
the speed-up is a lower bound ``>= budget_B / TTT_A`` (budget_B = the simulated time B ran);
when A did not reach it, there is no speed-up to give, and the table says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmark.atomicio import write_text_atomic
from benchmark.errors import DecobenchError
from benchmark.rundir import SUMMARY, read_summary

BASELINE = "d-sgd"


@dataclass(frozen=True)
class Speedup:
    value: float | None
    lower_bound: bool

    def __str__(self) -> str:
        if self.value is None:
            return "n/a (not reached)"
        return f"{'>= ' if self.lower_bound else ''}{self.value:.2f}x"


def speedup(method: dict, baseline: dict) -> Speedup:
    """TTT_baseline / TTT_method from two run summaries."""
    if not method["reached"]:
        return Speedup(None, False)
    if baseline["reached"]:
        return Speedup(baseline["time_to_target_s"] / method["time_to_target_s"], False)
    return Speedup(baseline["sim_time_s"] / method["time_to_target_s"], True)


def find_runs(results_dir: str | Path) -> list[dict]:
    root = Path(results_dir)
    if not root.is_dir():
        raise DecobenchError(f"{root}: no such results folder")
    summaries = [read_summary(p.parent) | {"run_dir": str(p.parent)}
                 for p in sorted(root.rglob(SUMMARY))]
    if not summaries:
        raise DecobenchError(f"{root}: no finished runs (no {SUMMARY} below it)")
    return summaries


def _ttt(summary: dict) -> str:
    if summary["reached"]:
        return f"{summary['time_to_target_s']:.2f}"
    return f"not reached ({summary['status']}, ran {summary['sim_time_s']:.1f} s)"


def speedup_table(summaries: list[dict]) -> str:
    """Markdown: one section per (task, trace, workers, seed), one row per method."""
    groups: dict[tuple, list[dict]] = {}
    for s in summaries:
        groups.setdefault((s["task"], s["trace"], s["workers"], s["seed"], s["target"]),
                          []).append(s)
    lines = []
    for (task, trace, workers, seed, target), runs in sorted(groups.items(), key=str):
        baseline = next((r for r in runs if r["method"] == BASELINE), None)
        lines += [f"### {task} on {trace}, {workers} workers, seed {seed}, target "
                  f"{runs[0]['metric_name']} {target}", "",
                  "| method | status | time to target (s) | iterations to target | "
                  "final metric | bits sent / worker | bubble fraction | speed-up over D-SGD |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in sorted(runs, key=lambda r: r["method"]):
            over = str(speedup(r, baseline)) if baseline else "no D-SGD run"
            final = "n/a" if r["final_metric"] is None else f"{r['final_metric']:.4f}"
            lines.append(f"| {r['method']} | {r['status']} | {_ttt(r)} | "
                         f"{r['iters_to_target'] or '-'} | {final} | {r['bits_sent']:.4g} | "
                         f"{r['bubble_fraction']:.3f} | {over} |")
        lines.append("")
    return "\n".join(lines)


def write_report(results_dir: str | Path) -> tuple[Path, str]:
    summaries = find_runs(results_dir)
    text = ("# decobench: time to target\n\nTimes are simulated seconds; evaluation is not "
            "charged. Speed-up = TTT(D-SGD) / TTT(method); '>=' marks a lower bound where "
            "D-SGD did not reach the target within its budget.\n\n" + speedup_table(summaries))
    path = Path(results_dir) / "report.md"
    write_text_atomic(path, text)
    return path, text
