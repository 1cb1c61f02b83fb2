"""decobench.netem.netns: namespace topology, teardown, cleanup, latency-mechanism resolution."""

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fake_tc import TcEcho

from decobench.errors import DecobenchError
from decobench.netem import host, netns
from decobench.netem.netns import (
    CommandError,
    NamespaceNetwork,
    NetworkPlan,
    ShapingMismatch,
    cleanup_stale,
    kernel_has_netem,
    list_namespaces,
    owner_alive,
    owner_tag,
    require_root,
    resolve_latency_mechanism,
)
from decobench.netem.nfqueue import kernel_has_nfqueue
from decobench.netem.tc import LinkSetting

S = LinkSetting(rate_bps=20e6, latency_s=0.05)


class FakeRunner:
    """Records commands; fails those containing ``fail_on`` with ``stderr``."""

    def __init__(self, fail_on=None, stderr="boom"):
        self.calls = []
        self.reads = []   # tc ... show: the shapers' read-back, answered by TcEcho
        self.tuning = []  # TCP tuning (routes, sysctl), answered by TcEcho
        self.tc = TcEcho()
        self.fail_on = fail_on
        self.stderr = stderr

    def run(self, argv):
        argv = list(argv)
        if TcEcho.is_tuning(argv):
            self.tuning.append(argv)
        else:
            (self.reads if TcEcho.is_read(argv) else self.calls).append(argv)
        if self.fail_on and self.fail_on in " ".join(argv):
            raise CommandError(argv, 2, self.stderr)
        return subprocess.CompletedProcess(argv, 0, self.tc.answer(argv), "")

    def lines(self):
        return [" ".join(a) for a in self.calls]


# --------------------------------------------------------------------------------- plan
def test_plan_names_and_addresses():
    plan = NetworkPlan(workers=3, prefix="dcbab12f", subnet_octet=7)
    assert plan.bridge_namespace == "dcbab12f-br"
    assert plan.bridge_device == "dcbab12fbr"
    assert [plan.worker_namespace(i) for i in range(3)] == [
        "dcbab12f-w0",
        "dcbab12f-w1",
        "dcbab12f-w2",
    ]
    assert plan.peer_device(2) == "dcbab12fw2"
    assert [plan.worker_address(i) for i in range(3)] == ["10.77.7.1", "10.77.7.2", "10.77.7.3"]
    assert plan.namespaces[0] == "dcbab12f-br"
    with pytest.raises(IndexError):
        plan.worker_namespace(3)


def test_plan_new_is_unique_and_short():
    plans = [NetworkPlan.new(workers=4) for _ in range(20)]
    prefixes = {p.prefix for p in plans}
    assert len(prefixes) > 15  # 5 random hex digits
    for p in plans:
        assert p.prefix.startswith("dcb") and len(p.prefix) == 8
        assert p.subnet_octet == int(p.prefix[3:], 16) % 256
        assert len(p.peer_device(3)) <= 15


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"workers": 0, "prefix": "dcb00000", "subnet_octet": 0}, "1 to 254 workers"),
        ({"workers": 255, "prefix": "dcb00000", "subnet_octet": 0}, "1 to 254 workers"),
        ({"workers": 2, "prefix": "Dcb-1", "subnet_octet": 0}, "lowercase"),
        ({"workers": 2, "prefix": "dcbverylongprefix", "subnet_octet": 0}, "too long"),
        ({"workers": 2, "prefix": "dcb00000", "subnet_octet": 256}, "subnet_octet"),
    ],
)
def test_plan_validation(kwargs, message):
    with pytest.raises(DecobenchError, match=message):
        NetworkPlan(**kwargs)


# -------------------------------------------------------------------------- fake runner
def test_command_sequence_with_fake_runner():
    runner = FakeRunner()
    plan = NetworkPlan(workers=2, prefix="dcb00001", subnet_octet=1)
    with NamespaceNetwork(plan, S, "comm-layer", runner=runner) as net:
        created = runner.lines()
        assert net.exec_prefix(1) == ["ip", "netns", "exec", "dcb00001-w1"]
        assert net.worker_address(0) == "10.77.1.1"
        assert net.worker_device(1) == "eth0"
        net.apply(LinkSetting(10e6, 0.05))
        changed = runner.lines()[len(created) :]
    tag = owner_tag()
    assert created[:5] == [
        "ip netns add dcb00001-br",
        f"ip -n dcb00001-br link set lo alias {tag}",
        "ip -n dcb00001-br link set lo up",
        "ip -n dcb00001-br link add dcb00001br type bridge",
        "ip -n dcb00001-br link set dcb00001br up",
    ]
    worker0 = created[5 : 5 + 16]
    assert worker0[:10] == [
        "ip netns add dcb00001-w0",
        f"ip -n dcb00001-w0 link set lo alias {tag}",
        "ip -n dcb00001-w0 link set lo up",
        "ip -n dcb00001-br link add dcb00001w0 type veth peer name eth0 netns dcb00001-w0",
        "ip -n dcb00001-br link set dcb00001w0 master dcb00001br",
        "ip -n dcb00001-br link set dcb00001w0 up",
        "ip -n dcb00001-w0 addr add 10.77.1.1/24 dev eth0",
        "ip netns exec dcb00001-w0 ip link set dev eth0 gso_max_segs 1",
        "ip -n dcb00001-w0 link set eth0 up",
        "ip netns exec dcb00001-w0 tc qdisc add dev eth0 root handle 1: htb default 20",
    ]
    assert all(line.startswith("ip netns exec dcb00001-w0 tc ") for line in worker0[9:])
    assert len(created) == 5 + 2 * 16
    # apply: 5 in-place changes per worker, nothing added or deleted
    assert len(changed) == 10
    assert all(" change " in line for line in changed)
    assert [line.split()[3] for line in changed] == ["dcb00001-w0"] * 5 + ["dcb00001-w1"] * 5
    # teardown: namespaces deleted, workers first
    assert runner.lines()[-3:] == [
        "ip netns del dcb00001-w1",
        "ip netns del dcb00001-w0",
        "ip netns del dcb00001-br",
    ]
    # TCP tuned for a long fat network, and read back (decobench.netem.tcp): comm-layer
    # adds no kernel latency, so the initial window stays Linux's 10 packets
    writes = [" ".join(a) for a in runner.tuning if "cat" not in a and "show" not in a]
    assert writes == [
        f"ip netns exec dcb00001-w{i} {cmd}" for i in range(2) for cmd in (
            "sh -c echo 0 > /proc/sys/net/ipv4/tcp_slow_start_after_idle",
            "sh -c echo 4096 4194304 33554432 > /proc/sys/net/ipv4/tcp_rmem",
            "sh -c echo 4096 4194304 33554432 > /proc/sys/net/ipv4/tcp_wmem",
            "sh -c echo cubic > /proc/sys/net/ipv4/tcp_congestion_control",
            "ip route change 10.77.0.0/24 proto kernel scope link src 10.77.0.1 dev eth0 "
            "initcwnd 10 initrwnd 10")]
    # and three reads per worker, after one of the host's allowed list (cubic is on it)
    assert len(runner.tuning) == 1 + 2 * 8
    assert runner.tuning[0] == ["cat", "/proc/sys/net/ipv4/tcp_allowed_congestion_control"]
    assert net.host_changes == []
    # the log: every command with a timestamp, and the tc ones on their own
    assert len(net.commands) == len(runner.calls) + len(writes)
    assert net.commands[0].split(None, 1)[1] == "ip netns add dcb00001-br"
    assert len(net.tc_commands) == 2 * 7 + 10
    assert all(c.startswith("ip netns exec dcb00001-w") for c in net.tc_commands)
    assert sum("tc qdisc add" in c for c in net.tc_commands) == 2 * 3


def test_a_host_that_does_not_allow_cubic_gets_it_for_the_set_up_and_back_after():
    """Issue 38: a host whose allowed list is 'reno bbr' refuses cubic in a namespace; the
    network adds it while it sets up, says so, logs it with its commands and restores it."""
    runner, notes = FakeRunner(), []
    runner.tc.allowed = "reno bbr"
    plan = NetworkPlan(workers=2, prefix="dcb00004", subnet_octet=4)
    with NamespaceNetwork(plan, S, "comm-layer", runner=runner, notify=notes.append) as net:
        assert runner.tc.allowed == "reno bbr"            # restored before the block
        for i in range(2):
            assert runner.tc.sysctls[(plan.worker_namespace(i),
                                      "net.ipv4.tcp_congestion_control")] == "cubic"
    assert runner.tc.allowed_writes == ["reno bbr cubic", "reno bbr"]
    assert [c.to_dict() for c in net.host_changes] == [
        {"key": "net.ipv4.tcp_allowed_congestion_control", "before": "reno bbr",
         "during": "reno bbr cubic"}]
    assert len(notes) == 2 and "added cubic" in notes[0] and "restored" in notes[1]
    logged = [line.split(None, 1)[1] for line in net.commands]
    allowed = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
    assert logged[0] == f"sh -c 'echo reno bbr cubic > {allowed}'"
    assert logged[1].startswith("'# host setting' net.ipv4.tcp_allowed_congestion_control")
    assert logged.index(f"sh -c 'echo reno bbr > {allowed}'") > max(
        k for k, line in enumerate(logged) if "tcp_congestion_control" in line)


def test_failure_during_setup_tears_down_and_names_the_command():
    runner = FakeRunner(fail_on="netns add dcb00002-w1", stderr="File exists")
    plan = NetworkPlan(workers=2, prefix="dcb00002", subnet_octet=2)
    with pytest.raises(CommandError, match=r"ip netns add dcb00002-w1: File exists"):
        with NamespaceNetwork(plan, S, "netem", runner=runner):
            pytest.fail("not reached")
    deletes = [line for line in runner.lines() if " del " in line]
    assert deletes == ["ip netns del dcb00002-w0", "ip netns del dcb00002-br"]


def test_exception_in_block_tears_down_and_teardown_is_idempotent():
    runner = FakeRunner()
    plan = NetworkPlan(workers=1, prefix="dcb00003", subnet_octet=3)
    net = NamespaceNetwork(plan, S, "comm-layer", runner=runner)
    with pytest.raises(RuntimeError):
        with net:
            raise RuntimeError("training crashed")
    n = len(runner.calls)
    assert runner.lines()[-2:] == ["ip netns del dcb00003-w0", "ip netns del dcb00003-br"]
    net.teardown()
    assert len(runner.calls) == n
    with pytest.raises(DecobenchError, match="not up"):
        net.apply(S)


def test_unknown_mechanism_is_rejected():
    with pytest.raises(DecobenchError, match="resolve_latency_mechanism"):
        NamespaceNetwork(NetworkPlan.new(1), S, "auto", runner=FakeRunner())


def test_resolve_latency_mechanism_with_injected_detection():
    def never():
        raise AssertionError("not asked")

    yes, no = (lambda: True), (lambda: False)
    assert resolve_latency_mechanism("auto", has_netem=yes, has_nfqueue=never) == "netem"
    assert resolve_latency_mechanism("auto", has_netem=no, has_nfqueue=yes) == "nfqueue"
    assert resolve_latency_mechanism("auto", has_netem=no, has_nfqueue=no) == "comm-layer"
    assert resolve_latency_mechanism("netem", has_netem=yes) == "netem"
    assert resolve_latency_mechanism("nfqueue", has_netem=never, has_nfqueue=yes) == "nfqueue"
    assert resolve_latency_mechanism("comm-layer", has_netem=never, has_nfqueue=never) == (
        "comm-layer")
    with pytest.raises(DecobenchError, match="lacks sch_netem.*nfqueue.*comm-layer"):
        resolve_latency_mechanism("netem", has_netem=no, has_nfqueue=yes)
    with pytest.raises(DecobenchError, match="NFQUEUE is not available.*iptables.*comm-layer"):
        resolve_latency_mechanism("nfqueue", has_netem=never, has_nfqueue=no)
    with pytest.raises(DecobenchError, match="choose one of auto, netem, nfqueue, comm-layer"):
        resolve_latency_mechanism("kernel", has_netem=yes)


class ForgetfulRunner(FakeRunner):
    """tc answers success to every change and keeps the old shaping (docker-tc's silent
    failure, in miniature)."""

    def run(self, argv):
        if " change " in " ".join(argv) and not TcEcho.is_tuning(list(argv)):
            self.calls.append(list(argv))
            return subprocess.CompletedProcess(list(argv), 0, "", "")
        return super().run(argv)


def test_a_change_tc_did_not_make_stops_the_run_naming_the_link():
    runner = ForgetfulRunner()
    plan = NetworkPlan(workers=2, prefix="dcb00004", subnet_octet=4)
    with NamespaceNetwork(plan, S, "comm-layer", runner=runner) as net:
        assert len(runner.reads) == 2 * 2  # class and qdisc, per worker, after set-up
        with pytest.raises(ShapingMismatch, match=(
                r"link of worker 0 \(10\.77\.4\.1\) \(eth0 in dcb00004-w0\) is not shaped "
                r"to 10 Mbit/s, 50 ms under comm-layer: class 1:1 rate 20\.91 Mbit/s, set "
                r"10\.46 Mbit/s")):
            net.apply(LinkSetting(10e6, 0.05))


def test_netem_leaves_are_read_back_with_their_delay():
    runner = FakeRunner()
    plan = NetworkPlan(workers=1, prefix="dcb00005", subnet_octet=5)
    with NamespaceNetwork(plan, S, "netem", runner=runner) as net:
        net.apply(LinkSetting(20e6, 0.2))
        qdiscs = runner.tc.answer(["ip", "netns", "exec", "dcb00005-w0", "tc", "qdisc", "show",
                                   "dev", "eth0"])
        assert "delay 200000us" in qdiscs


class FakeDelayer:
    def __init__(self, prefix, delay_s, name):
        self.prefix, self.delays, self.name, self.running = prefix, [delay_s], name, True

    def set_delay(self, delay_s):
        self.delays.append(delay_s)
        return delay_s

    def alive(self):
        return self.running

    def stop(self):
        self.running = False
        return {"packets": 7}


def test_nfqueue_links_get_a_rule_and_a_delayer_that_follows_the_trace():
    runner, started = FakeRunner(), []

    def factory(prefix, delay_s, name):
        started.append(FakeDelayer(prefix, delay_s, name))
        return started[-1]

    plan = NetworkPlan(workers=2, prefix="dcb00006", subnet_octet=6)
    with NamespaceNetwork(plan, S, "nfqueue", runner=runner, delayer_factory=factory) as net:
        rules = [line for line in runner.lines() if "iptables" in line]
        assert rules == [f"ip netns exec dcb00006-w{i} iptables -w -A INPUT -i eth0 -j NFQUEUE "
                         "--queue-num 0" for i in (0, 1)]
        assert [d.prefix for d in started] == [["ip", "netns", "exec", f"dcb00006-w{i}"]
                                               for i in (0, 1)]
        assert not any("netem" in line for line in runner.lines())  # rate only in tc
        net.apply(LinkSetting(10e6, 0.2))
        assert [d.delays for d in started] == [[0.05, 0.2], [0.05, 0.2]]
        assert net.dead_delayers() == []
        started[1].running = False
        assert net.dead_delayers() == [1]
        with pytest.raises(DecobenchError, match=r"delayer of the link of worker 1 .* has exited"):
            net.apply(S)
    assert net.delay_stats == {0: {"packets": 7}, 1: {"packets": 7}}
    assert net.delay_report()["latency_mechanism"] == "nfqueue"
    assert any("# nfqueue delayer" in line for line in net.commands)


def test_kernel_has_netem_with_fake_runner_cleans_up():
    runner = FakeRunner(fail_on="root netem", stderr="Error: Specified qdisc kind is unknown.")
    assert kernel_has_netem(runner) is False
    assert runner.calls[-1][:3] == ["ip", "netns", "del"]
    runner = FakeRunner()
    assert kernel_has_netem(runner) is True
    assert runner.calls[-1][:3] == ["ip", "netns", "del"]


def test_require_root_messages(monkeypatch):
    monkeypatch.setattr(host.os, "geteuid", lambda: 1000)
    with pytest.raises(DecobenchError, match=r"needs root \(CAP_NET_ADMIN\).*simulated backend"):
        require_root()
    monkeypatch.setattr(host.os, "geteuid", lambda: 0)
    monkeypatch.setattr(host.shutil, "which", lambda tool: None if tool == "tc" else "/x")
    with pytest.raises(DecobenchError, match="`tc` command.*iproute2"):
        require_root()


def test_owner_tags():
    assert owner_alive(owner_tag())
    assert not owner_alive(None)
    assert not owner_alive("something else")
    assert not owner_alive(owner_tag().replace("start=", "start=9"))


# ------------------------------------------------------------------------- real network
def _namespaces():
    return set(list_namespaces(netns.SubprocessRunner()))


def test_real_network_up_and_down(root):
    plan = NetworkPlan.new(workers=2)
    with NamespaceNetwork(plan, S, "comm-layer") as net:
        assert set(plan.namespaces) <= _namespaces()
        out = subprocess.run(
            net.exec_prefix(1) + ["ip", "-4", "-o", "addr", "show", "dev", "eth0"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert f"{plan.worker_address(1)}/24" in out
        qdiscs = subprocess.run(
            ["tc", "-n", plan.worker_namespace(0), "qdisc", "show", "dev", "eth0"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "htb 1: root" in qdiscs and "bfifo 20:" in qdiscs
        net.apply(LinkSetting(10e6, 0.05))
        classes = subprocess.run(
            ["tc", "-n", plan.worker_namespace(1), "class", "show", "dev", "eth0"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "rate 10455Kbit" in classes  # 10 Mbit/s x 1514/1448
    assert not set(plan.namespaces) & _namespaces()


def test_real_network_on_a_host_that_does_not_allow_cubic(host_without_cubic):
    """Every worker namespace runs cubic, also on sockets opened after the host's list was
    restored (the run's probe and ranks open theirs then), and the list is as it was."""
    allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
    without = allowed.read_text().strip()
    notes = []
    plan = NetworkPlan.new(workers=1)
    with NamespaceNetwork(plan, S, "comm-layer", notify=notes.append) as net:
        assert allowed.read_text().strip() == without
        script = ("import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
                  "c = socket.create_connection(s.getsockname()); "
                  "print(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)"
                  ".rstrip(bytes(1)).decode())")
        out = subprocess.run(net.exec_prefix(0) + [sys.executable, "-c", script],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "cubic"
    assert [c.before for c in net.host_changes] == [without] and len(notes) == 2
    assert allowed.read_text().strip() == without


def test_real_network_torn_down_after_exception(root):
    plan = NetworkPlan.new(workers=1)
    with pytest.raises(RuntimeError):
        with NamespaceNetwork(plan, S, "comm-layer"):
            assert set(plan.namespaces) <= _namespaces()
            raise RuntimeError("boom")
    assert not set(plan.namespaces) & _namespaces()


def test_cleanup_stale_removes_a_killed_runs_namespaces_only(root):
    plan = NetworkPlan.new(workers=1)
    # a run that dies without tearing down (like SIGKILL)
    script = textwrap.dedent(f"""
        import os
        from decobench.netem.netns import NamespaceNetwork, NetworkPlan
        from decobench.netem.tc import LinkSetting
        NamespaceNetwork(NetworkPlan.new(1, prefix={plan.prefix!r}),
                         LinkSetting(1e6, 0), "comm-layer").create()
        os._exit(0)
    """)
    subprocess.run([sys.executable, "-c", script], check=True)
    assert set(plan.namespaces) <= _namespaces()
    live = NetworkPlan.new(workers=1)
    with NamespaceNetwork(live, S, "comm-layer"):
        pattern = f"{plan.prefix}-*"
        assert sorted(cleanup_stale(pattern)) == sorted(plan.namespaces)
        assert not set(plan.namespaces) & _namespaces()
        # a running network is kept unless asked
        assert cleanup_stale(f"{live.prefix}-*") == []
        assert set(live.namespaces) <= _namespaces()
        assert sorted(cleanup_stale(f"{live.prefix}-*", include_live=True)) == sorted(
            live.namespaces
        )
    # teardown after the namespaces vanished is fine
    assert not set(live.namespaces) & _namespaces()


def test_cleanup_cli(root):
    proc = subprocess.run(
        [sys.executable, "-m", "decobench.netem.netns", "--cleanup", "--pattern", "dcbzzzzz-*"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "0 namespace(s) deleted" in proc.stdout


def test_resolve_latency_mechanism_on_this_kernel(root):
    has, nfq = kernel_has_netem(), kernel_has_nfqueue()
    assert resolve_latency_mechanism("auto") == (
        "netem" if has else "nfqueue" if nfq else "comm-layer")
    if has:
        assert resolve_latency_mechanism("netem") == "netem"
    else:
        with pytest.raises(DecobenchError, match="lacks sch_netem"):
            resolve_latency_mechanism("netem")
    assert nfq == (shutil.which("iptables") is not None), "iptables is here but NFQUEUE fails"
    assert not any(ns.endswith(("-nt", "-nq")) for ns in _namespaces())


def test_an_outage_takes_the_links_down_without_touching_the_shaping():
    runner = FakeRunner()
    plan = NetworkPlan(workers=2, prefix="dcb00007", subnet_octet=7)
    with NamespaceNetwork(plan, S, "comm-layer", runner=runner) as net:
        n = len(runner.calls)
        net.apply(LinkSetting(1e3, 0.05))            # 1 kbit/s: an outage
        down = runner.lines()[n:]
        assert down == [f"ip netns exec dcb00007-w{i} iptables -w -I INPUT 1 -i eth0 -m comment "
                        "--comment decobench-outage -j DROP" for i in (0, 1)]
        net.apply(LinkSetting(1e3, 0.2))             # still down: nothing to do
        assert len(runner.lines()) == n + 2
        net.apply(LinkSetting(10e6, 0.05))           # back up at the new rate
        up = runner.lines()[n + 2:]
        assert [line for line in up if "iptables" in line] == [
            line.replace(" -I INPUT 1 ", " -D INPUT ") for line in down]
        assert sum(" change " in line for line in up) == 10
    with pytest.raises(DecobenchError, match="first setting, 0.001 Mbit/s, 50 ms, is an outage"):
        NamespaceNetwork(plan, LinkSetting(1e3, 0.05), "comm-layer", runner=FakeRunner()).create()


def test_an_outage_rule_that_is_not_there_stops_the_run():
    class NoIptables(FakeRunner):
        def run(self, argv):
            if argv[4:5] == ["iptables"] and "-S" not in argv:
                self.calls.append(list(argv))
                return subprocess.CompletedProcess(list(argv), 0, "", "")
            return super().run(argv)

    plan = NetworkPlan(workers=1, prefix="dcb00008", subnet_octet=8)
    with NamespaceNetwork(plan, S, "comm-layer", runner=NoIptables()) as net:
        with pytest.raises(ShapingMismatch, match=r"link of worker 0 .*: 0 outage rule\(s\) on "
                                                  r"eth0, expected the link down"):
            net.apply(LinkSetting(1e3, 0.05))


@pytest.mark.parametrize(("program", "fix"), [
    ("/nonexistent/iptables", "install iptables (e.g. `apt-get install iptables`)"),
    ("/nonexistent/cat", "install coreutils (e.g. `apt-get install coreutils`)"),
    ("/nonexistent/no-such-tool", "install the package that provides it"),
])
def test_a_missing_program_names_its_package(program, fix):
    with pytest.raises(DecobenchError) as caught:
        netns.SubprocessRunner().run([program, "-n"])
    assert str(caught.value) == (f"{program}: command not found (needed for: {program} -n); "
                                 f"{fix}")


def test_teardown_reads_every_links_qdisc_counters_first():
    """Drops at the shaper are retransmissions in the run's timings: the counters are read
    before the namespaces go and reported with their total (qdisc_stats.json)."""
    from decobench.netem.netns import qdisc_counters

    runner = FakeRunner()
    runner.tc.drops[("dcb00009-w1", "eth0")] = 3
    plan = NetworkPlan(workers=2, prefix="dcb00009", subnet_octet=9)
    with NamespaceNetwork(plan, S, "netem", runner=runner) as net:
        pass
    reads = [" ".join(a) for a in runner.reads if "-j" in a]
    assert reads == [f"ip netns exec dcb00009-w{i} tc -s -j qdisc show dev eth0"
                     for i in range(2)]
    report = net.qdisc_report()
    assert report["drops"] == 3 * len(net.qdisc_stats[1])
    assert set(report["links"]) == {"0", "1"} and report["links"]["0"][0]["bytes"] == 1000
    # tc's JSON, by hand; anything else is no counters
    text = ('[{"kind":"htb","handle":"1:","root":true,"bytes":9,"packets":3,"drops":2,'
            '"overlimits":5,"requeues":0,"backlog":0,"qlen":0}]')
    assert qdisc_counters(text) == [{"kind": "htb", "handle": "1:", "parent": "root",
                                     "bytes": 9, "packets": 3, "drops": 2, "overlimits": 5,
                                     "requeues": 0}]
    assert qdisc_counters("qdisc htb 1: root") is None and qdisc_counters('{"a": 1}') is None


def test_teardown_reads_every_namespaces_tcp_counters():
    """A retransmission (after a drop anywhere, or a timer firing without one) stalls a
    message for a round trip or more: each worker namespace's TCP counters are read before
    it goes and reported with the total of retransmitted segments."""
    runner = FakeRunner()
    runner.tc.retransmits["dcb00009-w1"] = 7
    plan = NetworkPlan(workers=2, prefix="dcb00009", subnet_octet=9)
    with NamespaceNetwork(plan, S, "netem", runner=runner) as net:
        pass
    reads = [" ".join(a) for a in runner.reads if a[4:5] == ["cat"]]
    assert reads == [f"ip netns exec dcb00009-w{i} cat /proc/net/snmp /proc/net/netstat"
                     for i in range(2)]
    report = net.qdisc_report()
    assert report["retransmitted_segments"] == 7
    assert report["tcp"]["1"] == {"retransmitted_segments": 7, "loss_probes": 2, "timeouts": 1,
                                  "spurious_timeouts": 0, "fast_retransmits": 0}


def test_tcp_counters_by_hand():
    """/proc/net/snmp and /proc/net/netstat: a names line and a values line per table; a
    TcpExt field the kernel lacks counts 0; without Tcp's RetransSegs there are none."""
    from decobench.netem.netns import tcp_counters

    text = ("Ip: Forwarding DefaultTTL\nIp: 1 64\n"
            "Tcp: RtoAlgorithm RtoMin RetransSegs\nTcp: 1 200 12\n"
            "Udp: InDatagrams\nUdp: 5\n"
            "TcpExt: SyncookiesSent TCPLossProbes TCPTimeouts TCPFastRetrans\n"
            "TcpExt: 0 4 3 5\nIpExt: InNoRoutes\nIpExt: 0\n")
    assert tcp_counters(text) == {"retransmitted_segments": 12, "loss_probes": 4, "timeouts": 3,
                                  "spurious_timeouts": 0, "fast_retransmits": 5}
    assert tcp_counters("Tcp: RtoAlgorithm\nTcp: 1\n") is None
    assert tcp_counters("") is None
    assert tcp_counters("Tcp: RetransSegs\nTcp: x\n") is None
