"""Time-to-target table with speed-ups over D-SGD and over CocktailSGD (deco-sgd.md §6).

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

REFERENCES = ("d-sgd", "cocktail-sgd")
"""The methods every other is compared with: the paper's D-SGD and its best static strategy."""


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
    """Markdown: one section per (task, trace, workers, seed), one row per method, with a
    speed-up column for each reference method that has a run in the section."""
    groups: dict[tuple, list[dict]] = {}
    for s in summaries:
        groups.setdefault((s["task"], s["trace"], s["workers"], s["seed"], s["target"]),
                          []).append(s)
    lines = []
    for (task, trace, workers, seed, target), runs in sorted(groups.items(), key=str):
        references = [(name, next(r for r in runs if r["method"] == name))
                      for name in REFERENCES if any(r["method"] == name for r in runs)]
        lines += [f"### {task} on {trace}, {workers} workers, seed {seed}, target "
                  f"{runs[0]['metric_name']} {target}", "",
                  "| method | status | time to target (s) | iterations to target | "
                  "final metric | bits sent / worker | bubble fraction |"
                  + "".join(f" speed-up over {name} |" for name, _ in references),
                  "|---|---|---|---|---|---|---|" + "---|" * len(references)]
        if not references:
            lines.append("(no D-SGD or CocktailSGD run in this group: no speed-ups)")
        for r in sorted(runs, key=lambda r: r["method"]):
            final = "n/a" if r["final_metric"] is None else f"{r['final_metric']:.4f}"
            lines.append(f"| {r['method']} | {r['status']} | {_ttt(r)} | "
                         f"{r['iters_to_target'] or '-'} | {final} | {r['bits_sent']:.4g} | "
                         f"{r['bubble_fraction']:.3f} |"
                         + "".join(f" {speedup(r, ref)} |" for _, ref in references))
        lines.append("")
    return "\n".join(lines)


def write_report(results_dir: str | Path) -> tuple[Path, str]:
    summaries = find_runs(results_dir)
    text = ("# decobench: time to target\n\nTimes are simulated seconds; evaluation is not "
            "charged. Speed-up over B = TTT(B) / TTT(method) for B = D-SGD and CocktailSGD; "
            "'>=' marks a lower bound where B did not reach the target within its budget.\n\n" + speedup_table(summaries))
    path = Path(results_dir) / "report.md"
    write_text_atomic(path, text)
    return path, text
