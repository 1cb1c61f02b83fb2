"""Packet-level latency without ``sch_netem``: an NFQUEUE delayer on each receiving device.

Kernels built without ``sch_netem`` (and without ``fq``/``etf``, which could release packets
at a timestamp) cannot delay packets in a qdisc. They can still hand every received packet
to a user-space program: an iptables rule ::

    iptables -A INPUT -i eth0 -j NFQUEUE --queue-num 0

queues each packet that arrives on ``eth0`` and a program bound to queue 0 (over a
``NETLINK_NETFILTER`` socket) gives the verdict. The delayer holds each packet ``b`` seconds
after it arrives and then accepts it, so data and ACKs alike see the one-way latency, and
TCP sees the real round trip and bandwidth-delay product. This is the ``nfqueue`` latency
mechanism (``docs/emulation.md``, "Latency mechanisms"); the rate is still shaped by HTB on
the sender's egress (:mod:`decobench.netem.tc`).

Why the receive side: on the sender's OUTPUT path TCP small queues count the held packets
against the socket and throttled one flow to about 1 Mbit/s on this project's machines; on
INPUT the sender's stack has already let go of them (``../shared/notes/docker-here.md``).

What it is not: a delay taken in user space costs CPU per packet and adds the delayer's
scheduling lag. The delayer reports both (:class:`DelayStats`: packets, CPU seconds, and the
lag of each release behind its due time), the run records them, and the link probe checks
the round trip (2 b within the tolerance) before training. The rule has no
``--queue-bypass``: if the delayer dies, packets are dropped (the run fails) rather than
passed on undelayed.

Pieces:

- pure: the netlink messages (:func:`bind_message`, :func:`params_message`,
  :func:`verdict_batch_message`, :func:`parse_packet_ids`), the hold queue
  (:class:`HoldQueue`) and the iptables lines (:func:`rule_commands`);
- :func:`serve`: the delayer's loop (``python -m decobench.netem.nfqueue serve``), which
  takes its delay changes on stdin and answers each with the value in force (read back);
- :class:`DelayerProcess`: starts one in a namespace and talks to it;
- :func:`kernel_has_nfqueue`: can this kernel and this iptables do it at all.

The netlink format follows ``include/uapi/linux/netfilter/nfnetlink_queue.h`` (the same
messages libnetfilter_queue sends); ``../shared/tools/nfq_delay.py`` is the dependency-free
reference it grew from (measured there: 100.6 ms RTT for 2 x 50 ms, 18.3 Mbit/s through
HTB at 20 Mbit/s, 253 Mbit/s unshaped).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import IO, Any

from decobench.errors import DecobenchError
from decobench.netem.host import (
    CommandError,
    Runner,
    SubprocessRunner,
    require_root,
    throwaway_namespace,
)
from decobench.netem.tc import exec_in

QUEUE_NUM: int = 0
"""The NFQUEUE number; every namespace has its own queues, so each worker uses 0."""

QUEUE_MAXLEN: int = 100_000
"""Packets the kernel may hold for the delayer (beyond it, packets are dropped)."""

RCVBUF_BYTES: int = 8 << 20
"""Receive buffer of the netlink socket (packet notifications waiting to be read)."""

DELAYER_NICE: int = -10
"""Scheduling priority of the delayer (root only): it must wake on time while the training
processes keep every core busy."""

# include/uapi/linux/netfilter/nfnetlink.h and nfnetlink_queue.h
NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_CONFIG = 2
NFQNL_MSG_VERDICT_BATCH = 3
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQA_CFG_F_GSO = 1 << 2
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQNL_CFG_CMD_BIND = 1
NFQNL_CFG_CMD_UNBIND = 2
NFQNL_COPY_META = 1
NF_ACCEPT = 1
NLM_F_REQUEST = 1
NLM_F_ACK = 4
NLMSG_ERROR = 2
NLMSG_HDR = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
NFGEN_HDR = struct.Struct("=BBH")  # family, version, resource id (the queue, big-endian)


# ------------------------------------------------------------------------ netlink (pure)
def _attribute(kind: int, payload: bytes) -> bytes:
    """One netlink attribute: length, type, payload, padded to 4 bytes."""
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def _message(kind: int, queue: int, attributes: Sequence[bytes], flags: int, seq: int) -> bytes:
    body = NFGEN_HDR.pack(socket.AF_UNSPEC, 0, socket.htons(queue)) + b"".join(attributes)
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags,
                          seq, 0) + body


def bind_message(queue: int, seq: int = 1, unbind: bool = False) -> bytes:
    """``NFQNL_MSG_CONFIG`` with the command BIND (or UNBIND) for ``queue``, asking an ACK."""
    command = NFQNL_CFG_CMD_UNBIND if unbind else NFQNL_CFG_CMD_BIND
    cmd = _attribute(NFQA_CFG_CMD, struct.pack("=BBH", command, 0, 0))
    return _message(NFQNL_MSG_CONFIG, queue, [cmd], NLM_F_REQUEST | NLM_F_ACK, seq)


def params_message(queue: int, seq: int = 2, maxlen: int = QUEUE_MAXLEN,
                   gso: bool = True) -> bytes:
    """``NFQNL_MSG_CONFIG``: copy packet metadata only, a queue of ``maxlen`` packets, and
    (``gso``) hand segmentation-offload packets over whole instead of segmenting them."""
    attributes = [_attribute(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META)),
                  _attribute(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", maxlen))]
    if gso:
        attributes += [_attribute(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_GSO)),
                       _attribute(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_GSO))]
    return _message(NFQNL_MSG_CONFIG, queue, attributes, NLM_F_REQUEST | NLM_F_ACK, seq)


def verdict_batch_message(queue: int, last_id: int) -> bytes:
    """``NFQNL_MSG_VERDICT_BATCH``: accept every queued packet with an id <= ``last_id``."""
    header = _attribute(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, last_id))
    return _message(NFQNL_MSG_VERDICT_BATCH, queue, [header], NLM_F_REQUEST, 0)


def parse_packet_ids(data: bytes) -> list[int]:
    """The packet ids of the ``NFQNL_MSG_PACKET`` messages in one netlink read, in order."""
    ids: list[int] = []
    offset = 0
    while offset + NLMSG_HDR.size <= len(data):
        length, kind = struct.unpack_from("=IH", data, offset)
        if length < NLMSG_HDR.size:
            break
        if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            attr = offset + NLMSG_HDR.size + NFGEN_HDR.size
            while attr + 4 <= offset + length:
                attr_len, attr_kind = struct.unpack_from("=HH", data, attr)
                if attr_len < 4:
                    break
                if attr_kind & 0x7FFF == NFQA_PACKET_HDR:
                    ids.append(struct.unpack_from("!I", data, attr + 4)[0])
                    break
                attr += (attr_len + 3) & ~3
        offset += (length + 3) & ~3
    return ids


def ack_error(data: bytes) -> int:
    """The errno of a netlink ACK (0 = success; an ``NLMSG_ERROR`` carries ``-errno``)."""
    if len(data) < NLMSG_HDR.size + 4:
        raise DecobenchError(f"short netlink answer ({len(data)} bytes)")
    kind = struct.unpack_from("=H", data, 4)[0]
    if kind != NLMSG_ERROR:
        return 0
    return -struct.unpack_from("=i", data, NLMSG_HDR.size)[0]


# --------------------------------------------------------------------- hold queue (pure)
@dataclass
class HoldQueue:
    """Packets held until their due time, released in arrival order.

    Each packet is due ``delay_s`` after it arrived (the delay in force on arrival). The
    queue releases in arrival order: after the delay is lowered, a packet that arrives
    later but is due sooner waits for those ahead of it, as on a real path (and as netem
    does without reordering), so the new delay takes hold within one old delay.
    """

    delay_s: float
    _held: collections.deque[tuple[float, int]] = field(default_factory=collections.deque)

    def hold(self, packet_id: int, now: float) -> None:
        self._held.append((now + self.delay_s, packet_id))

    def release(self, now: float) -> tuple[int | None, list[float]]:
        """The last id due by ``now`` (accepting every id up to it) and each released
        packet's lag behind its due time, in seconds."""
        last: int | None = None
        lags: list[float] = []
        while self._held and self._held[0][0] <= now:
            due, last = self._held.popleft()
            lags.append(now - due)
        return last, lags

    def next_due(self) -> float | None:
        return self._held[0][0] if self._held else None

    def drain(self) -> int | None:
        """Empty the queue; the last id (to accept everything at exit)."""
        last = self._held[-1][1] if self._held else None
        self._held.clear()
        return last

    def __len__(self) -> int:
        return len(self._held)


@dataclass
class DelayStats:
    """What one delayer did: packets delayed, CPU seconds, and how late releases were."""

    packets: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    lag_mean_ms: float = 0.0
    lag_max_ms: float = 0.0
    lag_over_1ms: int = 0
    max_held: int = 0
    delay_changes: int = 0

    def add_lags(self, lags: Sequence[float]) -> None:
        if not lags:
            return
        total = self.lag_mean_ms * self.packets + sum(lags) * 1e3
        self.packets += len(lags)
        self.lag_mean_ms = total / self.packets
        self.lag_max_ms = max(self.lag_max_ms, max(lags) * 1e3)
        self.lag_over_1ms += sum(1 for lag in lags if lag > 1e-3)

    @property
    def cpu_share(self) -> float:
        """CPU seconds per wall second (1.0 = one core busy)."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"cpu_share": self.cpu_share}


# --------------------------------------------------------------------------- the delayer
def _open_queue(queue: int) -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
    sock.bind((0, 0))
    sock.settimeout(5.0)
    for message, what in ((bind_message(queue), "bind"), (params_message(queue), "configure")):
        sock.send(message)
        error = ack_error(sock.recv(65536))
        if error and what == "configure":  # a kernel without the GSO flag: without it
            sock.send(params_message(queue, seq=3, gso=False))
            error = ack_error(sock.recv(65536))
        if error:
            sock.close()
            raise DecobenchError(f"NFQUEUE {queue}: could not {what} the queue: "
                                 f"{os.strerror(error)} (errno {error}); is another program "
                                 "bound to it, or does the kernel lack nfnetlink_queue?")
    sock.settimeout(None)
    return sock


def serve(queue: int, delay_s: float, control: IO[str], answer: IO[str],
          clock: Callable[[], float] = time.monotonic) -> DelayStats:
    """Delay every packet of NFQUEUE ``queue`` by the delay in force until ``control`` ends.

    ``control`` lines: ``delay SECONDS`` (answered ``delay SECONDS``, the value now in
    force), ``stats`` (answered ``stats {json}``), ``stop``. At the end the packets still
    held are accepted at once and the final ``stats {json}`` line is written.
    """
    sock = _open_queue(queue)
    hold = HoldQueue(delay_s)
    stats = DelayStats()
    start_cpu, start_wall = time.process_time(), clock()
    fd = control.fileno()
    os.set_blocking(fd, False)
    pending = b""

    def say(line: str) -> None:
        answer.write(line + "\n")
        answer.flush()

    def snapshot() -> str:
        stats.cpu_s = time.process_time() - start_cpu
        stats.wall_s = clock() - start_wall
        return json.dumps(stats.to_dict())

    say(f"ready queue={queue} delay={delay_s!r}")
    running = True
    try:
        while running:
            last, lags = hold.release(clock())
            if last is not None:
                sock.send(verdict_batch_message(queue, last))
                stats.add_lags(lags)
            due = hold.next_due()
            timeout = 0.2 if due is None else max(0.0, due - clock())
            readable, _, _ = select.select([sock, fd], [], [], timeout)
            if sock in readable:
                while True:
                    try:
                        data = sock.recv(1 << 20, socket.MSG_DONTWAIT)
                    except BlockingIOError:
                        break
                    now = clock()
                    for packet_id in parse_packet_ids(data):
                        hold.hold(packet_id, now)
                stats.max_held = max(stats.max_held, len(hold))
            if fd in readable:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    words = line.decode().split()
                    if words[:1] == ["delay"] and len(words) == 2:
                        hold.delay_s = float(words[1])
                        stats.delay_changes += 1
                        say(f"delay {hold.delay_s!r}")
                    elif words == ["stats"]:
                        say(f"stats {snapshot()}")
                    elif words == ["stop"]:
                        running = False
                        break
                    elif words:
                        say(f"error unknown command {line.decode()!r}")
    finally:
        last = hold.drain()
        if last is not None:
            sock.send(verdict_batch_message(queue, last))
        sock.close()
    say(f"stats {snapshot()}")
    return stats


def check(queue: int) -> None:
    """Bind ``queue`` and let go of it again (:func:`kernel_has_nfqueue` runs this)."""
    sock = _open_queue(queue)
    try:
        sock.send(bind_message(queue, seq=9, unbind=True))
    finally:
        sock.close()


# ------------------------------------------------------------------------ iptables (pure)
def rule_commands(dev: str, action: str = "add", netns: str | None = None,
                  queue: int = QUEUE_NUM) -> list[list[str]]:
    """The iptables line that queues every packet received on ``dev`` to ``queue``
    (``add``) or removes it (``delete``). No ``--queue-bypass``: without a delayer the
    packets are dropped, never passed on undelayed."""
    flag = {"add": "-A", "delete": "-D"}.get(action)
    if flag is None:
        raise ValueError(f"unknown iptables action {action!r}; choose add or delete")
    return [[*exec_in(netns), "iptables", "-w", flag, "INPUT", "-i", dev, "-j", "NFQUEUE",
             "--queue-num", str(queue)]]


# -------------------------------------------------------------------- a running delayer
def _stats_from(line: str) -> DelayStats:
    """A :class:`DelayStats` from the delayer's ``stats {json}`` line (``cpu_share`` is
    derived, not stored)."""
    fields = json.loads(line.split(" ", 1)[1])
    fields.pop("cpu_share", None)
    return DelayStats(**fields)


@dataclass
class DelayerProcess:
    """One delayer (``python -m decobench.netem.nfqueue serve``) run with ``prefix`` (e.g.
    ``ip netns exec NS``). :meth:`set_delay` changes the delay and checks the value the
    delayer reads back; :meth:`stop` ends it and returns its :class:`DelayStats`."""

    prefix: Sequence[str]
    delay_s: float
    name: str = "delayer"
    queue: int = QUEUE_NUM
    python: str = sys.executable
    timeout_s: float = 10.0
    proc: subprocess.Popen[str] = field(init=False, repr=False)
    stats: DelayStats | None = field(default=None, init=False)
    _lines: collections.deque[str] = field(default_factory=collections.deque, init=False,
                                           repr=False)
    _cv: threading.Condition = field(default_factory=threading.Condition, init=False,
                                     repr=False)
    _done: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        argv = [*self.prefix, self.python, "-m", "decobench.netem.nfqueue", "serve",
                "--queue", str(self.queue), "--delay-s", repr(float(self.delay_s))]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._pump, daemon=True).start()
        ready = self._expect("ready")
        if not ready:
            raise DecobenchError(f"the NFQUEUE delayer of {self.name} did not start: "
                                 f"{self._stderr() or 'no error output'}")

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cv:
                self._lines.append(line.rstrip("\n"))
                self._cv.notify_all()
        with self._cv:
            self._done = True
            self._cv.notify_all()

    def _expect(self, word: str) -> str | None:
        deadline = time.monotonic() + self.timeout_s
        with self._cv:
            while True:
                while self._lines:
                    line = self._lines.popleft()
                    if line.split(" ", 1)[0] == word:
                        return line
                if self._done:
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cv.wait(left)

    def _stderr(self) -> str:
        if self.proc.poll() is None:
            return ""
        text = (self.proc.stderr.read() if self.proc.stderr else "").strip()
        return text.splitlines()[-1] if text else ""

    def _send(self, line: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise DecobenchError(f"the NFQUEUE delayer of {self.name} has exited "
                                 f"({self._stderr() or 'no error output'}); its link drops "
                                 "every packet") from None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def set_delay(self, delay_s: float) -> float:
        """Change the delay; returns the value the delayer reports in force (checked)."""
        self._send(f"delay {float(delay_s)!r}")
        line = self._expect("delay")
        got = float(line.split()[1]) if line else None
        if got is None or abs(got - delay_s) > 1e-9:
            raise DecobenchError(f"the NFQUEUE delayer of {self.name} did not take the delay "
                                 f"{delay_s * 1e3:.3f} ms (it answered {line!r})")
        self.delay_s = got
        return got

    def read_stats(self) -> DelayStats:
        self._send("stats")
        line = self._expect("stats")
        if line is None:
            raise DecobenchError(f"the NFQUEUE delayer of {self.name} did not report")
        return _stats_from(line)

    def stop(self) -> DelayStats | None:
        """End the delayer (packets still held are accepted); its final statistics."""
        if self.proc.poll() is None:
            try:
                self._send("stop")
            except DecobenchError:
                pass
            line = self._expect("stats")
            if line is not None:
                self.stats = _stats_from(line)
            try:
                self.proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.stats


# ----------------------------------------------------------------------------- detection
def nfqueue_usable_here() -> bool:
    """In the current namespace (e.g. a container with NET_ADMIN): iptables is on PATH and
    a queue can be bound. Creates no namespace, adds no rule."""
    if shutil.which("iptables") is None:
        return False
    try:
        check(QUEUE_NUM)
    except (DecobenchError, OSError):
        return False
    return True


def kernel_has_nfqueue(runner: Runner | None = None, python: str = sys.executable) -> bool:
    """Whether packets can be delayed with NFQUEUE here: iptables with the NFQUEUE target
    and nfnetlink_queue in the kernel. Tried in a throwaway namespace (always deleted)."""
    if runner is None:
        require_root()
        runner = SubprocessRunner()
    with throwaway_namespace(runner, "nq") as ns:
        try:
            for argv in rule_commands("lo", "add", netns=ns):
                runner.run(argv)
            runner.run([*exec_in(ns), python, "-m", "decobench.netem.nfqueue", "check"])
        except CommandError:
            return False
        except DecobenchError as exc:  # iptables not installed
            if "not found" in str(exc):
                return False
            raise
        return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m decobench.netem.nfqueue",
        description="Delay every packet an iptables NFQUEUE rule queues (run it in the "
        "namespace of the rule; needs root). Used by the 'nfqueue' latency mechanism.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("serve", help="delay the packets of a queue; stdin takes "
                         "'delay SECONDS', 'stats' and 'stop', one per line")
    run.add_argument("--queue", type=int, default=QUEUE_NUM)
    run.add_argument("--delay-s", type=float, required=True, help="one-way delay, seconds")
    probe = sub.add_parser("check", help="bind the queue and let it go (exit 0 if possible)")
    probe.add_argument("--queue", type=int, default=QUEUE_NUM)
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            check(args.queue)
            return 0
        if os.geteuid() == 0:
            try:
                os.nice(DELAYER_NICE)
            except OSError:
                pass
        serve(args.queue, args.delay_s, sys.stdin, sys.stdout)
    except (DecobenchError, OSError) as exc:
        print(f"decobench.netem.nfqueue: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
