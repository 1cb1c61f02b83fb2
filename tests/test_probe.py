"""decobench.netem.probe: the pre-training link probe (real namespaces when root) and its report."""

import json

import pytest

from decobench.errors import DecobenchError
from decobench.netem.netns import NamespaceNetwork, NetworkPlan, resolve_latency_mechanism
from decobench.netem.probe import (
    LATENCY_SLACK_S,
    ProbeReport,
    evaluate_link,
    goodput_slope,
    probe_links,
    warmup_seconds,
    write_probe,
)
from decobench.netem.tc import LinkSetting

REQUEST = LinkSetting(rate_bps=20e6, latency_s=0.05)


def link(mechanism, bytes_per_s, rtt_s, setting=REQUEST, tolerance=0.1):
    result = {"bytes_per_s": bytes_per_s, "bytes": 1000, "seconds": 1.0}
    return evaluate_link(
        0, 1, ("10.77.0.1", "10.77.0.2"), setting, mechanism, tolerance, result, [rtt_s] * 5
    )


# ------------------------------------------------------------------------------- pure
def test_goodput_slope_averages_lumps():
    # 1000 bytes every 10 ms, delivered in lumps of 5: slope is still 100 kB/s
    samples = [(0.05 * k, 5000 * k) for k in range(1, 21)]
    assert goodput_slope(samples) == pytest.approx(100_000)
    assert goodput_slope([(1.0, 5)]) == 0.0


def test_evaluate_link_goodput_and_latency_rules():
    ok = link("netem", 20e6 / 8 * 0.97, 2 * 0.052)
    assert ok.ok and ok.measured_mbps == pytest.approx(19.4)
    assert ok.rel_error == pytest.approx(-0.03) and ok.kernel_latency_ms == pytest.approx(52)
    slow = link("netem", 20e6 / 8 * 0.85, 0.1)
    assert not slow.goodput_ok and slow.latency_ok
    late = link("netem", 20e6 / 8, 2 * 0.06)  # 60 ms vs 50 +- (5 + 2) ms
    assert late.goodput_ok and not late.latency_ok
    # comm-layer: the kernel must add (almost) nothing; the 50 ms come from the comm layer
    assert link("comm-layer", 20e6 / 8, 2 * 0.0005).ok
    assert not link("comm-layer", 20e6 / 8, 2 * (LATENCY_SLACK_S + 0.001)).latency_ok


def test_report_check_names_the_link_and_numbers():
    report = ProbeReport(REQUEST, "comm-layer", 0.1, (link("comm-layer", 10e6 / 8, 0.0002),))
    assert not report.ok
    with pytest.raises(DecobenchError) as info:
        report.check()
    message = str(info.value)
    assert "worker 0 -> worker 1 (10.77.0.1 -> 10.77.0.2)" in message
    assert "goodput 10.00 Mbit/s, requested 20.00 Mbit/s (-50.0%, tolerance 10%)" in message
    data = report.to_dict()
    assert data["latency_mechanism"] == "comm-layer"
    assert "supplied by the communication layer" in data["latency_note"]
    assert data["links"][0]["requested_latency_ms"] == 50
    assert data["problems"] and data["ok"] is False


def test_report_latency_problem_under_comm_layer_explains():
    report = ProbeReport(REQUEST, "comm-layer", 0.1, (link("comm-layer", 20e6 / 8, 0.1),))
    assert "kernel one-way latency 50.00 ms, expected about 0 ms" in report.problems()[0]


def test_one_worker_has_no_links():
    class OneWorker:
        mechanism = "comm-layer"
        workers = 1

    report = probe_links(OneWorker(), REQUEST)
    assert report.ok and report.links == ()
    report.check()


def test_warmup_covers_slow_start():
    assert warmup_seconds(REQUEST, "comm-layer") == pytest.approx(0.3)
    assert warmup_seconds(REQUEST, "netem") == pytest.approx(0.3 + 6 * 0.1)


# ------------------------------------------------------------------------------- real
def test_probe_real_links_deliver_the_requested_goodput(root, tmp_path, capsys):
    mechanism = resolve_latency_mechanism("auto")
    plan = NetworkPlan.new(workers=2)
    with NamespaceNetwork(plan, REQUEST, mechanism) as net:
        report = probe_links(net, REQUEST)
        write_probe(report, net, tmp_path / "network_probe.json")
    with capsys.disabled():
        for lk in report.links:
            print(
                f"\n  probe {lk.src}->{lk.dst} [{mechanism}]: requested {lk.requested_mbps:.2f} "
                f"Mbit/s, measured {lk.measured_mbps:.3f} Mbit/s ({lk.rel_error:+.2%}), "
                f"kernel latency {lk.kernel_latency_ms:.3f} ms"
            )
    assert [(lk.src, lk.dst) for lk in report.links] == [(0, 1), (1, 0)]
    for lk in report.links:
        assert abs(lk.rel_error) <= 0.10, report.problems()
        assert lk.mechanism == mechanism
    assert report.ok, report.problems()
    report.check()
    data = json.loads((tmp_path / "network_probe.json").read_text())
    assert data["ok"] is True and data["latency_mechanism"] == mechanism
    assert data["requested_mbps"] == 20 and data["requested_latency_ms"] == 50
    assert len(data["links"]) == 2
    assert data["tc_commands"] and all(
        c.startswith("ip netns exec dcb") for c in data["tc_commands"]
    )
    assert any("htb rate 20911602bit" in c for c in data["tc_commands"])


def test_probe_detects_a_mis_shaped_link(root):
    plan = NetworkPlan.new(workers=2)
    applied = LinkSetting(rate_bps=10e6, latency_s=0.0)
    requested = LinkSetting(rate_bps=20e6, latency_s=0.0)
    with NamespaceNetwork(plan, applied, "comm-layer") as net:
        report = probe_links(net, requested, measure_s=0.7)
    assert not report.ok
    for lk in report.links:
        assert lk.measured_mbps == pytest.approx(10, rel=0.1)
        assert not lk.goodput_ok and lk.latency_ok
    with pytest.raises(DecobenchError, match=r"link worker 0 -> worker 1 \(10\.77\.") as info:
        report.check()
    assert "requested 20.00 Mbit/s" in str(info.value)
