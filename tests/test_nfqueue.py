"""The nfqueue latency mechanism: netlink messages (hand-checked bytes), the hold queue, and,
as root with iptables, delayers that give every packet the trace's one-way latency."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys

import pytest

from decobench.errors import DecobenchError
from decobench.netem.netns import NamespaceNetwork, NetworkPlan
from decobench.netem.nfqueue import (
    DelayStats,
    HoldQueue,
    ack_error,
    bind_message,
    params_message,
    parse_packet_ids,
    rule_commands,
    verdict_batch_message,
)
from decobench.netem.probe import probe_links
from decobench.netem.tc import LinkSetting, shaping_commands


# ------------------------------------------------------------------------------ netlink
def test_bind_message_bytes():
    # nlmsghdr: length 28, type NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_CONFIG, flags REQUEST|ACK,
    # seq 1, pid 0; nfgenmsg: AF_UNSPEC, version 0, queue 0 (big-endian); one attribute
    # NFQA_CFG_CMD (length 8, type 1): command BIND, pad, pf 0
    assert bind_message(0).hex() == (
        "1c000000" "0203" "0500" "01000000" "00000000"
        "00000000"
        "08000100" "01000000"
    )
    assert bind_message(5, unbind=True)[16:20].hex() == "00000005"  # queue 5, network order
    assert bind_message(5, unbind=True)[24] == 2  # NFQNL_CFG_CMD_UNBIND


def test_verdict_batch_message_bytes():
    # type NFQNL_MSG_VERDICT_BATCH, flags REQUEST only; NFQA_VERDICT_HDR (length 12, type 2):
    # verdict NF_ACCEPT (1) and the last id (42), both big-endian
    assert verdict_batch_message(0, 42).hex() == (
        "20000000" "0303" "0100" "00000000" "00000000"
        "00000000"
        "0c000200" "00000001" "0000002a"
    )


def test_params_message_copies_metadata_and_keeps_gso_packets_whole():
    message = params_message(0)
    # NFQA_CFG_PARAMS: copy range 0, mode NFQNL_COPY_META (1), padded to 12 bytes
    assert message[20:32].hex() == "09000200" "00000000" "01000000"
    # NFQA_CFG_QUEUE_MAXLEN 100,000, then the flags and mask NFQA_CFG_F_GSO (4)
    assert message[32:40].hex() == "08000300" + struct.pack("!I", 100_000).hex()
    assert message[40:56].hex() == "08000500" "00000004" "08000400" "00000004"
    assert len(params_message(0, gso=False)) == 40


def _packet(packet_id: int, first_attr: bytes = b"") -> bytes:
    header = struct.pack("=HH", 11, 1) + struct.pack("!IHB", packet_id, 0x0800, 1) + b"\0"
    body = bytes(4) + first_attr + header
    return struct.pack("=IHHII", 16 + len(body), 0x0300, 0, 0, 0) + body


def test_parse_packet_ids_reads_every_packet_and_skips_the_rest():
    other_attr = struct.pack("=HH", 8, 9) + bytes(4)  # an attribute before the header
    error = struct.pack("=IHHII", 20, 2, 0, 0, 0) + struct.pack("=i", 0)
    data = _packet(7) + error + _packet(8, other_attr) + _packet(9)
    assert parse_packet_ids(data) == [7, 8, 9]
    assert parse_packet_ids(b"") == [] and parse_packet_ids(bytes(8)) == []


def test_ack_error():
    ok = struct.pack("=IHHII", 36, 2, 0, 1, 0) + struct.pack("=i", 0) + bytes(16)
    busy = struct.pack("=IHHII", 36, 2, 0, 1, 0) + struct.pack("=i", -16) + bytes(16)
    assert ack_error(ok) == 0 and ack_error(busy) == 16
    with pytest.raises(DecobenchError, match="short netlink answer"):
        ack_error(b"\0" * 4)


# --------------------------------------------------------------------------- hold queue
def test_hold_queue_releases_in_arrival_order_at_the_delay_in_force_on_arrival():
    q = HoldQueue(0.125)  # binary fractions: exact arithmetic
    q.hold(1, 0.0)
    q.hold(2, 0.0625)
    assert q.release(0.12) == (None, [])
    assert q.next_due() == 0.125
    assert q.release(0.125) == (1, [0.0])
    q.delay_s = 0.015625
    q.hold(3, 0.09375)  # due at 0.109375, but packet 2 (due 0.1875) is ahead: order is kept
    assert q.release(0.125) == (None, [])
    assert q.release(0.1875) == (3, [0.0, 0.078125])
    q.hold(4, 1.0)
    assert len(q) == 1 and q.drain() == 4 and len(q) == 0 and q.drain() is None


def test_delay_stats_accumulate():
    stats = DelayStats()
    stats.add_lags([0.0002, 0.004])
    stats.add_lags([])
    stats.add_lags([0.0008])
    assert stats.packets == 3 and stats.lag_over_1ms == 1
    assert stats.lag_mean_ms == pytest.approx(5.0 / 3)
    assert stats.lag_max_ms == pytest.approx(4.0)
    stats.cpu_s, stats.wall_s = 0.5, 10.0
    assert stats.to_dict()["cpu_share"] == pytest.approx(0.05)


def test_rule_has_no_bypass_so_a_dead_delayer_never_lets_packets_through_undelayed():
    (add,) = rule_commands("eth0", "add", netns="ns1")
    assert add == ["ip", "netns", "exec", "ns1", "iptables", "-w", "-A", "INPUT", "-i", "eth0",
                   "-j", "NFQUEUE", "--queue-num", "0"]
    assert "--queue-bypass" not in add
    assert rule_commands("eth0", "delete")[0][2] == "-D"
    with pytest.raises(ValueError, match="add or delete"):
        rule_commands("eth0", "flush")


def test_nfqueue_shapes_the_rate_only_in_tc():
    lines = [" ".join(argv) for argv in shaping_commands("eth0", LinkSetting(20e6, 0.1),
                                                         "nfqueue", "add")]
    assert not any("netem" in line for line in lines)
    comm = [" ".join(argv) for argv in shaping_commands("eth0", LinkSetting(20e6, 0.1),
                                                        "comm-layer", "add")]
    assert lines == comm  # same queues, sized for the path's bandwidth-delay product


# --------------------------------------------------------------------------------- live
needs_iptables = pytest.mark.skipif(shutil.which("iptables") is None,
                                    reason="iptables is not installed (make tools installs it)")


@needs_iptables
def test_delayed_links_give_tcp_the_round_trip_and_follow_a_change(root, capsys):
    plan = NetworkPlan.new(workers=2)
    first, second = LinkSetting(50e6, 0.02), LinkSetting(50e6, 0.06)
    with NamespaceNetwork(plan, first, "nfqueue") as net:
        before = probe_links(net, first, measure_s=1.0, pings=10)
        net.apply(second)
        after = probe_links(net, second, measure_s=1.0, pings=10)
    # Latency, this test's subject, is checked to the probe's tolerance. Goodput is checked
    # only from above: tc's rate caps it however busy the cores are, while how far below the
    # rate the userspace delayer falls depends on the load (44 of 50 Mbit/s at 60 ms in a
    # clean-clone `make test`, 2026-11-29), a bound this suite cannot hold on a busy machine.
    for report in (before, after):
        for lk in report.links:
            assert lk.latency_ok, report.problems()
            assert lk.measured_mbps > 0 and lk.rel_error <= report.tolerance, (
                report.problems())
    with capsys.disabled():
        for report in (before, after):
            for lk in report.links:
                print(f"\n  nfqueue {lk.src}->{lk.dst}: requested {lk.requested_latency_ms:.0f} ms"
                      f" one way, measured {lk.kernel_latency_ms:.2f} ms; goodput "
                      f"{lk.measured_mbps:.2f} of {lk.requested_mbps:.0f} Mbit/s")
        for i, stats in sorted(net.delay_stats.items()):
            print(f"  delayer {i}: {stats.packets} packets, {stats.cpu_s:.3f} CPU s in "
                  f"{stats.wall_s:.1f} s ({stats.cpu_share:.1%} of a core), release lag mean "
                  f"{stats.lag_mean_ms:.3f} ms, max {stats.lag_max_ms:.2f} ms")
    for lk in after.links:
        assert lk.kernel_latency_ms == pytest.approx(60, rel=0.1)
    assert set(net.delay_stats) == {0, 1}
    for stats in net.delay_stats.values():
        assert stats.packets > 100 and stats.delay_changes == 1 and stats.cpu_s > 0
    assert net.delay_report()["delayers"]["0"]["packets"] == net.delay_stats[0].packets


@needs_iptables
def test_a_killed_delayer_drops_packets_and_is_reported(root):
    plan = NetworkPlan.new(workers=2)
    with NamespaceNetwork(plan, LinkSetting(20e6, 0.01), "nfqueue") as net:
        os.kill(net._delayers[1].proc.pid, signal.SIGKILL)
        net._delayers[1].proc.wait()
        assert net.dead_delayers() == [1]
        with pytest.raises(DecobenchError, match="delayer of the link of worker 1 .* exited"):
            net.apply(LinkSetting(20e6, 0.02))
        # nothing reaches worker 1 any more: a connection attempt times out
        code = ("import socket\nsocket.setdefaulttimeout(1.0)\ntry:\n"
                f"    socket.create_connection(({net.worker_address(1)!r}, 9))\n"
                "except TimeoutError:\n    print('timeout')\n"
                "except OSError as e:\n    print('other', e)\n")
        out = subprocess.run([*net.exec_prefix(0), sys.executable, "-c", code],
                             capture_output=True, text=True, timeout=30).stdout
        assert out.strip() == "timeout"
