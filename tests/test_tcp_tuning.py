"""TCP tuned for a long fat network on the emulated hosts (decobench.netem.tcp): the window
is one bandwidth-delay product, routes keep what they said, and the read-back refuses a
host whose tuning did not take."""

import pytest
from fake_tc import TcEcho

from decobench.errors import DecobenchError
from decobench.netem.tcp import (
    BUFFER_FLOOR_BYTES,
    HOST_CHANGES_ENV,
    MAX_INITIAL_WINDOW,
    HostChange,
    allow_command,
    apply_tuning,
    buffer_bytes,
    check_tuning,
    congestion_control_allowed,
    host_changes_from_env,
    host_changes_to_env,
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
                                             r"'bbr', not cubic.*host allows it: sysctl -w "
                                             r"net.ipv4.tcp_allowed_congestion_control="):
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


# ------------------------------------------------------------ the host's allowed list
def test_a_host_that_does_not_allow_cubic_allows_it_while_the_block_runs(tmp_path):
    """Issue 38's host: allowed 'reno bbr'. The list gets cubic for the block, the change is
    said twice (added, restored) and the old list is written back."""
    echo, notes = TcEcho(allowed="reno bbr"), []
    with congestion_control_allowed(echo.answer, echo.answer, notes.append,
                                    lock_dir=str(tmp_path)) as change:
        assert echo.allowed == "reno bbr cubic"
        # a namespace may now choose cubic (the fake refuses it otherwise, as the kernel does)
        apply_tuning(echo.answer, echo.answer, "eth0", 346, "ns0", "worker 0")
    assert (change.key, change.before, change.during) == (
        "net.ipv4.tcp_allowed_congestion_control", "reno bbr", "reno bbr cubic")
    assert echo.allowed_writes == ["reno bbr cubic", "reno bbr"]
    assert len(notes) == 2 and "was 'reno bbr'; added cubic" in notes[0]
    assert "restored" in notes[1]
    # without the block the namespace's write is refused and the read-back names the fix
    with pytest.raises(DecobenchError, match="host allows it: sysctl -w"):
        apply_tuning(echo.answer, echo.answer, "eth0", 346, "ns1", "worker 1")


def test_a_host_that_allows_cubic_is_left_alone(tmp_path):
    echo, notes = TcEcho(allowed="reno cubic"), []
    with congestion_control_allowed(echo.answer, echo.answer, notes.append,
                                    lock_dir=str(tmp_path)) as change:
        pass
    assert change is None and notes == [] and echo.allowed_writes == []


def test_the_list_is_restored_after_an_error_in_the_block(tmp_path):
    echo = TcEcho(allowed="reno bbr")
    with pytest.raises(RuntimeError, match="boom"):
        with congestion_control_allowed(echo.answer, echo.answer, lambda line: None,
                                        lock_dir=str(tmp_path)):
            raise RuntimeError("boom")
    assert echo.allowed == "reno bbr" and echo.allowed_writes[-1] == "reno bbr"


def test_a_list_that_cannot_be_written_stops_with_the_command_that_fixes_it(tmp_path):
    """Inside a container (not the initial network namespace) the list is read-only."""
    echo = TcEcho(allowed="reno bbr")

    def in_a_container(argv):
        if argv[:1] == ["sh"]:
            raise PermissionError("cannot create /proc/sys/net/ipv4/"
                                  "tcp_allowed_congestion_control: Permission denied")
        return echo.answer(argv)

    with pytest.raises(DecobenchError) as caught:
        with congestion_control_allowed(in_a_container, echo.answer, lambda line: None,
                                        lock_dir=str(tmp_path)):
            pytest.fail("not reached")
    message = str(caught.value)
    assert "allows only 'reno bbr'" in message and "Permission denied" in message
    assert message.endswith(allow_command("cubic"))
    assert "\n" not in message
    assert allow_command("cubic") == ('sysctl -w net.ipv4.tcp_allowed_congestion_control='
                                      '"$(sysctl -n net.ipv4.tcp_allowed_congestion_control) '
                                      'cubic"')


def test_a_kernel_without_cubic_is_named(tmp_path):
    echo = TcEcho(allowed="reno bbr")

    def no_cubic(argv):
        return "reno bbr\n" if argv[-1].endswith("available_congestion_control") else \
            echo.answer(argv)

    with pytest.raises(DecobenchError, match="this kernel has no cubic congestion control"):
        with congestion_control_allowed(echo.answer, no_cubic, lambda line: None,
                                        lock_dir=str(tmp_path)):
            pytest.fail("not reached")
    assert echo.allowed_writes == []


def test_host_changes_travel_through_the_environment_and_bad_values_are_named():
    change = HostChange("net.ipv4.tcp_allowed_congestion_control", "reno bbr", "reno bbr cubic")
    value = host_changes_to_env([change])
    assert value == ('[{"key": "net.ipv4.tcp_allowed_congestion_control", "before": '
                     '"reno bbr", "during": "reno bbr cubic"}]')
    assert host_changes_from_env({HOST_CHANGES_ENV: value}) == [change]
    assert host_changes_from_env({}) == [] == host_changes_from_env({HOST_CHANGES_ENV: " "})
    for bad in ("cubic", '[{"key": "x"}]', "[1]"):
        with pytest.raises(DecobenchError, match=f"{HOST_CHANGES_ENV}=.*unset it"):
            host_changes_from_env({HOST_CHANGES_ENV: bad})


def test_the_command_line_runs_a_command_with_cubic_allowed_and_restores(host_without_cubic):
    """``python -m decobench.netem.tcp -- CMD`` (docs/docker.md: around `docker compose up`),
    live on a host list without cubic."""
    import subprocess
    import sys

    allowed = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
    without = open(allowed).read().strip()
    proc = subprocess.run([sys.executable, "-m", "decobench.netem.tcp", "--", "sh", "-c",
                           f'cat {allowed}; echo "$DECOBENCH_HOST_CHANGES"'],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    listed, handed_on = proc.stdout.splitlines()
    assert listed.split() == [*without.split(), "cubic"]
    # the command learns what was changed (docker/compose.yaml hands it to the workers)
    assert host_changes_from_env({HOST_CHANGES_ENV: handed_on}) == [HostChange(
        "net.ipv4.tcp_allowed_congestion_control", without, f"{without} cubic")]
    assert "added cubic" in proc.stderr and "restored" in proc.stderr
    assert open(allowed).read().strip() == without
    # the command's own status comes back; no command is a usage error
    assert subprocess.run([sys.executable, "-m", "decobench.netem.tcp", "--", "false"],
                          capture_output=True, timeout=120).returncode == 1
    assert subprocess.run([sys.executable, "-m", "decobench.netem.tcp"],
                          capture_output=True, timeout=120).returncode == 2
