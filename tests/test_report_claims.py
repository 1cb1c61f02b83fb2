"""The claims table and the regime map from synthetic run directories: each claim's figure
is recomputed from the runs' summaries, each verdict follows its rule, a claim without runs
says 'not run' and names suites that hold them (reports/claims.py, reports/regime_map.py)."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from decobench.reports.build import write_report
from decobench.reports.claims import (
    INCONCLUSIVE,
    NOT_COMPARABLE,
    NOT_REPRODUCED,
    NOT_RUN,
    PARTLY,
    REPRODUCED,
    STANDIN_QUALIFIER,
    SUITES_WITH,
    VERDICTS,
    base_verdict,
    claim_rows,
    extreme_cells,
    regime_text,
)
from decobench.reports.regime_map import regime_maps
from decobench.reports.runs import load_runs
from decobench.reports.theory import analyse
from decobench.sweeps.suite import load_suite


def run_dir(root: Path, *, task="cnn-fmnist", method="d-sgd", label=None, condition="wan",
            workers=4, seed=0, ttt: float | None = 100.0, sim=None, bubble=0.5,
            resolution=1.0, target=0.75, milestones=(), network=None, options=None,
            config_extra=None, iters: int | None = 100) -> str:
    """A finished run directory with the summary fields the claims read; returns its path
    relative to ``root``."""
    label = label or method
    name = f"{task}__{condition}__{label}__n{workers}__s{seed}"
    path = root / "runs" / name
    path.mkdir(parents=True)
    reached = ttt is not None
    summary = {
        "task": task, "method": method, "label": label, "condition": condition,
        "workers": workers, "seed": seed, "target": target, "metric_name": "accuracy",
        "reached": reached, "time_to_target_s": ttt,
        "iters_to_target": iters if reached else None, "iterations": iters or 500,
        "final_metric": 0.8, "sim_time_s": ttt if reached else (sim or 1000.0),
        "bits_sent": 1, "diverged": False, "status": "finished" if reached else
        "budget_exhausted", "eval_every": 20, "profile": "paper", "bubble_fraction": bubble,
        "ttt_resolution_s": resolution if reached else None,
        "milestones": [{"target": t, "reached": m[1] is not None, "time_to_target_s": m[1],
                        "ttt_resolution_s": m[2] if len(m) > 2 else None}
                       for m in milestones for t in m[:1]],
        "network": (network or {}).get("kind", "trace"), "time_basis": "simulated"}
    config = {"task": task, "method": method, "label": label, "seed": seed, "workers": workers,
              "method_options": options or {}, "network": network or {"kind": "trace"},
              **(config_extra or {})}
    (path / "summary.json").write_text(json.dumps(summary))
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    (path / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "delta": 0.2, "tau": 2,
                                                    "plan_phi": 7.0}) + "\n")
    return f"runs/{name}"


def with_manifest(root: Path, roles: dict[str, str]) -> None:
    cells = [{"id": str(i), "run_dir": rel, "role": role}
             for i, (rel, role) in enumerate(sorted(roles.items()))]
    (root / "manifest.json").write_text(json.dumps({"suite": "test", "cells": cells}))


def rows_of(root: Path) -> dict[str, dict]:
    runs = load_runs(root).runs
    return {row.claim.split(" (")[0][:40]: row for row in claim_rows(runs, analyse(runs))}


def by_start(root: Path, start: str):
    runs = load_runs(root).runs
    matches = [r for r in claim_rows(runs, analyse(runs)) if r.claim.startswith(start)]
    assert len(matches) == 1, start
    return matches[0]


def test_without_runs_every_claim_is_not_run_and_names_its_suites(tmp_path):
    run_dir(tmp_path, method="accordion")
    runs = load_runs(tmp_path).runs
    rows = claim_rows(runs, analyse(runs))
    assert len(rows) == 10
    for row in rows:
        assert row.verdict == NOT_RUN
        assert "runs are in the suites" in row.rule
        assert ("`robust-planner`" if "deco-sgd-robust" in row.claim else "`cpu-paper`") in row.rule
        assert all(str(v).strip() for v in row.as_row().values() if v is not None)


def test_up_to_figure_is_the_ratio_of_medians_of_the_best_cell(tmp_path):
    """Two main cells: in 'wan' d-sgd 300/500/400 s vs deco 100/90/120 s (median speed-up
    400/100 = 4x, below 0.9·5.07 = 4.56: partly); in 'slow' d-sgd 600/700/650 vs 120/130/125
    (650/125 = 5.2x: reproduced). Range over seeds: 300/100 .. 500/90."""
    for seed, (b, a) in enumerate(((300, 100), (500, 90), (400, 120))):
        run_dir(tmp_path, seed=seed, ttt=b)
        run_dir(tmp_path, method="deco-sgd", seed=seed, ttt=a, bubble=0.0)
    row = by_start(tmp_path, "DeCo-SGD up to 5.07x")
    assert row.value == pytest.approx(400 / 100) and row.verdict == PARTLY
    assert row.spread == f"[{300 / 100:.2f}x, {500 / 90:.2f}x]"
    assert row.seeds == "0, 1, 2" and row.ours == "4.00x"
    for seed, (b, a) in enumerate(((600, 120), (700, 130), (650, 125))):
        run_dir(tmp_path, condition="slow", seed=seed, ttt=b)
        run_dir(tmp_path, condition="slow", method="deco-sgd", seed=seed, ttt=a)
    row = by_start(tmp_path, "DeCo-SGD up to 5.07x")
    assert row.value == pytest.approx(statistics.median([600, 700, 650])
                                      / statistics.median([120, 130, 125]))
    assert row.verdict == REPRODUCED and "slow" in row.condition
    # the widest bracket among the best cell's runs: 1 s of deco-sgd's fastest 120 s
    assert row.resolution == f"<= {100 * 1 / 120:.1f}% of TTT"
    # the static-strategy claim has no cocktail-sgd-topk runs here
    assert by_start(tmp_path, "DeCo-SGD up to 1.37x").verdict == NOT_RUN


def test_up_to_lower_bound_and_not_reproduced(tmp_path):
    for seed in (0, 1):
        run_dir(tmp_path, seed=seed, method="cocktail-sgd-topk", ttt=None, sim=300.0)
        run_dir(tmp_path, seed=seed, method="deco-sgd", ttt=200.0)
    row = by_start(tmp_path, "DeCo-SGD up to 1.37x")
    assert row.ours == ">= 1.50x" and row.value_kind == "lower_bound"
    assert row.verdict == REPRODUCED                 # 1.5 >= 0.9 · 1.37
    assert row.interval == "[1.50x, inf]"            # a censored baseline: no upper end
    for seed in (0, 1):
        run_dir(tmp_path, seed=seed, condition="c2", method="cocktail-sgd-topk", ttt=100.0)
        run_dir(tmp_path, seed=seed, condition="c2", method="deco-sgd", ttt=None, sim=500.0)
    assert by_start(tmp_path, "DeCo-SGD up to 1.37x").verdict == REPRODUCED  # best cell wins
    other = tmp_path / "other"
    for seed in (0, 1):
        run_dir(other, seed=seed, method="cocktail-sgd-topk", ttt=100.0)
        run_dir(other, seed=seed, method="deco-sgd", ttt=120.0 + seed)
    assert by_start(other, "DeCo-SGD up to 1.37x").verdict == NOT_REPRODUCED


def test_one_seed_or_an_interval_holding_one_is_inconclusive(tmp_path):
    """One seed gives no interval; seeds on both sides of 1 give one that holds 1: neither
    can say 'faster', so a 3x median reads 'inconclusive', never 'partly'."""
    run_dir(tmp_path, ttt=300.0)
    run_dir(tmp_path, method="deco-sgd", ttt=100.0)
    row = by_start(tmp_path, "DeCo-SGD up to 5.07x")
    assert row.verdict == INCONCLUSIVE and row.interval == "n/a (one seed)"
    mixed = tmp_path / "mixed"
    for seed, (b, a) in enumerate(((300, 100), (80, 100), (330, 100))):
        run_dir(mixed, seed=seed, ttt=b)
        run_dir(mixed, seed=seed, method="deco-sgd", ttt=a)
    row = by_start(mixed, "DeCo-SGD up to 5.07x")
    assert row.value == pytest.approx(3.0) and row.verdict == INCONCLUSIVE
    assert row.interval == "[0.80x, 3.30x]"


def test_a_speed_up_far_beyond_the_papers_is_not_comparable(tmp_path):
    """The CPU tier's GPT-2 cell (docs/results/cpu-paper.md, issue 39): the 0.94M-parameter
    model on the Oregon-Tokyo link, D-SGD 545.29 s with a 2% compute share (not extreme),
    DeCo-SGD 6.69 s: 81.5x against the paper's 5.07x. More than 2x the paper's figure is never
    'reproduced'; just under 2x still is."""
    for seed in range(3):
        run_dir(tmp_path, task="gpt2-wikitext", condition="aws-oregon-tokyo", seed=seed,
                ttt=545.29, bubble=0.98)
        run_dir(tmp_path, task="gpt2-wikitext", condition="aws-oregon-tokyo", seed=seed,
                method="deco-sgd", ttt=6.69, bubble=0.0)
    row = by_start(tmp_path, "DeCo-SGD up to 5.07x")
    assert extreme_cells(load_runs(tmp_path).runs) == {}
    assert row.value == pytest.approx(545.29 / 6.69) and row.verdict == NOT_COMPARABLE
    assert "more than 2x the paper's figure" in row.rule
    edge = tmp_path / "edge"
    for seed in (0, 1):
        run_dir(edge, seed=seed, ttt=2 * 5.07 * 10 - 0.01)       # 10.139x: reproduced
        run_dir(edge, seed=seed, method="deco-sgd", ttt=10.0, bubble=0.0)
    assert by_start(edge, "DeCo-SGD up to 5.07x").verdict == REPRODUCED
    for seed in (0, 1):
        run_dir(edge, seed=seed, condition="c2", ttt=2 * 5.07 * 10 + 0.01)  # 10.141x
        run_dir(edge, seed=seed, condition="c2", method="deco-sgd", ttt=10.0, bubble=0.0)
    # the not-comparable cell is left out and named; the comparable one decides
    row = by_start(edge, "DeCo-SGD up to 5.07x")
    assert row.verdict == REPRODUCED and "not comparable: cnn-fmnist / c2" in row.rule
    alone = tmp_path / "alone"
    for seed in (0, 1):
        run_dir(alone, seed=seed, ttt=2 * 5.07 * 10 + 0.01)
        run_dir(alone, seed=seed, method="deco-sgd", ttt=10.0, bubble=0.0)
    assert by_start(alone, "DeCo-SGD up to 5.07x").verdict == NOT_COMPARABLE


def test_a_claim_judged_on_a_stand_in_says_so_in_its_verdict(tmp_path):
    """The CPU tier's 1.37x cell (docs/results/cpu-paper.md, issue 39): CNN@CIFAR-10 on the
    stand-in built from Fashion-MNIST pixels, static 98.7 s against DeCo-SGD 59.8 s (1.65x).
    Never a bare 'reproduced': 'reproduced at small scale (stand-in)'. The same figures on
    the real data read 'reproduced'."""
    standin = {"data_source": "data/standins/cifar10; STAND-IN: built from Fashion-MNIST "
                              "(fashion-mnist-mini, 3000 train / 500 test images)"}
    for seed in range(3):
        run_dir(tmp_path, task="cnn-cifar10", seed=seed, method="cocktail-sgd-topk",
                ttt=98.7, config_extra=standin)
        run_dir(tmp_path, task="cnn-cifar10", seed=seed, method="deco-sgd", ttt=59.8,
                bubble=0.0, config_extra=standin)
    row = by_start(tmp_path, "DeCo-SGD up to 1.37x")
    assert row.value == pytest.approx(98.7 / 59.8)
    assert row.verdict == f"{REPRODUCED} {STANDIN_QUALIFIER}" != REPRODUCED
    assert base_verdict(row.verdict) == REPRODUCED
    real = tmp_path / "real"
    for seed in range(3):
        run_dir(real, task="cnn-cifar10", seed=seed, method="cocktail-sgd-topk", ttt=98.7,
                config_extra={"data_source": "../shared/data/cifar10-mini"})
        run_dir(real, task="cnn-cifar10", seed=seed, method="deco-sgd", ttt=59.8, bubble=0.0)
    assert by_start(real, "DeCo-SGD up to 1.37x").verdict == REPRODUCED
    # a claim that was not run, or not comparable, has nothing to qualify
    assert by_start(tmp_path, "DeCo-SGD up to 5.07x").verdict == NOT_RUN


def test_extreme_cells_are_left_out_of_up_to_claims(tmp_path):
    """D-SGD computing 0.5% of the time there: the 1000x cell is listed as extreme and the
    claim is judged on the ordinary cell (3x: partly)."""
    for seed in (0, 1):
        run_dir(tmp_path, seed=seed, condition="extreme", ttt=100_000.0, bubble=0.995)
        run_dir(tmp_path, seed=seed, condition="extreme", method="deco-sgd", ttt=100.0)
        run_dir(tmp_path, seed=seed, condition="wan", ttt=300.0)
        run_dir(tmp_path, seed=seed, condition="wan", method="deco-sgd", ttt=100.0)
    runs = load_runs(tmp_path).runs
    assert extreme_cells(runs) == {("cnn-fmnist", "extreme", 4): pytest.approx(0.005)}
    row = by_start(tmp_path, "DeCo-SGD up to 5.07x")
    assert row.value == pytest.approx(3.0) and row.verdict == PARTLY
    assert "1 extreme cell(s) left out" in row.rule


def test_fastest_in_every_table1_condition(tmp_path):
    """Two seeds per cell: fastest in aws-a (a DeCo variant is no rival), beaten by dga in
    aws-b, a tie with a re-timed copy in aws-c, undecided in aws-d (seeds on both sides)."""
    roles = {}
    for condition, times in (("aws-a", {"d-sgd": 300, "deco-sgd": 100, "accordion": 150,
                                        "deco-sgd-F25": 50}),
                             ("aws-b", {"d-sgd": 300, "deco-sgd": 100, "dga": 90}),
                             ("aws-c", {"d-sgd": 300, "deco-sgd": 100,
                                        "cocktail-sgd-topk": 100}),
                             ("aws-d", {"d-sgd": 300, "deco-sgd": 100, "dga": (90, 110)})):
        for label, ttt in times.items():
            method = "deco-sgd" if label.startswith("deco") else label
            for seed in (0, 1):
                value = ttt[seed] if isinstance(ttt, tuple) else ttt
                roles[run_dir(tmp_path, condition=condition, method=method, label=label,
                              seed=seed, ttt=value)] = "table1"
    with_manifest(tmp_path, roles)
    row = by_start(tmp_path, "DeCo-SGD is the fastest")
    assert row.ours == "fastest in 1 of 4 (beaten in 1, undecided in 2)"
    assert row.verdict == PARTLY
    assert row.spread == ("aws-b (cnn-fmnist): beaten by dga; "
                          "aws-c (cnn-fmnist): undecided against cocktail-sgd-topk (tie); "
                          "aws-d (cnn-fmnist): undecided against dga ([0.90x, 1.10x])")
    # Table-1 runs count for the speed-up claims too; regime-map runs never do
    assert by_start(tmp_path, "DeCo-SGD up to 5.07x").value == pytest.approx(3.0)


def test_scaling_claim(tmp_path):
    roles = {}
    for workers, (b, a) in ((4, (300, 100)), (8, (400, 120)), (16, (500, 160))):
        role = "main" if workers == 4 else "scaling"   # n = 4 is the main comparison's run
        for seed in (0, 1):
            roles[run_dir(tmp_path, workers=workers, seed=seed, ttt=b)] = role
            roles[run_dir(tmp_path, workers=workers, seed=seed, method="deco-sgd",
                          ttt=a)] = role
    with_manifest(tmp_path, roles)
    row = by_start(tmp_path, "DeCo-SGD keeps its gains")
    # 3.00x -> 3.33x -> 3.12x: > 1 everywhere, 3.125 >= 0.9 · 3
    assert row.verdict == REPRODUCED and row.value == pytest.approx(500 / 160)
    assert "3.00x [3.00x, 3.00x] (n=4)" in row.ours and "3.12x" in row.ours
    # the static strategy beats DeCo-SGD at n = 16: the claim holds only in part
    for workers, ttt in ((4, 150), (16, 150)):
        for seed in (0, 1):
            roles[run_dir(tmp_path, workers=workers, seed=seed, method="cocktail-sgd-topk",
                          ttt=ttt)] = "main" if workers == 4 else "scaling"
    with_manifest(tmp_path, roles)
    row = by_start(tmp_path, "DeCo-SGD keeps its gains")
    assert row.verdict == PARTLY and "over cocktail-sgd-topk" in row.ours


def test_vit_speed_up_growing_with_the_target(tmp_path):
    """Targets 0.5 (milestone) and 0.6 (stop): speed-up 200/100 = 2x, then 500/150 = 3.33x."""
    for seed in (0, 1):
        run_dir(tmp_path, task="vit-imagenet", seed=seed, target=0.6, ttt=500.0,
                milestones=[(0.5, 200.0)])
        run_dir(tmp_path, task="vit-imagenet", method="deco-sgd", seed=seed, target=0.6,
                ttt=150.0, milestones=[(0.5, 100.0)])
    row = by_start(tmp_path, "ViT@ImageNet")
    assert row.ours == "over d-sgd: 2.00x at 0.5 -> 3.33x at 0.6 (growth [1.67, 1.67])"
    assert row.verdict == REPRODUCED


def test_vit_growth_reads_the_milestones_brackets_and_bounds_a_censored_median(tmp_path):
    """D-SGD meets the 0.5 milestone at 100 s with a 4 s bracket (4% of it: the claim's
    resolution, though every stop-target bracket is 1%); DeCo-SGD meets 0.5 at 40 s (2.5x)
    and misses 0.6 within 150 s of budget, where D-SGD took 300 s: below 300/150 = 2x,
    so the speed-up does not grow, and the row says so with the bound."""
    for seed in (0, 1, 2):
        run_dir(tmp_path, task="vit-imagenet", seed=seed, target=0.6, ttt=300.0,
                resolution=3.0, milestones=[(0.5, 100.0, 4.0)])
        run_dir(tmp_path, task="vit-imagenet", method="deco-sgd", seed=seed, target=0.6,
                ttt=None, sim=150.0, milestones=[(0.5, 40.0, 0.4)])
    row = by_start(tmp_path, "ViT@ImageNet")
    assert row.ours == "over d-sgd: 2.50x at 0.5 -> n/a (not reached; < 2.00x) at 0.6"
    assert row.verdict == NOT_REPRODUCED and "undecided in" not in row.rule
    assert row.resolution == "<= 4.0% of TTT (coarser than 2%)"


def test_vit_growth_without_a_lower_target_figure_is_not_growth(tmp_path):
    """DeCo-SGD met 0.6 but its 0.5 milestone has no time (not reached as recorded): there
    is no speed-up at the lower target, so the cell is undecided, never 'grows'."""
    for seed in (0, 1, 2):
        run_dir(tmp_path, task="vit-imagenet", seed=seed, target=0.6, ttt=300.0,
                milestones=[(0.5, 100.0, 1.0)])
        run_dir(tmp_path, task="vit-imagenet", method="deco-sgd", seed=seed, target=0.6,
                ttt=150.0, milestones=[(0.5, None)])
    row = by_start(tmp_path, "ViT@ImageNet")
    assert row.verdict == INCONCLUSIVE and "undecided in 1" in row.rule


def test_vit_growth_undecided_when_the_bound_is_above_the_lower_speed_up(tmp_path):
    """The same with DeCo-SGD's budget ending at 100 s: the speed-up at 0.6 is below 3x,
    which does not settle whether it exceeds 2.5x; the row names the undecided cell and,
    with no cell decided, says 'inconclusive' rather than 'not reproduced'."""
    for seed in (0, 1, 2):
        run_dir(tmp_path, task="vit-imagenet", seed=seed, target=0.6, ttt=300.0,
                milestones=[(0.5, 100.0, 1.0)])
        run_dir(tmp_path, task="vit-imagenet", method="deco-sgd", seed=seed, target=0.6,
                ttt=None, sim=100.0, milestones=[(0.5, 40.0, 0.4)])
    row = by_start(tmp_path, "ViT@ImageNet")
    assert row.ours == "over d-sgd: 2.50x at 0.5 -> n/a (not reached; < 3.00x) at 0.6"
    assert row.verdict == INCONCLUSIVE and "undecided in 1" in row.rule


def test_staleness_amplifies_and_oracle_distance(tmp_path):
    """Static grid δ ∈ {0.01, 0.1} × τ ∈ {0, 4}: iterations 100/300 at δ 0.01 (x3) and
    100/120 at δ 0.1 (x1.2): staleness amplifies compression. DeCo-SGD's median TTT 110 s
    against the oracle's 100 s: 1.10x, within 10%."""
    for seed in (0, 1):
        for (delta, tau), iters in {(0.01, 0): 100, (0.01, 4): 300 + seed, (0.1, 0): 100,
                                    (0.1, 4): 120}.items():
            run_dir(tmp_path, method="dd-ef-sgd", label=f"dd-ef-sgd-delta{delta}-tau{tau}",
                    seed=seed, ttt=float(iters), iters=iters,
                    options={"delta": delta, "tau": tau})
        run_dir(tmp_path, method="deco-sgd", seed=seed, ttt=110.0)
    row = by_start(tmp_path, "Staleness amplifies")
    assert row.verdict == REPRODUCED and row.value == pytest.approx(3.005)
    assert row.interval.startswith("[2.50, 2.51]")
    # two medians apart but seeds that overlap: the interval holds 1, so no verdict
    close = tmp_path / "close"
    for seed, stale in enumerate((130, 112, 125)):
        for (delta, tau), iters in {(0.01, 0): 100, (0.01, 4): stale, (0.1, 0): 100,
                                    (0.1, 4): 120}.items():
            run_dir(close, method="dd-ef-sgd", label=f"dd-ef-sgd-delta{delta}-tau{tau}",
                    seed=seed, ttt=float(iters), iters=iters,
                    options={"delta": delta, "tau": tau})
    assert by_start(close, "Staleness amplifies").verdict == INCONCLUSIVE
    assert "x3.00 at δ = 0.01" in row.ours and "x1.20 at δ = 0.1" in row.ours
    oracle = by_start(tmp_path, "(this project's check) DeCo-SGD")
    assert oracle.value == pytest.approx(1.1) and oracle.verdict == REPRODUCED


def test_dsgd_collapse_below_one_gbps(tmp_path):
    network = {"kind": "regime", "reference_profile": "paper",
               "reference_mean_bandwidth_mbps": 549.0}
    run_dir(tmp_path, task="vit-imagenet", bubble=0.9, network=network)
    run_dir(tmp_path, task="vit-imagenet", condition="fast", bubble=0.2,
            network={**network, "reference_mean_bandwidth_mbps": 800.0})
    row = by_start(tmp_path, "D-SGD's throughput collapses")
    # simulated runs: the share is the time model's arithmetic, not a measurement
    assert row.verdict == NOT_COMPARABLE and row.value == pytest.approx(0.8)
    assert "time model's closed form" in row.rule
    assert row.spread == "80.0%, 10.0%"              # cells in order: 'fast', 'wan'
    measured = tmp_path / "measured"
    for condition, bubble, bandwidth in (("wan", 0.9, 549.0), ("fast", 0.2, 800.0)):
        run_dir(measured, task="vit-imagenet", condition=condition, bubble=bubble,
                network={**network, "reference_mean_bandwidth_mbps": bandwidth},
                config_extra={"backend": "emulated"})
        path = next((measured / "runs").glob(f"*{condition}*")) / "summary.json"
        summary = json.loads(path.read_text())
        path.write_text(json.dumps({**summary, "time_basis": "measured"}))
    assert by_start(measured, "D-SGD's throughput collapses").verdict == PARTLY


@pytest.mark.parametrize("kind", sorted(SUITES_WITH))
def test_named_suites_hold_runs_of_that_kind(kind):
    role = {"vit-targets": "main", "throughput": "main", "static-mean": "main"}.get(kind, kind)
    for name in SUITES_WITH[kind]:
        suite, _ = load_suite(name)
        roles = {e.role or "main" for e in suite.experiments}
        assert role in roles, f"suite {name} has no {role} experiment for {kind} claims"
        if kind == "static-mean":
            assert any("static-mean-plan" in str(e.methods) and e.role in (None, "main")
                       for e in suite.experiments), name
        if kind == "vit-targets":
            assert any("vit-imagenet" in e.tasks and e.role in (None, "main")
                       for e in suite.experiments), name


def test_regime_map_cells_and_report_sections(tmp_path):
    """2 x 2 (ρ, λ) cells of regime-map runs: each speed-up is the ratio of the medians."""
    times = {(1.0, 1.0): (200, 100, 110), (4.0, 1.0): (600, 100, 130),
             (1.0, 4.0): (500, 120, 125), (4.0, 4.0): (1000, 150, 220)}
    for (rho, lam), (dsgd, deco, static) in times.items():
        network = {"kind": "ratios"}
        extra = {"transmission_ratio": rho, "latency_ratio": lam}
        condition = f"rho{rho:g}-lambda{lam:g}"
        for method, ttt in (("d-sgd", dsgd), ("deco-sgd", deco), ("cocktail-sgd-topk", static)):
            run_dir(tmp_path, method=method, condition=condition, ttt=float(ttt),
                    network=network, config_extra=extra)
    (m,) = regime_maps(load_runs(tmp_path).runs)
    assert (m.rhos, m.lams) == ([1.0, 4.0], [1.0, 4.0])
    cell = next(c for c in m.cells if (c.rho, c.lam) == (4.0, 4.0))
    assert cell.speedups["d-sgd"].value == pytest.approx(1000 / 150)
    assert cell.speedups["cocktail-sgd-topk"].value == pytest.approx(220 / 150)
    # regime-map runs never enter the paper's claims
    assert by_start(tmp_path, "DeCo-SGD up to 5.07x").verdict == NOT_RUN
    out = write_report(tmp_path)
    text = out.markdown.read_text()
    assert text.index("## Claims") < text.index("## Rules") < text.index("## Regime map")
    assert "regime-map__cnn-fmnist__w4" in out.figures
    verdicts = [row["verdict"] for row in out.rows["claims"]]
    assert len(verdicts) == 10 and set(verdicts) <= set(VERDICTS)


def _paper_view(latency_ms: float, bandwidth_mbps: float, rho: float, lam: float) -> dict:
    """A regime network as config.yaml records it: the paper's model's view and the run's
    own ratios."""
    return {"kind": "regime", "reference_profile": "paper",
            "reference_mean_latency_ms": latency_ms,
            "reference_mean_bandwidth_mbps": bandwidth_mbps,
            "mean_transmission_ratio": rho, "mean_latency_ratio": lam}


def test_the_81x_gpt2_cell_and_the_one_cell_137x_case_never_read_reproduced(tmp_path):
    """Issue 39's two cases. (1) GPT-2 `cpu` (0.94M parameters) in the section-5.2 regime
    as the 124M model sees it (200 ms, 812 Mbit/s), one trace realisation per seed:
    D-SGD 545 s, DeCo-SGD 6.7 s, 81x: not comparable. (2) Twelve cells against the static
    strategy: the CIFAR-10 stand-in at 1.65x with seeds at 1.65, 0.95 and 1.2 (the first
    plan's lottery), Fashion-MNIST at 0.82x, eight exact ties (re-timed copies), two cells
    a little either way: no cell is faster with its interval, so 'inconclusive at small
    scale (stand-in)', not 'reproduced'."""
    gpt2 = {"parameters": 937_472}
    view = _paper_view(201.0, 812.1, 62.1, 2.49)
    for seed, dsgd in enumerate((545.29, 540.0, 552.0)):
        run_dir(tmp_path, task="gpt2-wikitext", condition="deco52-gpt2", seed=seed,
                ttt=dsgd, bubble=0.985, network=view, config_extra=gpt2)
        run_dir(tmp_path, task="gpt2-wikitext", condition="deco52-gpt2", seed=seed,
                method="deco-sgd", ttt=6.69 + seed / 10, bubble=0.0, network=view,
                config_extra=gpt2)
    row = by_start(tmp_path, "DeCo-SGD up to 5.07x")
    assert row.verdict == NOT_COMPARABLE and base_verdict(row.verdict) != REPRODUCED
    assert row.model.startswith("gpt2-wikitext 937K (paper 124M); gpt2-wikitext: iteration")
    assert row.regime.startswith("deco52-gpt2: ρ 62.1, λ 2.49 (paper: b ≈ 200 ms")

    static = tmp_path / "static"
    standin = {"data_source": "data/standins/cifar10; STAND-IN: built from Fashion-MNIST"}
    cases = {("cnn-cifar10", "deco52-cnn-cifar10"): ((98.7, 59.8), (57.0, 60.0), (72.0, 60.0)),
             ("cnn-fmnist", "deco52-cnn-fmnist"): ((82.0, 100.0), (80.0, 100.0),
                                                   (84.0, 100.0)),
             ("cnn-fmnist", "aws-a"): ((101.0, 100.0), (97.0, 100.0), (103.0, 100.0)),
             ("cnn-fmnist", "aws-b"): ((99.0, 100.0), (104.0, 100.0), (98.0, 100.0))}
    cases.update({("gpt2-wikitext", f"aws-tie{i}"): ((50.0, 50.0),) * 3 for i in range(8)})
    for (task, condition), seeds in cases.items():
        extra = standin if task == "cnn-cifar10" else {}
        for seed, (b, a) in enumerate(seeds):
            run_dir(static, task=task, condition=condition, seed=seed,
                    method="cocktail-sgd-topk", ttt=b, config_extra=extra)
            run_dir(static, task=task, condition=condition, seed=seed, method="deco-sgd",
                    ttt=a, config_extra=extra)
    row = by_start(static, "DeCo-SGD up to 1.37x")
    assert row.verdict == f"{INCONCLUSIVE} {STANDIN_QUALIFIER}"
    assert base_verdict(row.verdict) != REPRODUCED
    assert "DeCo faster in 0, slower in 1, inconclusive in 11 of 12" in row.rule
    assert row.data == "cnn-cifar10: stand-in"


def test_up_to_is_judged_in_the_cells_nearest_the_papers_regime(tmp_path):
    """A 4.8x cell on a 33 ms measured link and a 2x cell at 200 ms: the paper's stated
    regime (about 200 ms, below 1 Gbit/s) holds only the second, which decides (partly);
    without the 200 ms cell the nearest one decides and the note says none is inside."""
    for seed in (0, 1):
        for condition, view, (b, a) in (
                ("aws-oregon-virginia", _paper_view(33.5, 790.0, 9.0, 0.4), (480, 100)),
                ("deco52", _paper_view(200.4, 21.3, 3.6, 1.0), (200, 100))):
            run_dir(tmp_path, condition=condition, seed=seed, ttt=b, network=view)
            run_dir(tmp_path, condition=condition, seed=seed, method="deco-sgd", ttt=a,
                    network=view)
    row = by_start(tmp_path, "DeCo-SGD up to 5.07x")
    assert row.condition == "cnn-fmnist / deco52 / n=4" and row.verdict == PARTLY
    assert "1 cell(s) inside the paper's stated regime" in row.rule
    assert "1 further cell(s) left out" in row.rule
    near = tmp_path / "near"
    for seed in (0, 1):
        view = _paper_view(33.5, 790.0, 9.0, 0.4)
        run_dir(near, condition="aws-oregon-virginia", seed=seed, ttt=480, network=view)
        run_dir(near, condition="aws-oregon-virginia", seed=seed, method="deco-sgd",
                ttt=100, network=view)
    row = by_start(near, "DeCo-SGD up to 5.07x")
    assert row.verdict == REPRODUCED and "none is inside it" in row.rule


def test_a_model_far_below_the_papers_size_qualifies_the_verdict(tmp_path):
    """ViT `cpu` (5.5M parameters) against the paper's 86.6M ViT-B/16, on the CIFAR-10-built
    stand-in: 'reproduced at small scale (stand-in; model 5.5M of the paper's 86.6M
    parameters)'. The CNN at the paper's size on a slice has no qualifier."""
    extra = {"parameters": 5_500_000, "data_source": "x; STAND-IN: built from CIFAR-10"}
    for seed in (0, 1):
        run_dir(tmp_path, task="vit-imagenet", seed=seed, ttt=500.0, config_extra=extra)
        run_dir(tmp_path, task="vit-imagenet", seed=seed, method="deco-sgd", ttt=100.0,
                config_extra=extra)
    row = by_start(tmp_path, "DeCo-SGD up to 5.07x")
    assert row.verdict == (f"{REPRODUCED} at small scale (stand-in; model 5.5M of the "
                           "paper's 86.6M parameters)")
    assert base_verdict(row.verdict) == REPRODUCED
    cnn = tmp_path / "cnn"
    for seed in (0, 1):
        extra = {"parameters": 454_922, "data_kind": "slice"}
        run_dir(cnn, seed=seed, ttt=500.0, config_extra=extra)
        run_dir(cnn, seed=seed, method="deco-sgd", ttt=100.0, config_extra=extra)
    row = by_start(cnn, "DeCo-SGD up to 5.07x")
    assert row.verdict == REPRODUCED and row.data == "cnn-fmnist: slice"
    assert row.model == "cnn-fmnist 455K (paper 455K)"


def test_regime_map_names_the_paper_line_in_the_title_not_over_a_cell(tmp_path, monkeypatch):
    """Issue 40: the contour label '5.07x (paper)' was drawn on the line and covered a cell's
    figure; the line is now named in the panel's title and the plot area holds only the
    cells' own labels."""
    from matplotlib.figure import Figure

    import decobench.reports.figures as figs

    times = {(1.0, 1.0): (200, 100), (4.0, 1.0): (600, 100), (1.0, 4.0): (500, 120),
             (4.0, 4.0): (1000, 150)}                 # speed-ups 2 to 6.7: 5.07 inside
    for (rho, lam), (dsgd, deco) in times.items():
        for method, ttt in (("d-sgd", dsgd), ("deco-sgd", deco)):
            run_dir(tmp_path, method=method, condition=f"rho{rho:g}-lambda{lam:g}",
                    ttt=float(ttt), network={"kind": "ratios"},
                    config_extra={"transmission_ratio": rho, "latency_ratio": lam})
    drawn = []
    monkeypatch.setattr(figs, "render", lambda name, title, caption, size, draw:
                        drawn.append(draw))
    figs.regime_map(regime_maps(load_runs(tmp_path).runs))
    fig = Figure()
    drawn[0](fig)
    ax = fig.axes[0]
    assert ax.collections                              # the contour was drawn
    assert "black line: the paper's 5.07x" in ax.get_title()
    assert sorted(t.get_text() for t in ax.texts) == sorted(["2.00x", "6.00x", "4.17x",
                                                             "6.67x"])


def test_regime_text_scales_a_ring_cell_by_its_topology_factors(tmp_path):
    """A ring cell's λ = b/T is per latency; a sparse message at n = 16 pays h = l = 15 of
    them (docs/design.md §4.3), which is the λ the planner sees: 0.98 · 15 = 14.7 (τ ~ 15 at
    the planner, the plan that did not train in the CPU tier's scaling study). A `paper`
    cell is printed as before."""
    view = {"kind": "trace", "mean_transmission_ratio": 3.7, "mean_latency_ratio": 0.98}
    rels = [run_dir(tmp_path, condition="ring", workers=n, seed=0, network=view)
            for n in (4, 16)]
    runs = [r for r in load_runs(tmp_path).runs if r.rel in rels]
    for r in runs:
        r.summary["topology"] = "ring"
    text = regime_text(runs)
    assert "ring: ρ 3.7, λ 0.98 (ring, n=16: a sparse message costs h = 15 transmissions " \
           "and l = 15 latencies, ρ·h 55.5, λ·l 14.7)" in text
    assert "(ring, n=4: a sparse message costs h = 3 transmissions and l = 3 latencies, " \
           "ρ·h 11.1, λ·l 2.94)" in text
    paper = [replace(r, summary={**r.summary, "topology": "paper"}) for r in runs]
    assert regime_text(paper).startswith("ring: ρ 3.7, λ 0.98; ring: ρ 3.7, λ 0.98 (paper:")
