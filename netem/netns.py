"""The emulated network: one Linux network namespace per worker, joined by a bridge.

Topology for ``n`` workers (``docs/emulation.md``, "Topology")::

    ns {prefix}-w0            ns {prefix}-br                      ns {prefix}-w1
    eth0 10.77.X.1/24 ===veth=== {prefix}w0 -+- bridge {prefix}br -+- {prefix}w1 ===veth=== eth0 10.77.X.2/24
    (shaped: rate [+ delay])                                          (shaped)

Each worker's ``eth0`` egress is shaped (:mod:`decobench.netem.tc`), so the path from worker i to
worker j sees worker i's rate and (under ``netem``) its latency; a round trip crosses two
shaped links. All namespaces are private to one run: addresses may repeat across runs, and
the subnet octet ``X`` derived from the prefix only makes logs easier to tell apart.

Every command goes through a :class:`Runner` so that tests can check the exact command
sequence without root. Each namespace's loopback carries an owner tag (``ip link set lo
alias``) naming the creating process, so :func:`cleanup_stale` removes only namespaces
whose owner is gone (e.g. a run killed with SIGKILL); ``python -m decobench.netem.netns --cleanup``.
The runner, the owner tags and the shared errors live in :mod:`decobench.netem.host` and
are importable from here too; this module sits on top of it, :mod:`decobench.netem.loss`
and :mod:`decobench.netem.nfqueue`, none of which imports it.
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import json
import re
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from decobench.errors import DecobenchError
from decobench.netem.host import (
    PREFIX_STEM,
    CommandError,
    Delayer,
    Runner,
    ShapingMismatch,
    SubprocessRunner,
    owner_alive,
    owner_tag,
    require_root,
    throwaway_namespace,
)
from decobench.netem.loss import (
    OUTAGE_BPS,
    LinkSwitch,
    change_link,
    check_loss_readback,
    check_probability,
    is_outage,
    loss_rule_commands,
    readback_command,
)
from decobench.netem.nfqueue import DelayerProcess, kernel_has_nfqueue, rule_commands
from decobench.netem.tc import (
    MECHANISMS,
    PACKET_LEVEL_MECHANISMS,
    TCP_FRAMING_FACTOR,
    LinkSetting,
    check_readback,
    device_commands,
    exec_in,
    format_command,
    readback_commands,
    shaping_commands,
    tc_rate_bps,
)
from decobench.netem.tcp import (
    HostChange,
    TcpTuning,
    apply_tuning,
    buffer_bytes,
    congestion_control_allowed,
    initial_window_packets,
    print_note,
)

PREFIX_GLOB: str = PREFIX_STEM + "[0-9a-f]" * 5 + "-*"
"""Names of this project's namespaces: ``dcb`` + 5 hex digits + ``-`` + role."""

WORKER_DEVICE: str = "eth0"
"""The worker end of each veth pair, inside the worker's namespace."""

IFNAMSIZ: int = 15
"""Longest Linux interface name."""

SUBNET_BASE: str = "10.77"
MAX_WORKERS: int = 254

LATENCY_CHOICES: tuple[str, ...] = ("auto", *MECHANISMS)


# ------------------------------------------------------------------------------ shaping
def verify_shaping(runner: Runner, dev: str, netns: str | None, setting: LinkSetting,
                   mechanism: str, framing_factor: float, link: str) -> None:
    """Read ``dev``'s qdiscs and classes back from tc and raise :class:`ShapingMismatch`
    naming ``link`` unless they are what :func:`decobench.netem.tc.shaping_commands` set for
    ``setting`` (never shape silently wrong: a tc that answers success and leaves the link
    unshaped, or shaped at another rate, stops the run)."""
    classes, qdiscs = (runner.run(argv).stdout for argv in readback_commands(dev, netns))
    problems = check_readback(classes, qdiscs, setting, mechanism, framing_factor)
    if problems:
        raise ShapingMismatch(f"{link} ({dev}{f' in {netns}' if netns else ''}) is not "
                              f"shaped to {setting.describe()} under {mechanism}: "
                              + "; ".join(problems))


DelayerFactory = Callable[[list[str], float, str], Delayer]
"""``factory(prefix, delay_s, name)`` starts a delayer with the command prefix ``prefix``
(``ip netns exec NS``) holding packets ``delay_s``; ``name`` names the link in errors."""


def _nfqueue_delayer(prefix: list[str], delay_s: float, name: str) -> Delayer:
    return DelayerProcess(prefix, delay_s, name)


def in_netns(namespace: str, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside ``namespace``: ``ip netns exec NS ...``."""
    return [*exec_in(namespace), *argv]


# -------------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class NetworkPlan:
    """Names and addresses of one run's namespaces (see the module docstring).

    Attributes:
        workers: number of worker namespaces, 1 to :data:`MAX_WORKERS`.
        prefix: unique per run, ``dcb`` + 5 hex digits (:meth:`new`); starts every name.
        subnet_octet: third octet of the workers' ``10.77.X.0/24`` subnet.
    """

    workers: int
    prefix: str
    subnet_octet: int

    def __post_init__(self) -> None:
        if not isinstance(self.workers, int) or not 1 <= self.workers <= MAX_WORKERS:
            raise DecobenchError(
                f"the emulated network needs 1 to {MAX_WORKERS} workers, got {self.workers!r}"
            )
        if not re.fullmatch(r"[a-z][a-z0-9]*", self.prefix or ""):
            raise DecobenchError(
                f"network prefix must be lowercase letters and digits starting with a letter, "
                f"got {self.prefix!r}"
            )
        longest = max(len(self.bridge_device), len(self.peer_device(self.workers - 1)))
        if longest > IFNAMSIZ:
            raise DecobenchError(
                f"network prefix {self.prefix!r} is too long: interface names would have "
                f"{longest} characters, Linux allows {IFNAMSIZ}; use a shorter prefix"
            )
        if not 0 <= self.subnet_octet <= 255:
            raise DecobenchError(f"subnet_octet must be 0..255, got {self.subnet_octet!r}")

    @classmethod
    def new(cls, workers: int, prefix: str | None = None) -> NetworkPlan:
        """A plan with a fresh random prefix (``dcb`` + 5 hex digits) unless one is given."""
        prefix = prefix or PREFIX_STEM + secrets.token_hex(3)[:5]
        digits = re.sub(r"[^0-9a-f]", "", prefix[len(PREFIX_STEM) :]) or "0"
        return cls(workers=workers, prefix=prefix, subnet_octet=int(digits, 16) % 256)

    # names
    @property
    def bridge_namespace(self) -> str:
        return f"{self.prefix}-br"

    @property
    def bridge_device(self) -> str:
        return f"{self.prefix}br"

    def worker_namespace(self, i: int) -> str:
        return f"{self.prefix}-w{self._check(i)}"

    def peer_device(self, i: int) -> str:
        """The bridge-side end of worker i's veth pair (in the bridge namespace)."""
        return f"{self.prefix}w{self._check(i)}"

    def worker_address(self, i: int) -> str:
        return f"{SUBNET_BASE}.{self.subnet_octet}.{self._check(i) + 1}"

    @property
    def namespaces(self) -> list[str]:
        """Every namespace of the plan, bridge first."""
        return [self.bridge_namespace] + [self.worker_namespace(i) for i in range(self.workers)]

    def _check(self, i: int) -> int:
        if not 0 <= i < self.workers:
            raise IndexError(f"worker index {i} out of range 0..{self.workers - 1}")
        return i


# ----------------------------------------------------------------------------- network
@dataclass(frozen=True)
class CommandRecord:
    """One executed command and when, in seconds since the network's set-up began."""

    t_s: float
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.t_s:10.6f}  {format_command(self.argv)}"

    @property
    def is_tc(self) -> bool:
        """A tc command, run directly or through ``ip netns exec NS``."""
        argv = self.argv[4:] if self.argv[:3] == ("ip", "netns", "exec") else self.argv
        return bool(argv) and argv[0] == "tc"


@dataclass
class NamespaceNetwork:
    """One run's namespaces, bridge, veth pairs and shaped links (a context manager).

    ``with NamespaceNetwork(plan, setting, mechanism) as net:`` creates everything and shapes
    each worker's egress with ``setting`` (tc action ``add``); leaving the block deletes the
    namespaces (which deletes the veth pairs and the bridge), also after an exception.
    ``runner`` defaults to :class:`SubprocessRunner` and then root is required.

    Every setting is read back from tc after it is applied (``verify``; see
    :func:`verify_shaping`). Under the ``nfqueue`` mechanism each worker's ``eth0`` also
    gets an iptables NFQUEUE rule on INPUT and a delayer process in its namespace
    (``delayer_factory``), whose delay :meth:`apply` changes with the rate and reads back;
    :attr:`delay_stats` holds each delayer's final statistics after teardown.
    """

    plan: NetworkPlan
    setting: LinkSetting
    mechanism: str
    runner: Runner | None = None
    framing_factor: float = TCP_FRAMING_FACTOR
    clock: Callable[[], float] = time.monotonic
    verify: bool = True
    delayer_factory: DelayerFactory = _nfqueue_delayer
    loss: float = field(default=0.0, init=False)
    _switches: dict[int, LinkSwitch] = field(default_factory=dict, init=False, repr=False)
    delay_stats: dict[int, Any] = field(default_factory=dict, init=False, repr=False)
    qdisc_stats: dict[int, list[dict[str, Any]]] = field(default_factory=dict, init=False,
                                                          repr=False)
    """Each worker link's qdisc counters, read at teardown (:func:`qdisc_counters`)."""
    tcp_stats: dict[int, dict[str, int]] = field(default_factory=dict, init=False, repr=False)
    """Each worker namespace's TCP counters, read at teardown (:func:`tcp_counters`)."""
    _delayers: dict[int, Delayer] = field(default_factory=dict, init=False, repr=False)
    _log: list[CommandRecord] = field(default_factory=list, init=False, repr=False)
    _created: list[str] = field(default_factory=list, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _t0: float | None = field(default=None, init=False, repr=False)
    _up: bool = field(default=False, init=False, repr=False)
    tcp: TcpTuning | None = field(default=None, init=False)
    """The TCP tuning every worker got (:mod:`decobench.netem.tcp`), once created."""
    notify: Callable[[str], None] = field(default=print_note, repr=False)
    """Where a note about a changed host setting goes (the terminal by default)."""
    host_changes: list[HostChange] = field(default_factory=list, init=False)
    """Host settings changed to set the network up, each put back before :meth:`create`
    returns (:func:`decobench.netem.tcp.congestion_control_allowed`)."""

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise DecobenchError(
                f"unknown latency mechanism {self.mechanism!r}; choose one of "
                f"{', '.join(MECHANISMS)} (resolve 'auto' with resolve_latency_mechanism)"
            )

    # --------------------------------------------------------------------- lifecycle
    def __enter__(self) -> NamespaceNetwork:
        self.create()
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    def create(self) -> None:
        """Create the namespaces and links and apply the initial setting (``add``)."""
        if self._up or self._created:
            raise DecobenchError(f"network {self.plan.prefix} was already created")
        if is_outage(self.setting.rate_bps):
            raise DecobenchError(
                f"the first setting, {self.setting.describe()}, is an outage (below "
                f"{OUTAGE_BPS / 1e3:g} kbit/s): the links cannot be set up and probed; start "
                "the trace with a usable row")
        if self.runner is None:
            require_root()
            self.runner = SubprocessRunner()
        runner = self.runner

        def read(argv: list[str]) -> str:
            return runner.run(argv).stdout

        self._switches = {i: LinkSwitch(WORKER_DEVICE, self.plan.worker_namespace(i),
                                        self._run, read, self._link_name(i))
                          for i in range(self.plan.workers)}
        self._t0 = self.clock()
        plan, tag = self.plan, owner_tag()
        try:
            with congestion_control_allowed(self._run, read, self.notify) as change:
                if change is not None:
                    self.host_changes.append(change)
                    self._note("# host setting", change.key,
                               f"{change.before} -> {change.during}",
                               "until the namespaces are set up, then restored")
                self._create(plan, tag, read)
        except BaseException:
            self.teardown()
            raise
        self._up = True

    def _create(self, plan: NetworkPlan, tag: str, read: Callable[[list[str]], str]) -> None:
        """The bridge, each worker's namespace, veth, qdiscs, TCP tuning and shaping
        (``read``: a command's stdout)."""
        br, bridge = plan.bridge_namespace, plan.bridge_device
        self._add_namespace(br, tag)
        self._run(["ip", "-n", br, "link", "add", bridge, "type", "bridge"])
        self._run(["ip", "-n", br, "link", "set", bridge, "up"])
        for i in range(plan.workers):
            ns, peer = plan.worker_namespace(i), plan.peer_device(i)
            self._add_namespace(ns, tag)
            veth = f"link add {peer} type veth peer name {WORKER_DEVICE} netns {ns}"
            self._run(["ip", "-n", br, *veth.split()])
            self._run(["ip", "-n", br, "link", "set", peer, "master", bridge])
            self._run(["ip", "-n", br, "link", "set", peer, "up"])
            address = f"{plan.worker_address(i)}/24"
            self._run(["ip", "-n", ns, "addr", "add", address, "dev", WORKER_DEVICE])
            for argv in device_commands(WORKER_DEVICE, netns=ns,
                                        rate_bps=tc_rate_bps(self.setting,
                                                             self.framing_factor)):
                self._run(argv)
            self._run(["ip", "-n", ns, "link", "set", WORKER_DEVICE, "up"])
            window, buffer = self._tcp_sizes()
            self.tcp = apply_tuning(self._run, read, WORKER_DEVICE, window, ns,
                                    f"worker {i} (namespace {ns})", buffer)
            self._shape(i, self.setting, "add")
            if self.mechanism == "nfqueue":
                self._start_delayer(i)

    def _tcp_sizes(self) -> tuple[int, int]:
        """TCP's initial window (packets) and socket buffer (bytes) from the first setting,
        with the round trip the kernel sees (none under comm-layer): netem.tcp's rules."""
        kernel_latency = (self.setting.latency_s if self.mechanism in PACKET_LEVEL_MECHANISMS
                          else 0.0)
        return (initial_window_packets(self.setting.rate_bps, kernel_latency),
                buffer_bytes(self.setting.rate_bps, kernel_latency))

    def _add_namespace(self, ns: str, tag: str) -> None:
        self._run(["ip", "netns", "add", ns])
        self._created.append(ns)
        self._run(["ip", "-n", ns, "link", "set", "lo", "alias", tag])
        self._run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def _start_delayer(self, i: int) -> None:
        ns = self.plan.worker_namespace(i)
        for argv in rule_commands(WORKER_DEVICE, "add", netns=ns):
            self._run(argv)
        self._note("# nfqueue delayer", ns, f"delay {self.setting.latency_s!r} s")
        self._delayers[i] = self.delayer_factory(
            exec_in(ns), self.setting.latency_s, self._link_name(i))

    def _note(self, *words: str) -> None:
        """A comment line in the command log (``# ...``)."""
        with self._lock:
            t = self.clock() - (self._t0 if self._t0 is not None else self.clock())
            self._log.append(CommandRecord(t, words))

    def _link_name(self, i: int) -> str:
        return f"link of worker {i} ({self.plan.worker_address(i)})"

    def teardown(self) -> None:
        """Delete every namespace this network created; safe to call more than once."""
        errors: list[str] = []
        self._read_qdisc_stats()
        while self._delayers:
            i, delayer = self._delayers.popitem()
            try:
                self.delay_stats[i] = delayer.stop()
            except DecobenchError as exc:
                errors.append(str(exc))
        while self._created:
            ns = self._created[-1]
            try:
                self._run(["ip", "netns", "del", ns])
            except CommandError as exc:
                if "No such file" not in exc.stderr:
                    errors.append(str(exc))
            self._created.pop()
        self._up = False
        if errors:
            raise DecobenchError(
                "could not delete every namespace of the emulated network: "
                + "; ".join(errors)
                + " (remove leftovers with `python -m decobench.netem.netns --cleanup`)"
            )

    def _read_qdisc_stats(self) -> None:
        """Read every worker link's qdisc counters and its namespace's TCP counters before
        the namespace goes (best effort: a link that cannot be read keeps no counters). A
        drop at the shaper, and any retransmission (a drop anywhere, or a timer that fired
        without one), costs a round trip or more in the run's timings."""
        if self.runner is None:
            return
        for i in range(self.plan.workers):
            ns = self.plan.worker_namespace(i)
            if ns not in self._created:
                continue
            try:
                out = self.runner.run(in_netns(ns, ["tc", "-s", "-j", "qdisc", "show", "dev",
                                                    WORKER_DEVICE])).stdout
            except (CommandError, OSError):
                out = ""
            counters = qdisc_counters(out)
            if counters is not None:
                self.qdisc_stats[i] = counters
            try:
                out = self.runner.run(in_netns(ns, ["cat", *TCP_COUNTER_FILES])).stdout
            except (CommandError, OSError):
                continue
            tcp = tcp_counters(out)
            if tcp is not None:
                self.tcp_stats[i] = tcp

    def qdisc_report(self) -> dict[str, Any]:
        """The links' qdisc counters and the namespaces' TCP counters (after teardown) for
        the run directory, with the totals of drops over every worker's egress and of
        retransmitted segments over every worker."""
        links = {str(i): c for i, c in sorted(self.qdisc_stats.items())}
        tcp = {str(i): c for i, c in sorted(self.tcp_stats.items())}
        return {"device": WORKER_DEVICE, "drops": sum(q["drops"] for c in links.values()
                                                      for q in c),
                "links": links,
                "retransmitted_segments": (sum(c["retransmitted_segments"]
                                               for c in tcp.values()) if tcp else None),
                "tcp": tcp}

    # ------------------------------------------------------------------------ shaping
    def apply(self, setting: LinkSetting) -> None:
        """Give every worker link ``setting`` now (``tc qdisc change``, queues kept). A
        bandwidth below :data:`decobench.netem.loss.OUTAGE_BPS` takes the links down
        instead (they drop every packet; the shaping keeps its last rate) until a setting
        above it comes."""
        if not self._up:
            raise DecobenchError("the emulated network is not up (use it inside its with-block)")
        for i in range(self.plan.workers):
            change_link(setting, shape=functools.partial(self._shape, i, action="change"),
                        delayer=self._delayers.get(i), switch=self._switches[i],
                        name=self._link_name(i))
        self.setting = setting

    def _shape(self, i: int, setting: LinkSetting, action: str) -> None:
        ns = self.plan.worker_namespace(i)
        for argv in shaping_commands(
            WORKER_DEVICE, setting, self.mechanism, action, self.framing_factor, netns=ns
        ):
            self._run(argv)
        if self.verify:
            assert self.runner is not None
            verify_shaping(self.runner, WORKER_DEVICE, ns, setting, self.mechanism,
                           self.framing_factor, self._link_name(i))

    def set_loss(self, probability: float) -> None:
        """Drop ``probability`` of the packets each worker receives (0 removes the rules);
        each rule is read back (:mod:`decobench.netem.loss`)."""
        if not self._up:
            raise DecobenchError("the emulated network is not up (use it inside its with-block)")
        probability = check_probability(probability)
        assert self.runner is not None
        for i in range(self.plan.workers):
            ns = self.plan.worker_namespace(i)
            if self.loss:
                for argv in loss_rule_commands(WORKER_DEVICE, self.loss, "delete", netns=ns):
                    self._run(argv)
            if probability:
                for argv in loss_rule_commands(WORKER_DEVICE, probability, "add", netns=ns):
                    self._run(argv)
            problems = check_loss_readback(self.runner.run(readback_command(ns)).stdout,
                                           WORKER_DEVICE, probability)
            if problems:
                raise ShapingMismatch(f"{self._link_name(i)}: " + "; ".join(problems))
        self.loss = probability

    def dead_delayers(self) -> list[int]:
        """Workers whose NFQUEUE delayer has exited (empty when all run, or none is used)."""
        return [i for i, d in self._delayers.items() if not d.alive()]

    def delay_report(self) -> dict[str, Any]:
        """The delayers' statistics (after teardown) for the run directory."""
        stats = {str(i): (s.to_dict() if hasattr(s, "to_dict") else s)
                 for i, s in sorted(self.delay_stats.items())}
        return {"latency_mechanism": self.mechanism, "delayers": stats}

    def _run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        assert self.runner is not None
        with self._lock:
            t = self.clock() - (self._t0 if self._t0 is not None else self.clock())
            self._log.append(CommandRecord(t, tuple(argv)))
        return self.runner.run(argv)

    # ------------------------------------------------------------------------- access
    @property
    def workers(self) -> int:
        return self.plan.workers

    def worker_namespace(self, i: int) -> str:
        return self.plan.worker_namespace(i)

    def worker_address(self, i: int) -> str:
        return self.plan.worker_address(i)

    def worker_device(self, i: int) -> str:
        self.plan.worker_namespace(i)  # index check
        return WORKER_DEVICE

    def exec_prefix(self, i: int) -> list[str]:
        """Prefix that runs a command in worker i's namespace: ``ip netns exec NS``."""
        return in_netns(self.plan.worker_namespace(i), [])

    @property
    def command_log(self) -> list[CommandRecord]:
        with self._lock:
            return list(self._log)

    @property
    def commands(self) -> list[str]:
        """Every command executed, in order: ``"  0.012345  ip netns add ..."``."""
        return [str(r) for r in self.command_log]

    @property
    def tc_commands(self) -> list[str]:
        """The tc commands executed, in order, as shell lines (no timestamps)."""
        return [format_command(r.argv) for r in self.command_log if r.is_tc]


# ------------------------------------------------------------------------ netem check
QDISC_COUNTERS = ("bytes", "packets", "drops", "overlimits", "requeues")
"""The counters :func:`qdisc_counters` keeps of each qdisc."""


TCP_COUNTER_FILES = ("/proc/net/snmp", "/proc/net/netstat")
"""The namespace's TCP counters (each namespace has its own, from zero)."""

TCP_COUNTERS = {("Tcp", "RetransSegs"): "retransmitted_segments",
                ("TcpExt", "TCPLossProbes"): "loss_probes",
                ("TcpExt", "TCPTimeouts"): "timeouts",
                ("TcpExt", "TCPSpuriousRTOs"): "spurious_timeouts",
                ("TcpExt", "TCPFastRetrans"): "fast_retransmits"}
"""The counters :func:`tcp_counters` keeps, by (table, field) of /proc/net/snmp and
/proc/net/netstat, and the names the report gives them."""


def tcp_counters(text: str) -> dict[str, int] | None:
    """:data:`TCP_COUNTERS` from the text of :data:`TCP_COUNTER_FILES`: each table is a line
    of names (``Tcp: RtoAlgorithm ...``) and a line of values with the same prefix. None
    without ``Tcp: RetransSegs``; a missing TcpExt field counts 0 (older kernels)."""
    tables: dict[str, dict[str, str]] = {}
    lines = [line.split() for line in text.splitlines() if ":" in line]
    for names, values in zip(lines, lines[1:], strict=False):
        header = names[0] == values[0] and names[0].endswith(":")
        if header and len(names) == len(values) and not names[1].lstrip("-").isdigit():
            tables.setdefault(names[0][:-1], dict(zip(names[1:], values[1:], strict=True)))
    if "RetransSegs" not in tables.get("Tcp", {}):
        return None
    try:
        return {name: int(tables.get(table, {}).get(key, 0))
                for (table, key), name in TCP_COUNTERS.items()}
    except ValueError:
        return None


def qdisc_counters(json_text: str) -> list[dict[str, Any]] | None:
    """``tc -s -j qdisc show``'s output as one dict per qdisc: kind, handle, parent and
    :data:`QDISC_COUNTERS`; None when it is not that JSON (an old tc without ``-j``)."""
    try:
        qdiscs = json.loads(json_text)
    except (json.JSONDecodeError, TypeError):
        return None
    if not isinstance(qdiscs, list):
        return None
    kept = []
    for q in qdiscs:
        if not isinstance(q, dict) or "kind" not in q:
            return None
        kept.append({"kind": q["kind"], "handle": q.get("handle", ""),
                     "parent": q.get("parent", "root" if q.get("root") else ""),
                     **{c: int(q.get(c, 0)) for c in QDISC_COUNTERS}})
    return kept


def kernel_has_netem(runner: Runner | None = None) -> bool:
    """Whether the kernel can add a ``netem`` qdisc (``sch_netem`` built in or loadable).

    Tries it on a veth pair in a throwaway namespace, which is always deleted.
    """
    if runner is None:
        require_root()
        runner = SubprocessRunner()
    with throwaway_namespace(runner, "nt") as ns:
        runner.run(["ip", "-n", ns, "link", "add", "nt0", "type", "veth", "peer", "name", "nt1"])
        runner.run(["ip", "-n", ns, "link", "set", "nt0", "up"])
        try:
            runner.run(
                ["tc", "-n", ns, "qdisc", "add", "dev", "nt0", "root", "netem", "delay", "1ms"]
            )
        except CommandError as exc:
            if "unknown" in exc.stderr.lower() or "not found" in exc.stderr.lower():
                return False
            raise
        return True


def resolve_latency_mechanism(requested: str, has_netem: Callable[[], bool] | None = None,
                              has_nfqueue: Callable[[], bool] | None = None) -> str:
    """``"netem"``, ``"nfqueue"`` or ``"comm-layer"`` for a requested ``auto`` or one of them.

    ``auto`` picks the first this machine can do: ``netem`` (a kernel qdisc), then
    ``nfqueue`` (iptables NFQUEUE and a user-space delayer: packet-level latency without
    netem), then ``comm-layer`` (the training's communication layer). Asking for ``netem``
    or ``nfqueue`` where it cannot work is an error that names the fallbacks.
    ``has_netem`` and ``has_nfqueue`` default to :func:`kernel_has_netem` and
    :func:`decobench.netem.nfqueue.kernel_has_nfqueue`.
    """
    if requested not in LATENCY_CHOICES:
        raise DecobenchError(
            f"unknown latency mechanism {requested!r}; choose one of {', '.join(LATENCY_CHOICES)}"
        )
    if requested == "comm-layer":
        return "comm-layer"
    if requested in ("auto", "netem") and (has_netem or kernel_has_netem)():
        return "netem"
    if requested == "netem":
        raise DecobenchError(
            "this kernel lacks sch_netem (`tc qdisc add ... netem` fails with 'Specified qdisc "
            "kind is unknown'), so no qdisc can add latency; use `--latency-mechanism nfqueue` "
            "(a user-space delayer on each receiving link: packet-level latency), "
            "`--latency-mechanism comm-layer` (the communication layer adds the latency) or "
            "`--latency-mechanism auto` (the first of these that works)"
        )
    if (has_nfqueue or kernel_has_nfqueue)():
        return "nfqueue"
    if requested == "nfqueue":
        raise DecobenchError(
            "NFQUEUE is not available here (needs iptables with the NFQUEUE target, e.g. "
            "`apt-get install iptables`, and nfnetlink_queue in the kernel); use "
            "`--latency-mechanism comm-layer` (the communication layer adds the latency) or "
            "`--latency-mechanism auto`"
        )
    return "comm-layer"


# ----------------------------------------------------------------------------- cleanup
def list_namespaces(runner: Runner) -> list[str]:
    """Names of all network namespaces (``ip -j netns list``)."""
    out = runner.run(["ip", "-j", "netns", "list"]).stdout.strip()
    return [entry["name"] for entry in json.loads(out)] if out else []


def namespace_owner(runner: Runner, ns: str) -> str | None:
    """The owner tag on a namespace's loopback, or None if it has none."""
    try:
        out = runner.run(["ip", "-n", ns, "-j", "link", "show", "lo"]).stdout
        return json.loads(out)[0].get("ifalias")
    except (CommandError, ValueError, IndexError, KeyError):
        return None


def cleanup_stale(
    pattern: str = PREFIX_GLOB, include_live: bool = False, runner: Runner | None = None
) -> list[str]:
    """Delete leftover namespaces whose names match ``pattern``; returns the names deleted.

    A namespace whose owner process still runs is kept unless ``include_live`` (that run's
    network is in use); one without an owner tag is deleted.
    """
    if runner is None:
        require_root()
        runner = SubprocessRunner()
    deleted: list[str] = []
    for ns in list_namespaces(runner):
        if not fnmatch.fnmatchcase(ns, pattern):
            continue
        if not include_live and owner_alive(namespace_owner(runner, ns)):
            continue
        try:
            runner.run(["ip", "netns", "del", ns])
        except CommandError as exc:
            if "No such file" not in exc.stderr:
                raise
        deleted.append(ns)
    return deleted


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m decobench.netem.netns --cleanup``: remove namespaces left by killed runs."""
    parser = argparse.ArgumentParser(
        prog="python -m decobench.netem.netns",
        description="Manage decobench's emulated-network namespaces (needs root).",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument(
        "--cleanup", action="store_true", help="delete namespaces left by runs that no longer run"
    )
    action.add_argument(
        "--list",
        action="store_true",
        help="list this project's namespaces and whether their owner runs",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="with --cleanup: also delete namespaces of runs still running",
    )
    parser.add_argument(
        "--pattern",
        default=PREFIX_GLOB,
        help=f"shell pattern of namespace names (default: {PREFIX_GLOB})",
    )
    args = parser.parse_args(argv)
    try:
        require_root()
        runner = SubprocessRunner()
        if args.list:
            for ns in list_namespaces(runner):
                if fnmatch.fnmatchcase(ns, args.pattern):
                    live = owner_alive(namespace_owner(runner, ns))
                    print(f"{ns}\t{'in use' if live else 'stale'}")
            return 0
        deleted = cleanup_stale(args.pattern, include_live=args.all, runner=runner)
    except DecobenchError as exc:
        print(f"decobench.netem.netns: error: {exc}", file=sys.stderr)
        return 2
    for ns in deleted:
        print(f"deleted {ns}")
    print(f"{len(deleted)} namespace(s) deleted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
