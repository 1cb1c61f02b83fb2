"""decobench.netem.tc: the tc command lines for one link (pure; no root needed)."""

import math

import pytest

from decobench.errors import DecobenchError
from decobench.netem.tc import (
    FRAME_BYTES,
    QUEUE_FLOOR_BYTES,
    TCP_FRAMING_FACTOR,
    LinkSetting,
    burst_bytes,
    clear_commands,
    device_commands,
    format_command,
    gso_segments,
    netem_limit_packets,
    queue_limit_bytes,
    shaping_commands,
    tc_rate_bps,
)

S = LinkSetting(rate_bps=20e6, latency_s=0.1)
# 20 Mbit/s goodput -> 20e6 * 1514/1448 = 20911602.2 bit/s on the wire
R = 20911602
CLASSES_ADD = [
    "tc class add dev eth0 parent 1: classid 1:1 htb rate 20911602bit ceil 20911602bit "
    "burst 3028 cburst 3028 quantum 1514",
    "tc class add dev eth0 parent 1:1 classid 1:10 htb rate 1045580bit ceil 20911602bit "
    "burst 3028 cburst 3028 prio 0 quantum 1514",
    "tc class add dev eth0 parent 1:1 classid 1:20 htb rate 19866022bit ceil 20911602bit "
    "burst 3028 cburst 3028 prio 1 quantum 1514",
]
ROOT_ADD = "tc qdisc add dev eth0 root handle 1: htb default 20"
FILTER_ADD = (
    "tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match u16 0x0000 0xff80 at 2 "
    "flowid 1:10"
)


def lines(commands):
    return [format_command(c) for c in commands]


def test_framing_factor_is_tcp_at_mtu_1500():
    assert TCP_FRAMING_FACTOR == 1514 / 1448
    assert tc_rate_bps(S) == R
    assert tc_rate_bps(S, framing_factor=1.0) == 20_000_000
    with pytest.raises(ValueError, match="framing_factor"):
        tc_rate_bps(S, framing_factor=0.9)


def test_burst_and_bdp_queue_rules():
    # 1 ms of bytes at 20.9 Mbit/s is 2614 bytes: two full frames win
    assert burst_bytes(R) == 2 * FRAME_BYTES
    # at 1 Gbit/s 1 ms is 125,000 bytes
    assert burst_bytes(1e9) == 125_000
    # offload packets of about 1 ms: 1 frame at 20 Mbit/s, 8 at 100, the cap of 16 above
    assert [gso_segments(r) for r in (2e6, R, 100e6, 200e6, 1e9)] == [1, 1, 8, 16, 16]
    # BDP: 20911602/8 * (2*0.1 + 0.05) = 653487.6 -> 653488
    assert queue_limit_bytes(R, 0.1) == 653488
    # no latency: 20911602/8 * 0.05 = 130697.5 -> 130698 (above the 64-frame floor)
    assert queue_limit_bytes(R, 0.0) == 130698
    assert queue_limit_bytes(1e6, 0.0) == QUEUE_FLOOR_BYTES == 64 * 1514
    # netem leaf: (653488 + 20911602/8*0.1) / 1514 = 604.2 -> 605 packets
    assert netem_limit_packets(R, 0.1) == math.ceil((653488 + R / 8 * 0.1) / 1514) == 605


def test_netem_add_commands():
    got = lines(shaping_commands("eth0", S, "netem", "add"))
    assert got == [
        ROOT_ADD,
        *CLASSES_ADD,
        "tc qdisc add dev eth0 parent 1:10 handle 10: netem delay 100000us limit 1000",
        "tc qdisc add dev eth0 parent 1:20 handle 20: netem delay 100000us limit 605",
        FILTER_ADD,
    ]


def test_comm_layer_add_commands_have_no_delay():
    got = lines(shaping_commands("eth0", S, "comm-layer", "add"))
    assert got == [
        ROOT_ADD,
        *CLASSES_ADD,
        "tc qdisc add dev eth0 parent 1:10 handle 10: pfifo limit 1000",
        # the kernel adds no latency, but the queue is sized from the emulated path's
        # BDP: 20911602/8 * (2 * 0.1 + 0.05) = 653487.6 -> 653488 bytes
        "tc qdisc add dev eth0 parent 1:20 handle 20: bfifo limit 653488",
        FILTER_ADD,
    ]
    assert not any("netem" in line for line in got)


@pytest.mark.parametrize("mechanism", ["netem", "comm-layer"])
def test_change_updates_classes_and_leaves_in_place(mechanism):
    add = shaping_commands("eth0", S, mechanism, "add")
    change = shaping_commands("eth0", S, mechanism, "change")
    # change = the add commands for classes and leaves with "change"; no root, no filter
    expected = [[("change" if w == "add" else w) for w in argv] for argv in add[1:-1]]
    assert change == expected
    assert all(argv[2] == "change" for argv in change)
    assert not any(w in ("add", "del", "delete", "replace") for argv in change for w in argv)


def test_change_to_a_new_setting():
    got = lines(shaping_commands("eth0", LinkSetting(5e6, 0.02), "netem", "change"))
    r = round(5e6 * 1514 / 1448)  # 5227901
    assert got[0] == (
        f"tc class change dev eth0 parent 1: classid 1:1 htb rate {r}bit ceil {r}bit "
        "burst 3028 cburst 3028 quantum 1514"
    )
    assert got[4].startswith("tc qdisc change dev eth0 parent 1:20 handle 20: netem delay 20000us")


def test_netns_and_framing_options():
    got = shaping_commands("eth0", S, "comm-layer", "add", framing_factor=1.0, netns="ns1")
    assert all(argv[:5] == ["ip", "netns", "exec", "ns1", "tc"] for argv in got)
    assert "20000000bit" in got[1]
    assert device_commands("eth0", "ns1") == [
        ["ip", "netns", "exec", "ns1", "ip", "link", "set", "dev", "eth0", "gso_max_segs", "16"]
    ]
    assert device_commands("eth0", rate_bps=R)[0][-1] == "1"
    assert clear_commands("eth0") == [["tc", "qdisc", "del", "dev", "eth0", "root"]]


def test_bad_arguments():
    with pytest.raises(ValueError, match="latency mechanism"):
        shaping_commands("eth0", S, "kernel", "add")
    with pytest.raises(ValueError, match="tc action"):
        shaping_commands("eth0", S, "netem", "delete")
    with pytest.raises(ValueError, match="device"):
        shaping_commands("", S, "netem", "add")


@pytest.mark.parametrize(
    "rate, latency, message",
    [
        (0, 0.1, "rate_bps"),
        (-1, 0.1, "rate_bps"),
        (math.inf, 0.1, "rate_bps"),
        (1e6, -0.001, "latency_s"),
        (1e6, math.nan, "latency_s"),
    ],
)
def test_link_setting_validation(rate, latency, message):
    with pytest.raises(DecobenchError, match=message) as info:
        LinkSetting(rate, latency)
    assert isinstance(info.value, ValueError)


def test_link_setting_zero_latency_and_describe():
    s = LinkSetting(20e6, 0)
    assert s.latency_s == 0.0 and isinstance(s.rate_bps, float)
    assert LinkSetting(20e6, 0.1).describe() == "20 Mbit/s, 100 ms"


def test_format_command_quotes():
    assert format_command(["ip", "link", "set", "lo", "alias", "a b"]) == (
        "ip link set lo alias 'a b'"
    )


# ------------------------------------------------------------------------------ read-back
# what this kernel's tc printed for the 20 Mbit/s comm-layer tree (tc class/qdisc show)
CLASSES = """class htb 1:1 root rate 20911Kbit ceil 20911Kbit burst 10455b cburst 10455b
class htb 1:10 parent 1:1 leaf 10: prio 0 rate 1045Kbit ceil 20911Kbit burst 10452b cburst 10455b
class htb 1:20 parent 1:1 leaf 20: prio 1 rate 19866Kbit ceil 20911Kbit burst 10452b cburst 10455b
"""
QDISCS = """qdisc htb 1: root refcnt 2 r2q 10 default 0x20 direct_packets_stat 0 direct_qlen 1000
qdisc pfifo 10: parent 1:10 limit 1000p
qdisc bfifo 20: parent 1:20 limit 653488b
"""


def test_readback_of_what_was_set_is_clean_and_names_each_difference():
    from decobench.netem.tc import check_readback, parse_classes, parse_qdiscs

    assert parse_classes(CLASSES)["1:1"] == {"rate": 20_911_000.0, "ceil": 20_911_000.0}
    assert parse_qdiscs(QDISCS)["20:"] == {"kind": "bfifo", "parent": "1:20"}
    twenty = LinkSetting(20e6, 0.1)
    assert check_readback(CLASSES, QDISCS, twenty, "comm-layer") == []
    assert check_readback(CLASSES, QDISCS, twenty, "nfqueue") == []
    assert check_readback(CLASSES, QDISCS, LinkSetting(10e6, 0.1), "comm-layer") == [
        "class 1:1 rate 20.91 Mbit/s, set 10.46 Mbit/s",
        "class 1:1 ceil 20.91 Mbit/s, set 10.46 Mbit/s"]
    assert check_readback(CLASSES, QDISCS, twenty, "netem") == [
        "leaf 10: is pfifo, not netem with a delay", "leaf 20: is bfifo, not netem with a delay"]
    netem = QDISCS.replace("pfifo 10: parent 1:10 limit 1000p",
                           "netem 10: parent 1:10 limit 1000 delay 100ms")
    netem = netem.replace("bfifo 20: parent 1:20 limit 653488b",
                          "netem 20: parent 1:20 limit 605 delay 98ms")
    assert check_readback(CLASSES, netem, twenty, "netem") == [
        "leaf 20: delays 98.000 ms, set 100.000 ms"]
    unshaped = "qdisc noqueue 0: root refcnt 2\n"
    assert check_readback("", unshaped, twenty, "netem") == [
        "no HTB root qdisc 1: (qdiscs: noqueue 0:): the link is not shaped"]
    assert check_readback("class htb 1:1 root rate 20.9Xbit", QDISCS, twenty, "netem")[0] \
        .startswith("tc's answer could not be read")


def test_readback_allows_the_kernels_whole_bytes_per_second():
    from decobench.netem.tc import check_readback

    # an outage row of 1 kbit/s: tc is given 1046 bit/s and keeps 130 bytes/s
    low = CLASSES.replace("rate 20911Kbit ceil 20911Kbit", "rate 1040bit ceil 1040bit", 1)
    assert check_readback(low, QDISCS, LinkSetting(1e3, 0.1), "comm-layer") == []


def test_burst_payload_bits_by_hand():
    """20 Mbit/s of goodput is 20,911,602 bit/s of frames (x 1514/1448); its bucket is two
    frames (3,028 bytes > 1 ms of the rate), which carry 2 x 1,448 payload bytes: 23,168
    bits. At 1 Gbit/s the frame rate is 1,045,580,110 bit/s and the bucket 1 ms of it,
    ceil(130,697.5) = 130,698 bytes, in payload 130,698 x 8 x 1448/1514 bits."""
    from decobench.netem.tc import burst_payload_bits

    assert burst_payload_bits(20e6) == pytest.approx(23_168.0)
    assert burst_payload_bits(1e9) == pytest.approx(8 * 130_698 * 1448 / 1514)


def test_the_worker_takes_the_burst_out_only_on_links_decobench_shapes():
    from decobench.emulated.worker import EmulationSettings, _shaper_burst
    from decobench.netem.tc import burst_payload_bits

    launcher = EmulationSettings(latency_mechanism="kernel", timeout_s=10.0,
                                 network={"shaping": "tc on each worker's egress (veth)"})
    player = EmulationSettings(latency_mechanism="kernel", timeout_s=10.0,
                               network={"shaper": {"mechanism": "nfqueue"}})
    real = EmulationSettings(latency_mechanism="kernel", timeout_s=10.0)
    assert _shaper_burst(launcher) is burst_payload_bits
    assert _shaper_burst(player) is burst_payload_bits
    assert _shaper_burst(real) is None
