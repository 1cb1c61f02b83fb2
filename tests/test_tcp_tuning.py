"""TCP tuned for a long fat network on the emulated hosts (decobench.netem.tcp): the window
is one bandwidth-delay product, routes keep what they said, and the read-back refuses a
host whose tuning did not take."""

import pytest
from fake_tc import TcEcho

from decobench.errors import DecobenchError
from decobench.netem.tcp import (
    BUFFER_FLOOR_BYTES,
    MAX_INITIAL_WINDOW,
    apply_tuning,
    buffer_bytes,
    check_tuning,
    initial_window_packets,
    route_commands,
)

BUFFERS = "4096\t4194304\t33554432\n" * 2 + "cubic\n"


def test_initial_window_is_one_bandwidth_delay_product_of_full_payloads():
    # 20 Mbit/s x 2 x 100 ms = 500,000 B = 345.3 payloads of 1448 B
    assert initial_window_packets(20e6, 0.1) == 346
    assert initial_window_packets(20e6, 0.0) == 10             # Linux's own floor
    assert initial_window_packets(10e9, 0.2) == MAX_INITIAL_WINDOW
    with pytest.raises(DecobenchError, match="cannot size a TCP window"):
        initial_window_packets(0.0, 0.1)


def test_socket_buffers_are_four_bandwidth_delay_products_within_bounds():
    assert buffer_bytes(20e6, 0.1) == BUFFER_FLOOR_BYTES          # 4 x 500 kB < 4 MiB
    assert buffer_bytes(200e6, 0.1) == 20_000_000                 # 4 x 5 MB
    assert buffer_bytes(10e9, 0.2) == 64 * 1024 * 1024            # the cap


def test_route_change_keeps_the_route_and_replaces_an_old_window():
    routes = ("10.77.1.0/24 proto kernel scope link src 10.77.1.1 initcwnd 10\n"
              "default via 172.18.0.1 linkdown\n")
    assert route_commands(routes, "eth0", 346, netns="ns0") == [
        ["ip", "netns", "exec", "ns0", "ip", "route", "change", "10.77.1.0/24", "proto",
         "kernel", "scope", "link", "src", "10.77.1.1", "dev", "eth0", "initcwnd", "346",
         "initrwnd", "346"],
        ["ip", "netns", "exec", "ns0", "ip", "route", "change", "default", "via",
         "172.18.0.1", "dev", "eth0", "initcwnd", "346", "initrwnd", "346"]]
    with pytest.raises(DecobenchError, match="eth0 has no routes"):
        route_commands("\n", "eth0", 346)


def test_check_refuses_a_host_whose_tuning_did_not_take():
    good = "10.0.0.0/24 proto kernel scope link src 10.0.0.1 initcwnd 346 initrwnd 346"
    check_tuning(good, "0\n" + BUFFERS, 346, "worker 0")
    with pytest.raises(DecobenchError, match=r"worker 0: .*tcp_slow_start_after_idle is "
                                             r"'1'.*container's sysctls"):
        check_tuning(good, "1\n" + BUFFERS, 346, "worker 0")
    with pytest.raises(DecobenchError, match="does not carry initrwnd 346"):
        check_tuning(good.replace("initrwnd 346", "initrwnd 10"), "0\n" + BUFFERS, 346,
                     "worker 0")
    linux = "0\n4096\t131072\t6291456\n4096\t16384\t4194304\ncubic\n"
    with pytest.raises(DecobenchError, match=r"tcp_rmem is .*default below 4194304 bytes"):
        check_tuning(good, linux, 346, "worker 0", buffer=4194304)
    # this project's hosts default to BBR, which stalls collectives by round trips
    with pytest.raises(DecobenchError, match=r"worker 0: net.ipv4.tcp_congestion_control is "
                                             r"'bbr', not cubic.*tcp_available_congestion"):
        check_tuning(good, "0\n" + BUFFERS.replace("cubic", "bbr"), 346, "worker 0")
    with pytest.raises(DecobenchError, match="could not read .*tcp_congestion_control"):
        check_tuning(good, "0\n" + BUFFERS.replace("cubic\n", ""), 346, "worker 0")


def test_a_read_only_sysctl_is_checked_not_trusted():
    echo = TcEcho()

    def read_only(argv):
        if "sh" in argv and "/proc/sys/" in argv[-1]:
            raise PermissionError("/proc/sys is read-only")
        return echo.answer(argv)

    with pytest.raises(DecobenchError, match="is '1', not 0"):
        apply_tuning(read_only, echo.answer, "eth0", 346, None, "eth0")
    # what docker/compose.yaml's sysctls give a worker container
    echo.sysctls.update({(None, "net.ipv4.tcp_slow_start_after_idle"): "0",
                         (None, "net.ipv4.tcp_rmem"): "4096\t4194304\t33554432",
                         (None, "net.ipv4.tcp_wmem"): "4096\t4194304\t33554432",
                         (None, "net.ipv4.tcp_congestion_control"): "cubic"})
    tuning = apply_tuning(read_only, echo.answer, "eth0", 346, None, "eth0")
    assert (tuning.initial_window, tuning.buffer_bytes) == (346, BUFFER_FLOOR_BYTES)
