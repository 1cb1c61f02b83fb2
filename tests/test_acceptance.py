"""The acceptance scenario of the foundation and baselines issues, run in full on the
offline Fashion-MNIST slice.

CNN@FashionMNIST, 4 workers, the bundled high-latency low-bandwidth varying trace, target
accuracy 0.75, each of the five methods of the paper's comparison: every method reaches the
target, DeCo-SGD is at least 3x faster than D-SGD and faster than Accordion and DGA, DeCo's δ
follows the bandwidth it measured, and CocktailSGD runs DeCo's first plan, frozen. Whether
DeCo-SGD also beats CocktailSGD is the paper's claim, judged by the report's claims table from
runs, not asserted here (on this trace it does not: see the test). Simulated times are
deterministic, so these are not timed asserts.

About 2.5 minutes on 2 cores (five runs to 0.75), so it runs in ``make test-slow``; ``make
test`` keeps the smoke sweep (tests/test_sweep_smoke.py) and the CI smoke check
(tests/test_ci_workflow.py) as its end-to-end runs.
"""

import pytest

from decobench.cli.main import main
from decobench.runs.rundir import read_metrics, read_summary

pytestmark = pytest.mark.slow

METHODS = ("d-sgd", "accordion", "dga", "cocktail-sgd", "deco-sgd")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, fmnist_root):
    root = tmp_path_factory.mktemp("acceptance")
    for method in METHODS:
        assert main(["run", "--task", "cnn-fmnist", "--method", method, "--workers", "4",
                     "--trace", "wan-200ms-lowbw-varying", "--target", "0.75", "--data-root",
                     str(fmnist_root), "--out", str(root / method), "--no-progress"]) == 0
    return root


def test_every_method_reaches_the_target_and_deco_sgd_beats_the_top_k_family(runs):
    summaries = {m: read_summary(runs / m) for m in METHODS}
    assert all(s["reached"] and s["status"] == "finished" for s in summaries.values())
    ttt = {m: s["time_to_target_s"] for m, s in summaries.items()}
    assert ttt["deco-sgd"] * 3 <= ttt["d-sgd"], ttt
    assert ttt["deco-sgd"] < min(ttt["accordion"], ttt["dga"]), ttt
    # Not "DeCo-SGD is the fastest of the five": since CocktailSGD probes with DeCo's message
    # size (--cocktail-probe deco, fe1d046) it runs DeCo's first plan frozen with 4-bit values,
    # and on this trace reaches 0.75 first: 76.22 s against DeCo-SGD's 82.57 s (with
    # --cocktail-probe own, 92.21 s). That is a finding about the paper's claim, which the
    # claims table reports from runs; a test that asserted it would turn a result into a rule.


def test_deco_delta_follows_measured_bandwidth(runs):
    plans = [r for r in read_metrics(runs / "deco-sgd") if "plan_bandwidth_mbps" in r]
    assert len(plans) >= 3
    # δ is monotone in the measured bandwidth across re-plans with the same τ
    same_tau = [(r["plan_bandwidth_mbps"], r["delta"]) for r in plans
                if r["tau"] == plans[0]["tau"]]
    ordered = sorted(same_tau)
    assert [d for _, d in ordered] == sorted(d for _, d in ordered)
    assert len({round(d, 6) for _, d in same_tau}) > 1


def test_cocktail_sgd_runs_decos_first_plan_frozen(runs):
    deco_first = next(r for r in read_metrics(runs / "deco-sgd") if "plan_bandwidth_mbps" in r)
    rows = read_metrics(runs / "cocktail-sgd")
    planned = rows[deco_first["iteration"] - 1:]
    assert {r["tau"] for r in planned} == {deco_first["tau"]}
    assert all(r["delta"] == pytest.approx(deco_first["delta"], rel=1e-4) for r in planned)
    assert max(r["bits"] for r in planned) < deco_first["bits"] / 4   # 4-bit values + mask


def test_baselines_log_their_decisions(runs):
    dga = [r for r in read_metrics(runs / "dga") if "dga_delay" in r]
    assert len(dga) == 1 and dga[0]["dga_delay"] >= 1
    checks = [r["accordion_check"] for r in read_metrics(runs / "accordion")
              if "accordion_check" in r]
    assert checks and all(set(c["layers"]) == {"conv1.weight", "conv2.weight", "fc1.weight",
                                               "fc2.weight"} for c in checks)
