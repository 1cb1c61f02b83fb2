"""The foundation's acceptance scenario, run in full on the offline Fashion-MNIST slice.

CNN@FashionMNIST, 4 workers, the bundled high-latency low-bandwidth varying trace, target
accuracy 0.75: both D-SGD and DeCo-SGD reach it, DeCo-SGD's simulated time to target is at
most a third of D-SGD's, and DeCo's δ follows the bandwidth it measured. Simulated times
are deterministic, so these are not timed asserts.
"""

from benchmark.cli import main
from benchmark.rundir import read_metrics, read_summary


def _acceptance_run(tmp_path, fmnist_root, method):
    out = tmp_path / method
    assert main(["run", "--task", "cnn-fmnist", "--method", method, "--workers", "4",
                 "--trace", "wan-200ms-lowbw-varying", "--target", "0.75", "--data-root",
                 str(fmnist_root), "--out", str(out), "--no-progress"]) == 0
    return out


def test_deco_sgd_at_least_three_times_faster_than_dsgd(tmp_path, fmnist_root):
    deco = read_summary(_acceptance_run(tmp_path, fmnist_root, "deco-sgd"))
    dsgd = read_summary(_acceptance_run(tmp_path, fmnist_root, "d-sgd"))
    assert deco["reached"] and dsgd["reached"]
    assert deco["time_to_target_s"] * 3 <= dsgd["time_to_target_s"]

    plans = [r for r in read_metrics(tmp_path / "deco-sgd") if "plan_bandwidth_mbps" in r]
    assert len(plans) >= 3
    # δ is monotone in the measured bandwidth across re-plans with the same τ
    same_tau = [(r["plan_bandwidth_mbps"], r["delta"]) for r in plans
                if r["tau"] == plans[0]["tau"]]
    ordered = sorted(same_tau)
    assert [d for _, d in ordered] == sorted(d for _, d in ordered)
    assert len({round(d, 6) for _, d in same_tau}) > 1
