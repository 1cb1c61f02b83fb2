"""decobench.netem.player: schedules, the trace player thread, the shapers and the CLI."""

import io
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error

import pytest
from fake_tc import TcEcho

from decobench.errors import DecobenchError
from decobench.netem.netns import CommandError, NamespaceNetwork, NetworkPlan, ShapingMismatch
from decobench.netem.player import (
    DockerTcShaper,
    NetnsShaper,
    TcShaper,
    TracePlayer,
    iter_changes,
    read_start_file,
    schedule,
)
from decobench.netem.tc import LinkSetting
from decobench.netem.trace import Trace

A = LinkSetting(10e6, 0.1)
B = LinkSetting(20e6, 0.1)
C = LinkSetting(10e6, 0.2)


def steps(loop=False):
    # rows at 0, 10, 20; the last row lasts as long as the one before: period 30
    return Trace((0, 10, 20), (10e6, 20e6, 10e6), (0.1, 0.1, 0.2), loop=loop, name="steps")


# ----------------------------------------------------------------------------- schedule
def test_schedule_steps_hold_last_row():
    assert schedule(steps(), 100) == [(0, A), (10, B), (20, C)]
    assert schedule(steps(), 20) == [(0, A), (10, B)]
    assert schedule(steps(), 0.5) == [(0, A)]


def test_schedule_looping_trace_repeats_every_period():
    assert schedule(steps(loop=True), 65) == [
        (0, A),
        (10, B),
        (20, C),
        (30, A),
        (40, B),
        (50, C),
        (60, A),
    ]


def test_schedule_skips_rows_that_change_nothing():
    # A, B, A looping: the wrap from the last row (A) to the first (A) is no change
    trace = Trace((0, 5, 10), (10e6, 20e6, 10e6), (0.1, 0.1, 0.1), loop=True)
    assert schedule(trace, 31) == [(0, A), (5, B), (10, A), (20, B), (25, A)]
    # repeated rows in a file
    trace = Trace((0, 1, 2), (10e6, 10e6, 20e6), (0.1, 0.1, 0.1))
    assert schedule(trace, 10) == [(0, A), (2, B)]


def test_schedule_constant_traces_are_one_entry():
    assert schedule(Trace((0,), (10e6,), (0.1,)), 1e9) == [(0, A)]
    assert schedule(Trace((0,), (10e6,), (0.1,), loop=True), 1e9) == [(0, A)]
    # a looping trace whose rows are all equal ends too (no endless search for a change)
    assert list(iter_changes(Trace((0, 5), (10e6, 10e6), (0.1, 0.1), loop=True))) == [(0, A)]


def test_schedule_rejects_bad_horizon():
    with pytest.raises(ValueError, match="horizon_s"):
        schedule(steps(), 0)


# ------------------------------------------------------------------------------ helpers
class FakeClock:
    """A clock that only moves when the player sleeps."""

    def __init__(self, now=1000.0):
        self.now = now
        self.lock = threading.Lock()

    def __call__(self):
        with self.lock:
            return self.now

    def sleep(self, dt):
        with self.lock:
            self.now += max(dt, 0.0)


class RecordingShaper:
    def __init__(self, clock):
        self.clock = clock
        self.applied = []

    def apply(self, setting):
        self.applied.append((self.clock(), setting))


class FakeRunner:
    def __init__(self):
        self.calls = []
        self.reads = []   # tc ... show: the shapers' read-back, answered by TcEcho
        self.tuning = []  # TCP tuning (routes, sysctl), answered by TcEcho
        self.tc = TcEcho()

    def run(self, argv):
        argv = list(argv)
        if TcEcho.is_tuning(argv):
            self.tuning.append(argv)
        else:
            (self.reads if TcEcho.is_read(argv) else self.calls).append(argv)
        return subprocess.CompletedProcess(argv, 0, self.tc.answer(argv), "")


# ------------------------------------------------------------------------------- player
def test_player_applies_each_change_at_its_time_never_earlier():
    clock = FakeClock()
    shaper = RecordingShaper(clock)
    player = TracePlayer(steps(loop=True), shaper, horizon_s=65, clock=clock, sleep=clock.sleep)
    player.start(t0=1000.0)
    records = player.join(timeout_s=60)
    assert [(r.planned_s, r.setting) for r in records] == schedule(steps(loop=True), 65)
    for r, (t, _) in zip(records, shaper.applied, strict=True):
        assert r.actual_s >= r.planned_s  # never earlier
        assert r.actual_s - r.planned_s < 1e-6
        assert t - 1000.0 == pytest.approx(r.planned_s)
    assert clock() == pytest.approx(1065.0)  # plays to the horizon


def test_player_with_namespace_network_only_changes_after_start():
    runner = FakeRunner()
    plan = NetworkPlan(workers=2, prefix="dcb0000a", subnet_octet=10)
    clock = FakeClock()
    with NamespaceNetwork(plan, A, "netem", runner=runner, clock=clock) as net:
        n_setup = len(runner.calls)
        n_logged = len(net.command_log)    # set-up, TCP tuning included
        player = TracePlayer(steps(), NetnsShaper(net), clock=clock, sleep=clock.sleep)
        player.start(t0=clock())
        records = player.join(timeout_s=60)
        played = runner.calls[n_setup:]
    assert [r.planned_s for r in records] == [0, 10, 20]
    assert len(played) == 3 * 2 * 5  # 3 changes x 2 workers x (3 classes + 2 leaves)
    assert all(argv[:5] == ["ip", "netns", "exec", argv[3], "tc"] for argv in played)
    assert all(argv[6] == "change" for argv in played)
    assert not any(w in ("add", "del", "replace") for argv in played for w in argv)
    # in order: each change to worker 0 then worker 1, with the change's rate
    rates = [
        argv[argv.index("rate") + 1]
        for argv in played
        if "classid" in argv and argv[argv.index("classid") + 1] == "1:1"
    ]
    assert rates == ["10455801bit"] * 2 + ["20911602bit"] * 2 + ["10455801bit"] * 2
    delays = [argv[argv.index("delay") + 1] for argv in played if "delay" in argv]
    assert delays == ["100000us"] * 8 + ["200000us"] * 4
    # the commands log carries the time of each change (fake clock: 0, 10, 20 s after t0)
    times = [r.t_s for r in net.command_log[n_logged:]]
    assert times[0] == 0 and times[10] == 10 and times[20] == 20


def test_player_late_start_applies_only_the_setting_in_force():
    clock = FakeClock(now=1025.0)
    shaper = RecordingShaper(clock)
    player = TracePlayer(steps(), shaper, clock=clock, sleep=clock.sleep)
    player.start(t0=1000.0)  # 25 s late: rows 0 and 10 were overtaken by row 20
    records = player.join(timeout_s=60)
    assert [(r.planned_s, r.setting) for r in records] == [(20, C)]
    assert records[0].actual_s == pytest.approx(25.0)


def test_player_stop_and_error_propagation():
    shaper = RecordingShaper(time.monotonic)
    player = TracePlayer(steps(loop=True), shaper)
    player.start()
    deadline = time.monotonic() + 60     # a hang guard: the loop ends when row 0 applies
    while not shaper.applied and time.monotonic() < deadline:
        time.sleep(0.005)
    assert player.running
    records = player.stop(timeout_s=60)
    assert not player.running
    assert [r.planned_s for r in records] == [0]

    class Broken:
        def apply(self, setting):
            raise DecobenchError("tc exploded")

    player = TracePlayer(steps(), Broken())
    player.start()
    with pytest.raises(DecobenchError, match="tc exploded"):
        player.stop(timeout_s=60)
    with pytest.raises(DecobenchError, match="already started"):
        player.start()


def test_wait_for_start_file(tmp_path):
    path = tmp_path / ".clock_start"
    shaper = RecordingShaper(time.monotonic)
    player = TracePlayer(steps(), shaper, poll_s=0.005)
    player.wait_for_start_file(path)
    time.sleep(0.05)
    assert shaper.applied == [] and player.t0 is None
    path.write_text("not yet")  # a partial write is polled again
    time.sleep(0.03)
    assert shaper.applied == []
    t0 = time.monotonic()
    path.write_text(f"{t0!r}\n")
    deadline = time.monotonic() + 60     # a hang guard: the loop ends when the row applies
    while not shaper.applied and time.monotonic() < deadline:
        time.sleep(0.005)
    records = player.stop(timeout_s=60)
    assert player.t0 == t0
    assert [(r.planned_s, r.setting) for r in records] == [(0, A)]
    assert shaper.applied[0][0] >= t0


def test_wait_for_start_file_timeout(tmp_path):
    player = TracePlayer(steps(), RecordingShaper(time.monotonic), poll_s=0.005)
    player.wait_for_start_file(tmp_path / "missing", timeout_s=0.05)
    with pytest.raises(DecobenchError, match="no start time in .*missing"):
        player.join(timeout_s=60)        # returns when the player gives up, 0.05 s in


def test_read_start_file(tmp_path):
    path = tmp_path / "t0"
    assert read_start_file(path) is None
    path.write_text("123.5\n")
    assert read_start_file(path) == 123.5
    path.write_text("nan")
    assert read_start_file(path) is None


# ------------------------------------------------------------------------------ shapers
class FakeResponse:
    def __init__(self, status=200, body=b"Set rate=..."):
        self.status = status
        self.body = body

    def read(self):
        return self.body

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def upstream_qdiscs(body: str, netem_in_kernel: bool = True) -> bytes:
    """What upstream docker-tc's GET answers after a POST of ``body`` (bin/http-post.sh and
    tc-common.sh: a netem root with the delay, a tbf child ``burst 5kb latency 50ms`` with the
    rate; `tc qdisc show` prints rates as iproute2's sprint_rate does). Without sch_netem both
    `tc qdisc add` fail (the tbf's parent 1: does not exist) and the device keeps its default."""
    fields = dict(part.split("=") for part in body.split("&"))
    rate = int(fields["rate"].removesuffix("bit"))
    shown = f"{rate // 1000}Kbit" if rate % 1000 and rate >= 1_000_000 else f"{rate}bit"
    if "delay" not in fields:
        return f"qdisc tbf 1: root refcnt 2 rate {shown} burst 5Kb lat 50ms \n".encode()
    if not netem_in_kernel:
        return b"qdisc noqueue 0: root refcnt 2 \n"
    delay_ms = int(fields["delay"].removesuffix("us")) / 1000
    return (f"qdisc netem 1: root refcnt 2 limit 1000 delay {delay_ms:g}ms\n"
            f"qdisc tbf 2: parent 1: rate {shown} burst 5Kb lat 50ms \n").encode()


class FakeOpener:
    """POSTs answer ``response``; GETs answer what upstream's docker-tc would show for the
    container's last POST (``netem_in_kernel``: whether its tc could add netem)."""

    def __init__(self, response=None, error=None, netem_in_kernel=True):
        self.requests = []
        self.response = response or FakeResponse()
        self.error = error
        self.netem_in_kernel = netem_in_kernel
        self.posted = {}

    def __call__(self, request, timeout):
        if request.get_method() == "GET":
            body = self.posted[request.full_url]
            return FakeResponse(200, upstream_qdiscs(body, self.netem_in_kernel))
        self.posted[request.full_url] = request.data.decode()
        self.requests.append(
            (
                request.get_method(),
                request.full_url,
                request.data.decode(),
                request.get_header("Content-type"),
                timeout,
            )
        )
        if self.error:
            raise self.error
        return self.response


def test_docker_tc_requests():
    opener = FakeOpener()
    shaper = DockerTcShaper(
        "http://localhost:4080/", ["decobench-worker-0", "decobench-worker-1"], opener=opener
    )
    shaper.apply(LinkSetting(20e6, 0.1))
    assert opener.requests == [
        (
            "POST",
            "http://localhost:4080/decobench-worker-0",
            "rate=20911602bit&delay=100000us",
            "application/x-www-form-urlencoded",
            10.0,
        ),
        (
            "POST",
            "http://localhost:4080/decobench-worker-1",
            "rate=20911602bit&delay=100000us",
            "application/x-www-form-urlencoded",
            10.0,
        ),
    ]
    comm = DockerTcShaper("http://h:4080", ["w0"], "comm-layer", opener=opener)
    assert comm.body(LinkSetting(1e6, 0.25)) == "rate=1045580bit"
    assert comm.container_url("a/b") == "http://h:4080/a%2Fb"
    comm.apply(LinkSetting(1e6, 0.25))                  # a tbf root alone reads back right


def test_docker_tc_is_read_back_after_each_post():
    """Upstream answers a POST with success even when tc failed (no sch_netem): the GET
    read-back is what catches it, naming the container."""
    silent = FakeOpener(netem_in_kernel=False)
    with pytest.raises(ShapingMismatch, match="container w1 .*no netem qdisc.*sch_netem"):
        DockerTcShaper("http://h:4080", ["w1"], opener=silent).apply(A)

    class Stale(FakeOpener):                           # shows the previous rate
        def __call__(self, request, timeout):
            if request.get_method() == "GET":
                return FakeResponse(200, upstream_qdiscs("rate=5000000bit&delay=100000us"))
            return super().__call__(request, timeout)

    with pytest.raises(ShapingMismatch, match=r"tbf rate 5 Mbit/s, set 10.46 Mbit/s"):
        DockerTcShaper("http://h:4080", ["w0"], opener=Stale()).apply(A)
    unchecked = DockerTcShaper("http://h:4080", ["w0"], opener=silent, verify=False)
    unchecked.apply(A)                                  # --no-verify: trusted as before


def test_docker_tc_errors():
    not_running = FakeOpener(FakeResponse(200, b"decobench-worker-9 is not running"))
    with pytest.raises(DecobenchError, match="refused POST .*decobench-worker-9 is not running"):
        DockerTcShaper("http://localhost:4080", ["decobench-worker-9"], opener=not_running).apply(A)
    down = FakeOpener(error=urllib.error.URLError("Connection refused"))
    with pytest.raises(DecobenchError, match="did not answer.*--network host"):
        DockerTcShaper("http://localhost:4080", ["w0"], opener=down).apply(A)
    with pytest.raises(DecobenchError, match="at least one container"):
        DockerTcShaper("http://localhost:4080", [])


def test_tc_shaper_setup_then_change_only():
    class Runner(FakeRunner):
        def run(self, argv):
            if argv[1:3] == ["qdisc", "del"]:
                self.calls.append(list(argv))
                raise CommandError(argv, 2, "Error: Cannot delete qdisc with handle of zero.")
            return super().run(argv)

    runner = Runner()
    log = io.StringIO()
    shaper = TcShaper("eth0", "comm-layer", runner, log=lambda line: print(line, file=log))
    shaper.setup(A)
    n = len(runner.calls)
    assert runner.calls[0] == ["tc", "qdisc", "del", "dev", "eth0", "root"]
    assert runner.calls[1] == ["ip", "link", "set", "dev", "eth0", "gso_max_segs", "1"]
    assert runner.calls[2][:3] == ["tc", "qdisc", "add"]
    shaper.apply(B)
    assert all(argv[2] == "change" for argv in runner.calls[n:])
    assert log.getvalue().splitlines() == shaper.commands
    with pytest.raises(ValueError, match="latency mechanism"):
        TcShaper("eth0", "auto", runner)


def test_nfqueue_player_holds_its_delay_until_stopped(monkeypatch, capsys):
    """Under nfqueue the latency is the player's own delayer: after a constant trace's only
    change it must keep running (an exited player leaves the NFQUEUE rule without a reader,
    and the link drops every packet), then stop the delayer when told to (SIGTERM)."""
    import signal

    from decobench.netem import player as player_mod

    delayers = []

    def factory(prefix, delay_s, dev):
        delayers.append(_HoldingDelayer(delay_s))
        return delayers[-1]

    def fake_shaper(args, first):
        shaper = TcShaper("eth0", "nfqueue", FakeRunner(), delayer_factory=factory)
        shaper.setup(first)
        return shaper

    monkeypatch.setattr(player_mod, "_tc_shaper", fake_shaper)
    before = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(0.8, os.kill, (os.getpid(), signal.SIGTERM))
    started = time.monotonic()
    timer.start()
    try:
        code = player_mod.main(["--trace", "constant-20mbps-100ms", "--via", "tc"])
    finally:
        timer.cancel()
    assert code == 0
    assert time.monotonic() - started >= 0.75     # it held the delay until the SIGTERM
    out = capsys.readouterr().out
    assert "holding the nfqueue delay until stopped" in out
    assert [d.running for d in delayers] == [False]   # stopped on the way out
    assert signal.getsignal(signal.SIGTERM) is before  # its handler is gone again


def test_ready_file_is_written_once_the_link_is_shaped(monkeypatch, tmp_path):
    """--ready-file: a previous run's file is removed first, the new one names the mechanism
    the shaper ended up with (the workers check it against their own)."""
    from decobench.netem import player as player_mod

    ready = tmp_path / "run.shaped-0"
    ready.write_text('{"mechanism": "stale"}')
    seen = []

    def fake_shaper(args, first):
        seen.append(ready.exists())          # gone before the link is set up
        shaper = TcShaper("eth0", "nfqueue", FakeRunner(),
                          delayer_factory=lambda p, d, n: _HoldingDelayer(d))
        shaper.setup(first)
        return shaper

    monkeypatch.setattr(player_mod, "_tc_shaper", fake_shaper)
    assert player_mod.main(["--trace", "constant-20mbps-100ms", "--via", "tc", "--duration",
                            "0.1", "--ready-file", str(ready)]) == 0
    assert seen == [False]
    # one bandwidth-delay product as TCP's initial window: 20 Mbit/s x 200 ms / 1448 B
    tcp = {"initcwnd": 346, "initrwnd": 346, "net.ipv4.tcp_slow_start_after_idle": 0,
           "net.ipv4.tcp_rmem": "4096 4194304 33554432",
           "net.ipv4.tcp_wmem": "4096 4194304 33554432",
           "net.ipv4.tcp_congestion_control": "cubic"}
    assert json.loads(ready.read_text()) == {"dev": "eth0", "mechanism": "nfqueue",
                                             "rate_bps": 20e6, "latency_s": 0.1, "tcp": tcp}
    assert player_mod.main(["--trace", "constant-20mbps-100ms", "--via", "docker-tc",
                            "--container", "w0", "--ready-file", str(ready)]) == 2


class _HoldingDelayer:
    def __init__(self, delay_s):
        self.delays, self.running = [delay_s], True

    def set_delay(self, delay_s):
        self.delays.append(delay_s)
        return delay_s

    def alive(self):
        return self.running

    def stop(self):
        self.running = False
        return {"packets": 0}


# ----------------------------------------------------------------------------------- CLI
def test_cli_help():
    proc = subprocess.run(
        [sys.executable, "-m", "decobench.netem.player", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0
    for option in ("--trace", "--via", "--container", "--start-file", "--duration"):
        assert option in proc.stdout


def test_cli_bad_trace_is_one_line_error():
    proc = subprocess.run(
        [sys.executable, "-m", "decobench.netem.player", "--trace", "no-such-trace", "--via", "tc"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("decobench.netem.player: error: no-such-trace: no such trace")


def test_cli_via_tc_in_a_namespace(root):
    plan = NetworkPlan.new(workers=1)
    with NamespaceNetwork(plan, A, "comm-layer"):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "decobench.netem.player",
                "--trace",
                "constant-20mbps-100ms",
                "--via",
                "tc",
                "--netns",
                plan.worker_namespace(0),
                "--dev",
                "eth0",
                "--duration",
                "0.2",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 0, proc.stderr
        classes = subprocess.run(
            ["tc", "-n", plan.worker_namespace(0), "class", "show", "dev", "eth0"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    assert "+ ip netns exec" in proc.stdout and "played 1 change(s)" in proc.stdout
    assert "rate 20911Kbit" in classes
