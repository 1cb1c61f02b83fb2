"""This project's check of deco-sgd-robust against the per-seed oracle from synthetic run
folders: the oracle of each seed, the ratio and its interval, the link's CV and its classes,
issue 42 point 5's targets, the claims row and the report section (reports/robust.py,
reports/claims.py, reports/build.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_report_build import write_run

from decobench.reports import robust
from decobench.reports.build import write_report
from decobench.reports.claims import (
    NOT_REPRODUCED,
    NOT_RUN,
    PARTLY,
    REPRODUCED,
    robust_within_oracle,
)
from decobench.reports.runs import load_runs
from decobench.reports.stats import Obs
from decobench.reports.theory import analyse as theory_analyse

TRACES = {
    # two 10 s rows, period 20 s: half the time 10, half 30 Mbit/s: mean 20, sd 10, CV 0.5
    "vary": "time_s,bandwidth_mbps,latency_ms\n0,10,200\n10,30,200\n",
    # 18 and 22 Mbit/s: mean 20, sd 2, CV 0.1 (varies, below 0.3)
    "mild": "time_s,bandwidth_mbps,latency_ms\n0,18,200\n10,22,200\n",
    # one row: a constant link, CV 0 over the longest run
    "flat": "time_s,bandwidth_mbps,latency_ms\n0,20,200\n",
}
GRID = {(0.01, 1): ((50.0, 40), (70.0, 40), (None, 40)),
        (0.1, 0): ((60.0, 40), (40.0, 100), (None, 40)),
        (0.1, 2): ((None, 40), (40.0, 90), (None, 40))}
"""Per pair, per seed 0-2: (TTT or None: not reached, iterations). Seed 0's oracle is
(0.01, 1) at 50 s; seed 1's is (0.1, 2) at 40 s (ties (0.1, 0) at 40 s with fewer
iterations); seed 2 has none. The median oracle TTT is (50 + 40) / 2 = 45 s. (The lowest
*median* pair would be (0.1, 0) at 60 s.)"""
LABELS = {"deco-sgd-robust": (52.0, 44.0, 30.0), "deco-sgd": (80.0, 60.0, 100.0),
          "cocktail-sgd-topk": (50.0, 40.0, 28.0)}


def cell(root: Path, condition: str, *, labels=LABELS, grid=GRID, trace_dir="results/x",
         role: str = "robust", family: str | None = None) -> list[str]:
    """Runs of one condition (trace TRACES[condition], written to ROOT/traces; config.yaml
    names it relative to another directory, as a sweep run from the repository does);
    returns their run folders relative to root."""
    (root / "traces").mkdir(parents=True, exist_ok=True)
    rels = []

    def add(name: str, seed: int, **kw) -> None:
        path = write_run(root / "runs", f"{condition}-{name}-s{seed}", condition=condition,
                         seed=seed, target=0.75, **kw)
        trace = root / "traces" / f"{condition}-s{seed}.csv"
        trace.write_text(TRACES.get(condition, TRACES["vary"]))
        config = yaml.safe_load((path / "config.yaml").read_text())
        config["trace_path"] = f"{trace_dir}/traces/{trace.name}"
        (path / "config.yaml").write_text(yaml.safe_dump(config))
        rels.append(path.relative_to(root).as_posix())

    for (delta, tau), seeds in grid.items():
        for seed, (ttt, iters) in enumerate(seeds):
            add(f"dd-{delta}-{tau}", seed, method="dd-ef-sgd",
                label=f"dd-ef-sgd-delta{delta}-tau{tau}", ttt=ttt, sim=200.0,
                iterations=iters, method_options={"delta": delta, "tau": tau})
    for label, times in labels.items():
        for seed, ttt in enumerate(times):
            add(label, seed, method=label, ttt=ttt, sim=300.0, iterations=20)
    manifest = root / "manifest.json"
    cells = json.loads(manifest.read_text())["cells"] if manifest.is_file() else []
    cells += [{"id": str(len(cells) + i), "run_dir": rel, "role": role}
              | ({"family": family} if family else {}) for i, rel in enumerate(rels)]
    manifest.write_text(json.dumps({"suite": "test", "cells": cells}))
    return rels


def groups_of(root: Path) -> dict[str, robust.RobustGroup]:
    return {g.key[1]: g for g in robust.analyse(load_runs(root).runs)}


def test_the_oracle_is_per_seed_and_the_ratio_over_shared_seeds(tmp_path):
    cell(tmp_path, "vary")
    g = groups_of(tmp_path)["vary"]
    assert [(o.seed, o.pair) for o in g.oracles] == [(0, (0.01, 1)), (1, (0.1, 2)), (2, None)]
    assert g.oracle_ttt == Obs(45.0)
    assert [a.label for a in g.against] == ["deco-sgd-robust", "deco-sgd", "cocktail-sgd-topk"]
    r = g.of("deco-sgd-robust")
    # median over its three seeds 44 s; over the seeds with an oracle (0, 1): 48 / 45
    assert r.ttt == Obs(44.0) and r.paired == (0, 1)
    assert r.ratio.value == pytest.approx(48 / 45) and not r.ratio.censored
    # two seeds: resamples give 52/50, 44/40 or 48/45; the interval spans the two extremes
    assert r.interval == pytest.approx((1.04, 1.10))
    assert [o.value for o in r.per_seed] == pytest.approx([1.04, 1.10])
    # the theory section's oracle is the lowest median instead: (0.1, 0) at 60 s
    (t,) = theory_analyse(load_runs(tmp_path).runs)
    assert (t.oracle.delta, t.oracle.tau, t.oracle.ttt.value) == (0.1, 0, 60.0)
    # ... which the table shows beside the per-seed oracle: on seeds 0, 1 (60 + 40) / 2 = 50 s
    # against the oracle's 45 s, 1.11x: the per-seed minimum's advantage over any one pair
    best = g.best_pair
    assert best.label == "dd-ef-sgd-delta0.1-tau0 (best single pair)"
    assert best.ttt == Obs(60.0) and best.paired == (0, 1)
    assert best.ratio.value == pytest.approx(50 / 45)
    rows = robust.oracle_table([g]).rows
    assert rows[-1]["strategy"] == best.label and rows[-1]["TTT / oracle TTT"] == "1.11x"


def test_the_cv_classes_read_each_seeds_trace_under_the_results_folder(tmp_path):
    for condition in ("vary", "mild", "flat"):
        cell(tmp_path, condition)
    groups = groups_of(tmp_path)
    assert groups["vary"].cv == pytest.approx(0.5) and groups["vary"].cv_seeds == 3
    assert groups["mild"].cv == pytest.approx(0.1)
    assert groups["flat"].cv == 0.0
    assert [robust.link_text(groups[c].cv) for c in ("vary", "mild", "flat")] == [
        "0.50: varies (>= 0.3)", "0.10: varies (< 0.3)", "0.00: constant"]
    assert groups["vary"].varying and groups["mild"].varying and not groups["flat"].varying
    assert robust.link_text(None) == "n/a (trace not readable)"


def test_an_unreadable_trace_gives_no_cv_and_no_link_targets(tmp_path):
    cell(tmp_path, "vary", trace_dir="/elsewhere/gone")
    for trace in (tmp_path / "traces").iterdir():
        trace.unlink()
    g = groups_of(tmp_path)["vary"]
    assert g.cv is None and not g.varying
    assert g.targets["a"].text == "n/a (trace not readable: CV unknown)"
    assert g.targets["d"].status == robust.MISSED        # needs no CV


def test_targets_on_a_strongly_varying_link(tmp_path):
    cell(tmp_path, "vary")
    t = groups_of(tmp_path)["vary"].targets
    # (a) 48/45 = 1.067 > 1.05: missed by 0.017
    assert t["a"].status == robust.MISSED
    assert t["a"].text == "missed (by 0.02x): 1.07x [1.04x, 1.10x]"
    # (b) median deco-sgd 80 s over the robust 44 s: 1.82x >= 1.2
    assert t["b"].status == robust.HOLDS and t["b"].text.startswith("holds: 1.82x [")
    assert t["c"].text == robust.NOT_APPLICABLE
    # (d) median cocktail-sgd-topk 40 s over 44 s: 0.91x < 1, missed by 0.09
    assert t["d"].status == robust.MISSED and t["d"].text.startswith("missed (by 0.09x): 0.91x")


def test_targets_on_a_constant_and_a_mildly_varying_link(tmp_path):
    labels = {"deco-sgd-robust": (40.0, 40.0, 40.0), "deco-sgd": (39.0, 40.0, 41.0),
              "cocktail-sgd-topk": (45.0, 45.0, 45.0)}
    cell(tmp_path, "flat", labels=labels)
    cell(tmp_path, "mild", labels=labels)
    groups = groups_of(tmp_path)
    flat, mild = groups["flat"].targets, groups["mild"].targets
    assert flat["a"].text == flat["b"].text == robust.NOT_APPLICABLE
    # (c) 40 / 40 = 1.00 >= 0.97
    assert flat["c"].status == robust.HOLDS and flat["c"].text.startswith("holds: 1.00x [")
    # (a) applies on every varying link: 40 / 45 = 0.89x
    assert mild["a"].status == robust.HOLDS and mild["a"].text.startswith("holds: 0.89x [")
    assert mild["b"].text == mild["c"].text == robust.NOT_APPLICABLE
    assert mild["d"].text.startswith("holds: 1.12x [")


def test_judge_holds_missed_undecided():
    j = robust.judge
    assert j(Obs(1.04), 1.05, True, "1.04x", (1.0, 1.1)).text == "holds: 1.04x [1.00x, 1.10x]"
    assert j(Obs(1.10), 1.05, True, "1.10x", None).text == "missed (by 0.05x): 1.10x n/a (one seed)"
    # a censored ratio (robust not reached) is a lower bound: above the limit it misses...
    assert j(Obs(1.10, True), 1.05, True, "> 1.10x", None).status == robust.MISSED
    # ... below it nothing is decided
    assert j(Obs(1.00, True), 1.05, True, "> 1.00x", None).status == robust.UNDECIDED
    # speed-ups: a lower bound at or above the limit holds, below it is undecided
    assert j(Obs(1.3, True), 1.2, False, ">= 1.30x", None).status == robust.HOLDS
    assert j(Obs(1.1, True), 1.2, False, ">= 1.10x", None).status == robust.UNDECIDED
    assert j(Obs(0.9), 0.97, False, "0.90x", None).text.startswith("missed (by 0.07x): 0.90x")
    assert j(None, 1.0, False, "not reached", None).status == robust.MISSED


def test_no_robust_runs_means_no_targets(tmp_path):
    cell(tmp_path, "vary", labels={"deco-sgd": (80.0, 60.0, 100.0)})
    g = groups_of(tmp_path)["vary"]
    assert {t.text for t in g.targets.values()} == {"n/a (no deco-sgd-robust runs)"}


def test_only_robust_role_runs_with_a_grid_form_groups(tmp_path):
    cell(tmp_path, "vary", role="theory")
    assert robust.analyse(load_runs(tmp_path).runs) == []
    one_pair = tmp_path / "one"
    cell(one_pair, "vary", grid={(0.01, 1): GRID[(0.01, 1)]})
    assert robust.analyse(load_runs(one_pair).runs) == []


def test_held_out_family_from_the_condition_name(tmp_path):
    cell(tmp_path, "diurnal")
    cell(tmp_path, "walk")
    cell(tmp_path, "pack-deco52")
    groups = groups_of(tmp_path)
    assert (groups["diurnal"].held_out, groups["diurnal"].split) == (True, "held out")
    assert (groups["walk"].held_out, groups["walk"].split) == (False, "tuning")
    assert groups["pack-deco52"].split == "not a family"


def test_held_out_family_from_the_manifest(tmp_path):
    """A condition named after its task (robust-planner-tasks' gpt2-diurnal) is a diurnal
    one because the sweep's manifest says so."""
    cell(tmp_path, "gpt2-diurnal", family="diurnal")
    cell(tmp_path, "gpt2-walk", family="walk")
    groups = groups_of(tmp_path)
    assert (groups["gpt2-diurnal"].family, groups["gpt2-diurnal"].split) == ("diurnal",
                                                                           "held out")
    assert groups["gpt2-walk"].split == "tuning"


def _claim(root: Path):
    return robust_within_oracle(robust.analyse(load_runs(root).runs))


def test_claim_verdicts(tmp_path):
    close = {**LABELS, "deco-sgd-robust": (50.0, 42.0, 30.0)}      # 46 / 45 = 1.02x
    far = {**LABELS, "deco-sgd-robust": (60.0, 60.0, 30.0)}        # 60 / 45 = 1.33x
    both = tmp_path / "both"
    cell(both, "vary", labels=close)
    cell(both, "mild", labels=close)
    cell(both, "flat", labels=far)                  # constant: not judged by this claim
    row = _claim(both)
    assert row.verdict == REPRODUCED and row.value == pytest.approx(46 / 45)
    assert "within 5% in 2 of 2 varying condition(s)" in row.ours
    assert "flat" not in row.condition and "held out from tuning: diurnal" in row.rule
    some = tmp_path / "some"
    cell(some, "vary", labels=far)
    cell(some, "diurnal", labels=close)
    row = _claim(some)
    assert row.verdict == PARTLY and row.value == pytest.approx(60 / 45)
    assert row.ours.startswith("worst vary: 1.33x the oracle's TTT; within 5% in 1 of 2")
    assert "held out (diurnal): 1 of 1" in row.ours
    assert row.interval == "[1.20x, 1.50x] (vary)"      # seeds 0, 1: 60/50 and 60/40
    none = tmp_path / "none"
    cell(none, "vary", labels=far)
    assert _claim(none).verdict == NOT_REPRODUCED
    flat_only = tmp_path / "flat"
    cell(flat_only, "flat", labels=close)
    row = _claim(flat_only)
    assert row.verdict == NOT_RUN and "`robust-planner`" in row.rule
    assert robust_within_oracle([]).verdict == NOT_RUN


def test_the_report_has_the_section_tables_figure_and_claim(tmp_path):
    cell(tmp_path, "step-drop")
    cell(tmp_path, "flat")
    out = write_report(tmp_path, tmp_path / "report")
    text = out.markdown.read_text()
    theory_at = text.index("## Theory")
    section = text.index("## Robust planner: deco-sgd-robust against the per-seed oracle")
    assert theory_at < section < text.index("## Where the time goes")
    oracle = out.rows["robust_oracle"]
    first = next(r for r in oracle if r["condition"] == "step-drop")
    assert first["per-seed oracle (δ, τ, TTT)"] == (
        "s0: δ 0.01, τ 1 (50.00 s); s1: δ 0.1, τ 2 (40.00 s); s2: none reached")
    assert (first["median TTT (s)"], first["seeds"]) == ("45.00", "2 of 3")
    row = next(r for r in oracle if r["condition"] == "step-drop"
               and r["strategy"] == "deco-sgd-robust")
    assert (row["TTT / oracle TTT"], row["95% interval"], row["per-seed ratio"]) == (
        "1.07x", "[1.04x, 1.10x]", "[1.04x, 1.10x]")
    targets = {r["condition"]: r for r in out.rows["robust_targets"]}
    assert targets["step-drop"]["target_a"] == robust.MISSED
    assert targets["flat"]["target_c"] == robust.HOLDS      # deco-sgd's 80 s over 44 s
    assert "robust_plans" in out.figures
    assert "step-drop (bandwidth CV 0.50: varies (>= 0.3)), seed 0" in text
    claim = out.rows["claims"][-1]
    assert claim["claim"].startswith("(this project's check) deco-sgd-robust")
    assert claim["verdict"] == NOT_REPRODUCED
    again = write_report(tmp_path, tmp_path / "again")
    for name in ("robust_oracle", "robust_targets"):
        assert again.csv[name].read_bytes() == out.csv[name].read_bytes()
    for a, b in zip(again.figures["robust_plans"], out.figures["robust_plans"], strict=True):
        assert a.read_bytes() == b.read_bytes()


def test_without_robust_runs_the_section_is_one_line(tmp_path):
    cell(tmp_path, "vary", role="theory")
    text = write_report(tmp_path, tmp_path / "report").markdown.read_text()
    assert ("## Robust planner: deco-sgd-robust against the per-seed oracle\n\nSkipped: no "
            "robust runs") in text
