"""The live trace player: changes the emulated links as a trace's a(t) and b(t) change.

- :func:`schedule` (pure): the change points ``(t, LinkSetting)`` of a trace up to a horizon.
- :class:`Shaper`: anything with ``apply(setting)``; :class:`NetnsShaper` (the namespace
  network of :mod:`decobench.netem.netns`), :class:`TcShaper` (``tc`` on a local device, e.g. inside a
  container with NET_ADMIN) and :class:`DockerTcShaper` (the docker-tc HTTP API).
- :class:`TracePlayer`: a background thread that applies each change at
  ``t0 + t`` on ``CLOCK_MONOTONIC`` (never earlier), where ``t0`` is given or read from a
  start file written by the training's rank 0; it records planned and actual times.
- ``python -m decobench.netem.player``: the same from the command line (used by the Docker set-up).

The player only ever updates shaping in place (``tc ... change``): queued packets are kept
and connections see a rate change, not a reset.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import signal
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from decobench.atomicio import write_text_atomic
from decobench.errors import DecobenchError
from decobench.netem.netns import (
    CommandError,
    Delayer,
    DelayerFactory,
    Runner,
    SubprocessRunner,
    _nfqueue_delayer,
    verify_shaping,
)
from decobench.netem.tc import (
    MECHANISMS,
    PACKET_LEVEL_MECHANISMS,
    TCP_FRAMING_FACTOR,
    LinkSetting,
    check_mechanism,
    clear_commands,
    device_commands,
    exec_in,
    format_command,
    shaping_commands,
    tc_rate_bps,
)
from decobench.netem.tcp import TcpTuning, apply_tuning, buffer_bytes, initial_window_packets
from decobench.netem.trace import Trace, load_trace


# ------------------------------------------------------------------------------ schedule
def iter_changes(trace: Trace) -> Iterator[tuple[float, LinkSetting]]:
    """The trace's change points in time order, for ever if it loops.

    A row equal to the one before it (same bandwidth and latency) is not a change and is
    left out, so a constant trace yields one entry and a loop's wrap-around yields an entry
    only if the first row differs from the last.
    """
    rows = list(zip(trace.times_s, trace.bandwidth_bps, trace.latency_s, strict=True))
    repeats = trace.loop and len(rows) > 1
    period = trace.period_s
    previous: LinkSetting | None = None
    k = 0
    while True:
        base = k * period if repeats else 0.0
        changed = False
        for t, a, b in rows:
            setting = LinkSetting(rate_bps=a, latency_s=b)
            if setting != previous:
                yield base + t, setting
                previous, changed = setting, True
        if not repeats or not changed:  # a period without a change: all later ones match
            return
        k += 1


def schedule(trace: Trace, horizon_s: float) -> list[tuple[float, LinkSetting]]:
    """The change points ``(t, setting)`` with ``0 <= t < horizon_s`` (see :func:`iter_changes`)."""
    if not (horizon_s > 0) or math.isnan(horizon_s):
        raise ValueError(f"horizon_s must be > 0, got {horizon_s!r}")
    out: list[tuple[float, LinkSetting]] = []
    for t, setting in iter_changes(trace):
        if t >= horizon_s:
            break
        out.append((t, setting))
    return out


# ------------------------------------------------------------------------------- shapers
class Shaper(Protocol):
    """Puts a :class:`LinkSetting` on the emulated links now."""

    def apply(self, setting: LinkSetting) -> None: ...


class _Network(Protocol):
    def apply(self, setting: LinkSetting) -> None: ...


@dataclass(frozen=True)
class NetnsShaper:
    """Every worker link of a :class:`decobench.netem.netns.NamespaceNetwork` (``network.apply``)."""

    network: _Network

    def apply(self, setting: LinkSetting) -> None:
        self.network.apply(setting)


@dataclass
class TcShaper:
    """``tc`` on one local device (e.g. ``eth0`` of a container run with NET_ADMIN).

    :meth:`setup` installs the shaping (removing the device's own root qdisc first);
    :meth:`apply` only updates it in place. ``netns`` runs the commands in that namespace
    (``ip netns exec NS``); ``log`` receives each command line before it runs. Each setting
    is read back from tc afterwards (``verify``, :func:`decobench.netem.netns.verify_shaping`).
    Under ``nfqueue`` :meth:`setup` also queues the device's received packets to a delayer
    it starts (:mod:`decobench.netem.nfqueue`), :meth:`apply` changes its delay, and
    :meth:`close` stops it and returns its statistics.
    """

    dev: str
    mechanism: str
    runner: Runner = field(default_factory=SubprocessRunner)
    framing_factor: float = TCP_FRAMING_FACTOR
    netns: str | None = None
    log: Callable[[str], None] | None = None
    verify: bool = True
    delayer_factory: DelayerFactory | None = None
    commands: list[str] = field(default_factory=list, init=False)
    delayer: Delayer | None = field(default=None, init=False)
    tcp: TcpTuning | None = field(default=None, init=False)
    _switch: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        check_mechanism(self.mechanism)

    def setup(self, setting: LinkSetting) -> None:
        """Replace whatever shaping the device has by this module's, at ``setting``."""
        from decobench.netem.loss import is_outage

        if is_outage(setting.rate_bps):
            raise DecobenchError(f"the first setting, {setting.describe()}, is an outage: "
                                 "the link cannot be set up; start the trace with a usable row")
        for argv in clear_commands(self.dev, self.netns):
            try:
                self._run(argv)
            except CommandError:
                pass  # no root qdisc of ours to remove
        for argv in device_commands(self.dev, self.netns,
                                    tc_rate_bps(setting, self.framing_factor)):
            self._run(argv)
        kernel_latency = setting.latency_s if self.mechanism in PACKET_LEVEL_MECHANISMS else 0.0
        self.tcp = apply_tuning(self._run, lambda argv: self.runner.run(argv).stdout, self.dev,
                                initial_window_packets(setting.rate_bps, kernel_latency),
                                self.netns, f"{self.dev}" + (f" in {self.netns}" if self.netns
                                                              else ""),
                                buffer_bytes(setting.rate_bps, kernel_latency))
        self._shape(setting, "add")
        if self.mechanism == "nfqueue":
            from decobench.netem.nfqueue import rule_commands

            for argv in rule_commands(self.dev, "add", netns=self.netns):
                self._run(argv)
            factory = self.delayer_factory or _nfqueue_delayer
            self.delayer = factory(exec_in(self.netns), setting.latency_s, self.dev)

    def apply(self, setting: LinkSetting) -> None:
        """Update the shaping in place; a bandwidth below
        :data:`decobench.netem.loss.OUTAGE_BPS` takes the link down instead."""
        from decobench.netem.loss import LinkSwitch, change_link

        if self._switch is None:
            self._switch = LinkSwitch(self.dev, self.netns, self._run,
                                      lambda argv: self.runner.run(argv).stdout,
                                      f"link {self.dev}")
        change_link(setting, shape=lambda s: self._shape(s, "change"), delayer=self.delayer,
                    switch=self._switch, name=f"link {self.dev}")

    def close(self) -> Any:
        """Stop the delayer (``nfqueue``); its statistics, or None."""
        delayer, self.delayer = self.delayer, None
        return delayer.stop() if delayer is not None else None

    def _shape(self, setting: LinkSetting, action: str) -> None:
        for argv in shaping_commands(
            self.dev, setting, self.mechanism, action, self.framing_factor, netns=self.netns
        ):
            self._run(argv)
        if self.verify:
            verify_shaping(self.runner, self.dev, self.netns, setting, self.mechanism,
                           self.framing_factor, f"link {self.dev}")

    def _run(self, argv: list[str]) -> None:
        line = format_command(argv)
        self.commands.append(line)
        if self.log is not None:
            self.log(line)
        self.runner.run(argv)


Opener = Callable[..., Any]
"""``urllib.request.urlopen``-like: ``opener(request, timeout=...)`` returns a response with
``.status`` (or ``.getcode()``) and ``.read()``."""


@dataclass
class DockerTcShaper:
    """Shapes containers through the docker-tc daemon's HTTP API (lukaszlach/docker-tc).

    API, from the project's README ("HTTP API", "POST") and ``bin/http-post.sh``
    (github.com/lukaszlach/docker-tc): ``POST /<container-id|container-name>`` with a form
    body ``rate=<tc rate>&delay=<tc time>`` (also ``loss``, ``corrupt``, ``duplicate``,
    ``reorder``), e.g. ``curl -d 'rate=1mbps&delay=100ms' localhost:4080/my-container``.
    ``rate`` goes to ``tc ... tbf rate VALUE`` and ``delay`` to ``tc ... netem delay VALUE``,
    so values use tc's units: we send ``<int>bit`` (bit/s) and ``<int>us``. The daemon
    listens on ``127.0.0.1:4080`` by default (``HTTP_BIND``, ``HTTP_PORT``) and answers
    errors with status 200 and a text body ("... is not running", "Error: ...").

    Caveats of docker-tc (documented in ``docs/emulation.md``): each POST deletes the
    container's qdiscs and adds new ones (queued packets are dropped), it shapes the
    host-side veth (the traffic going *into* the container), and its token bucket uses the
    daemon's fixed ``QDISC_TBF_BURST``/``QDISC_TBF_LATENCY``. The rate sent is the goodput
    times ``framing_factor`` as for :mod:`decobench.netem.tc`. Under ``comm-layer`` no delay is sent.
    """

    url: str
    containers: Sequence[str]
    mechanism: str = "netem"
    opener: Opener = urllib.request.urlopen
    framing_factor: float = TCP_FRAMING_FACTOR
    timeout_s: float = 10.0
    verify: bool = True
    requests: list[tuple[str, str]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        check_mechanism(self.mechanism)
        if not self.containers:
            raise DecobenchError(
                "docker-tc shaping needs at least one container name (--container)"
            )

    def body(self, setting: LinkSetting) -> str:
        """The form body for ``setting``: ``rate=<bit/s>bit[&delay=<us>us]``."""
        fields = {"rate": f"{tc_rate_bps(setting, self.framing_factor)}bit"}
        if self.mechanism == "netem":
            fields["delay"] = f"{round(setting.latency_s * 1e6)}us"
        return urllib.parse.urlencode(fields)

    def container_url(self, container: str) -> str:
        return f"{self.url.rstrip('/')}/{urllib.parse.quote(container, safe='')}"

    def apply(self, setting: LinkSetting) -> None:
        body = self.body(setting)
        for container in self.containers:
            url = self.container_url(container)
            self.requests.append((url, body))
            request = urllib.request.Request(
                url,
                data=body.encode("ascii"),
                method="POST",
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            try:
                with self.opener(request, timeout=self.timeout_s) as response:
                    status = getattr(response, "status", None) or response.getcode()
                    text = response.read().decode("utf-8", "replace").strip()
            except (urllib.error.URLError, OSError) as exc:
                raise DecobenchError(
                    f"docker-tc at {self.url} did not answer POST {url} ({exc}); is the "
                    "docker-tc container running with `--network host` and NET_ADMIN?"
                ) from None
            if status != 200 or "is not running" in text or text.startswith("Error"):
                raise DecobenchError(
                    f"docker-tc refused POST {url} with {body!r}: HTTP {status}: {text or '(empty)'}"
                )
            if self.verify:
                self._verify(container, url, setting)

    def _verify(self, container: str, url: str, setting: LinkSetting) -> None:
        """Read the container's qdiscs back (``GET /<container>``, upstream's
        ``bin/http-get.sh``: ``tc qdisc show`` of its interfaces) and check them
        (:func:`decobench.netem.tc.check_docker_tc_readback`); a mismatch names the container."""
        from decobench.netem.netns import ShapingMismatch
        from decobench.netem.tc import check_docker_tc_readback

        try:
            with self.opener(urllib.request.Request(url, method="GET"),
                             timeout=self.timeout_s) as response:
                text = response.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError) as exc:
            raise DecobenchError(f"docker-tc at {self.url} did not answer GET {url} ({exc})") \
                from None
        problems = check_docker_tc_readback(text, setting, self.mechanism, self.framing_factor)
        if problems:
            raise ShapingMismatch(f"container {container} (docker-tc): " + "; ".join(problems))


# -------------------------------------------------------------------------------- player
@dataclass(frozen=True)
class PlayedChange:
    """One applied change: trace time ``planned_s``, when it was applied (``actual_s``,
    seconds since t0, taken just before ``apply``) and how long ``apply`` took."""

    planned_s: float
    actual_s: float
    setting: LinkSetting
    apply_s: float

    def describe(self) -> str:
        return (
            f"t={self.actual_s:.3f}s (planned {self.planned_s:.3f}s, applied in "
            f"{self.apply_s * 1e3:.1f} ms): {self.setting.describe()}"
        )


def read_start_file(path: str | os.PathLike[str]) -> float | None:
    """The monotonic t0 written in ``path``, or None while the file is missing or incomplete."""
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8").strip()
        value = float(text)
    except (OSError, ValueError):
        return None
    return value if math.isfinite(value) else None


class TracePlayer:
    """Applies a trace's changes to a :class:`Shaper` on a background thread.

    Trace time 0 is ``t0`` on ``clock`` (``time.monotonic``, i.e. CLOCK_MONOTONIC, which the
    training processes share across namespaces and containers). Each change is applied once
    ``clock() >= t0 + t`` (never earlier); when the player is late, changes already
    overtaken by later ones are skipped and only the one in force is applied. ``horizon_s``
    ends playback (needed for a looping trace to end by itself). ``clock`` and ``sleep``
    are injectable for tests; by default sleeping is interruptible by :meth:`stop`. An
    error in the thread stops playback and is raised by :meth:`stop` or :meth:`join`.
    """

    def __init__(
        self,
        trace: Trace,
        shaper: Shaper,
        *,
        horizon_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] | None = None,
        poll_s: float = 0.01,
        max_sleep_s: float = 0.5,
        on_change: Callable[[PlayedChange], None] | None = None,
    ) -> None:
        if horizon_s is not None and not horizon_s > 0:
            raise ValueError(f"horizon_s must be > 0, got {horizon_s!r}")
        self.trace = trace
        self.shaper = shaper
        self.horizon_s = horizon_s
        self._clock = clock
        self._stop = threading.Event()
        self._sleep = sleep if sleep is not None else self._stop.wait
        self._poll_s = poll_s
        self._max_sleep_s = max_sleep_s
        self._on_change = on_change
        self._records: list[PlayedChange] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._t0: float | None = None

    # ---------------------------------------------------------------------------- control
    def start(self, t0: float | None = None) -> None:
        """Start playing with trace time 0 at ``t0`` (default: now)."""
        self._launch(lambda: self._clock() if t0 is None else t0)

    def wait_for_start_file(
        self, path: str | os.PathLike[str], timeout_s: float | None = None
    ) -> None:
        """Start a thread that waits for ``path`` to hold t0 (a float), then plays.

        The writer (the training's rank 0) should write the file atomically; a missing or
        unparsable file is polled again every ``poll_s``. Returns at once.
        """

        def wait() -> float | None:
            deadline = None if timeout_s is None else self._clock() + timeout_s
            while not self._stop.is_set():
                t0 = read_start_file(path)
                if t0 is not None:
                    return t0
                if deadline is not None and self._clock() >= deadline:
                    raise DecobenchError(
                        f"trace player: no start time in {path} after {timeout_s:g} s "
                        "(the training's rank 0 writes it when training starts)"
                    )
                self._sleep(self._poll_s)
            return None

        self._launch(wait)

    def stop(self, timeout_s: float | None = 10.0) -> list[PlayedChange]:
        """Stop playing (the links keep their last setting); re-raise a thread error."""
        self._stop.set()
        return self.join(timeout_s)

    def join(self, timeout_s: float | None = None) -> list[PlayedChange]:
        """Wait for playback to end (schedule or horizon exhausted, or stopped)."""
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise DecobenchError(f"trace player did not stop within {timeout_s} s")
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self.records

    # ------------------------------------------------------------------------------ state
    @property
    def records(self) -> list[PlayedChange]:
        with self._lock:
            return list(self._records)

    @property
    def t0(self) -> float | None:
        return self._t0

    @property
    def error(self) -> BaseException | None:
        """The error that stopped playback, if any (still raised by :meth:`stop`)."""
        return self._error

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ----------------------------------------------------------------------------- thread
    def _launch(self, get_t0: Callable[[], float | None]) -> None:
        if self._thread is not None:
            raise DecobenchError("trace player already started")
        self._thread = threading.Thread(
            target=self._main, args=(get_t0,), name="trace-player", daemon=True
        )
        self._thread.start()

    def _main(self, get_t0: Callable[[], float | None]) -> None:
        try:
            t0 = get_t0()
            if t0 is None:
                return
            self._t0 = t0
            self._play(t0)
        except BaseException as exc:  # kept for stop()/join()
            self._error = exc

    def _changes(self) -> Iterator[tuple[float, LinkSetting]]:
        for t, setting in iter_changes(self.trace):
            if self.horizon_s is not None and t >= self.horizon_s:
                return
            yield t, setting

    def _play(self, t0: float) -> None:
        changes = self._changes()
        upcoming = next(changes, None)
        while upcoming is not None:
            current = upcoming
            upcoming = next(changes, None)
            # late: skip changes already overtaken by the next one
            while upcoming is not None and self._clock() - t0 >= upcoming[0]:
                current = upcoming
                upcoming = next(changes, None)
            if not self._wait_until(t0 + current[0]):
                return
            started = self._clock()
            self.shaper.apply(current[1])
            record = PlayedChange(current[0], started - t0, current[1], self._clock() - started)
            with self._lock:
                self._records.append(record)
            if self._on_change is not None:
                self._on_change(record)
        if self.horizon_s is not None:
            self._wait_until(t0 + self.horizon_s)

    def _wait_until(self, target: float) -> bool:
        """Sleep until ``clock() >= target``; False if stopped first."""
        while True:
            if self._stop.is_set():
                return False
            remaining = target - self._clock()
            if remaining <= 0:
                return True
            self._sleep(min(remaining, self._max_sleep_s))


# ----------------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m decobench.netem.player",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Play a network trace (bandwidth a(t), latency b(t)) live on real links.\n\n"
            "  --via tc         shape a local device with tc (a container with NET_ADMIN,\n"
            "                   or a namespace with --netns); sets the shaping up first\n"
            "  --via docker-tc  POST to the docker-tc daemon (lukaszlach/docker-tc) for\n"
            "                   each --container\n\n"
            "Trace time 0 is now, or the CLOCK_MONOTONIC time written to --start-file by\n"
            "the training's rank 0. The bandwidth is goodput; tc is given bandwidth x\n"
            "1514/1448 (TCP framing). See docs/emulation.md."
        ),
        epilog=(
            "examples:\n"
            "  python -m decobench.netem.player --trace wan-200ms-lowbw-varying --via tc --dev eth0\n"
            "  python -m decobench.netem.player --trace my.csv --loop --via docker-tc \\\n"
            "      --url http://localhost:4080 --container decobench-worker-0 \\\n"
            "      --container decobench-worker-1 --start-file /run/decobench/.clock_start"
        ),
    )
    parser.add_argument("--trace", required=True, help="bundled trace name or path to a trace CSV")
    parser.add_argument(
        "--loop",
        action="store_true",
        help="repeat the trace after its period (default: hold the last row)",
    )
    parser.add_argument(
        "--via",
        required=True,
        choices=("tc", "docker-tc"),
        help="how to shape: local tc, or the docker-tc HTTP API",
    )
    parser.add_argument(
        "--dev", default="eth0", help="--via tc: the device whose egress is shaped (default: eth0)"
    )
    parser.add_argument(
        "--netns",
        default=None,
        help="--via tc: run tc in this network namespace (ip netns exec NS)",
    )
    parser.add_argument(
        "--mechanism",
        choices=("auto", *MECHANISMS),
        default="auto",
        help="who adds the latency: the kernel (netem), a user-space delayer "
        "on the device's received packets (nfqueue: iptables NFQUEUE, for kernels "
        "without netem), or the training's communication layer (comm-layer: tc "
        "shapes the rate only). auto: --via tc tries netem, then nfqueue, then "
        "comm-layer; --via docker-tc uses netem (default: auto)",
    )
    parser.add_argument(
        "--framing-factor",
        type=float,
        default=TCP_FRAMING_FACTOR,
        help="tc rate = bandwidth x this (default: 1514/1448, TCP at MTU 1500)",
    )
    parser.add_argument(
        "--url",
        default="http://localhost:4080",
        help="--via docker-tc: the daemon's URL (default: http://localhost:4080)",
    )
    parser.add_argument(
        "--container",
        action="append",
        default=[],
        help="--via docker-tc: a container name or id; repeat for each",
    )
    parser.add_argument(
        "--start-file",
        default=None,
        help="wait for this file to hold the monotonic time of trace time 0",
    )
    parser.add_argument(
        "--start-timeout",
        type=float,
        default=None,
        help="seconds to wait for --start-file (default: for ever)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds of trace time to play, then exit (default: until the "
        "last change of a non-looping trace, or until stopped; with the nfqueue "
        "mechanism the latency is added by this process, so it then keeps running, "
        "holding the last row, until stopped)",
    )
    parser.add_argument(
        "--ready-file",
        default=None,
        help="--via tc: once the link is set up and read back, write this file (JSON: the "
        "device, the latency mechanism in use and the first row); `python -m "
        "decobench.emulated --shaper-ready` waits for it before training",
    )
    parser.add_argument(
        "--no-setup",
        action="store_true",
        help="--via tc: the shaping already exists; only change it",
    )
    return parser


def _tc_shaper(args: argparse.Namespace, first: LinkSetting) -> TcShaper:
    """The tc shaper, set up unless --no-setup; 'auto' tries netem, nfqueue, comm-layer."""
    mechanisms = [args.mechanism]
    if args.mechanism == "auto":
        from decobench.netem.nfqueue import nfqueue_usable_here

        mechanisms = ["netem", *(["nfqueue"] if nfqueue_usable_here() else []), "comm-layer"]
    runner = SubprocessRunner()
    for mechanism in mechanisms:
        shaper = TcShaper(
            args.dev,
            mechanism,
            runner,
            args.framing_factor,
            args.netns,
            log=lambda line: print(f"+ {line}", flush=True),
        )
        if args.no_setup:
            return shaper
        try:
            shaper.setup(first)
            return shaper
        except CommandError as exc:
            if mechanism == "netem" and len(mechanisms) > 1 and "unknown" in exc.stderr.lower():
                print(f"kernel lacks sch_netem: using --mechanism {mechanisms[1]}", flush=True)
                continue
            raise
    raise AssertionError("unreachable")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    for option in ("duration", "start_timeout"):
        value = getattr(args, option)
        if value is not None and not (math.isfinite(value) and value > 0):
            parser.error(f"--{option.replace('_', '-')} must be a number of seconds > 0")
    try:
        trace = load_trace(args.trace, loop=args.loop)
        first = next(iter_changes(trace))[1]
        shaper: Shaper
        if args.via == "tc":
            if args.ready_file:  # a previous run's file must not say this link is ready
                pathlib.Path(args.ready_file).unlink(missing_ok=True)
            shaper = _tc_shaper(args, first)
            if args.ready_file:
                write_text_atomic(args.ready_file, json.dumps({
                    "dev": args.dev, "mechanism": shaper.mechanism,
                    "rate_bps": first.rate_bps, "latency_s": first.latency_s,
                    "tcp": shaper.tcp.to_dict() if shaper.tcp else None}) + "\n")
                print(f"link {args.dev} shaped ({shaper.mechanism}); wrote {args.ready_file}",
                      flush=True)
        elif args.ready_file:
            raise DecobenchError("--ready-file needs --via tc (docker-tc shapes from outside "
                                 "the containers and cannot say when it is done)")
        else:
            mechanism = "netem" if args.mechanism == "auto" else args.mechanism
            shaper = DockerTcShaper(
                args.url, args.container, mechanism, framing_factor=args.framing_factor
            )
        player = TracePlayer(
            trace,
            shaper,
            horizon_s=args.duration,
            on_change=lambda r: print(r.describe(), flush=True),
        )
        stop = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stop.set())
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        if args.start_file:
            print(f"waiting for the start time in {args.start_file}", flush=True)
            player.wait_for_start_file(args.start_file, timeout_s=args.start_timeout)
        else:
            player.start()
        while player.running and not stop.wait(0.2):
            pass
        records = player.stop()
        holds_delay = isinstance(shaper, TcShaper) and shaper.delayer is not None
        if holds_delay and args.duration is None and not stop.is_set():
            # The latency is this process's NFQUEUE delayer: exiting would leave the queue
            # without a reader and the link dropping every received packet.
            print("trace played; holding the nfqueue delay until stopped "
                  "(SIGTERM or Ctrl-C)", flush=True)
            stop.wait()
        if holds_delay:
            print(f"nfqueue delayer: {shaper.close()}", flush=True)  # type: ignore[union-attr]
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    except DecobenchError as exc:
        print(f"decobench.netem.player: error: {exc}", file=sys.stderr)
        return 2
    print(f"played {len(records)} change(s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
