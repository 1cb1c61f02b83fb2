"""Pre-training link probe: does each emulated link deliver the goodput and latency asked for?

For each worker i the probe measures the ring link i -> (i+1) mod n (the path the training's
ring collectives use), all links at once as in training:

1. a small-message TCP ping-pong (``pings`` round trips after 3 unmeasured ones); the
   kernel's one-way latency is the median round trip / 2 (each direction crosses one
   shaped link);
2. a TCP bulk transfer sized to last about ``warm-up + measure_s`` at the requested rate;
   the receiver fits a least-squares slope to the payload bytes received after the
   warm-up (TCP slow start), which averages out the lumps in which data arrives.

The transfers run in agents inside the namespaces, ``ip netns exec NS python -m decobench.netem.probe
serve|send``: a receiver in the destination namespace and a sender in the source one.
Under ``netem`` and ``nfqueue`` the path's latency must be within ``tolerance`` of the
request (plus :data:`LATENCY_SLACK_S`): a round trip takes 2 b; under ``comm-layer`` the kernel adds none (it must stay below
:data:`LATENCY_SLACK_S`) and the requested latency is supplied by the communication layer.
Goodput must be within ``tolerance`` of the requested rate.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from decobench.atomicio import write_text_atomic
from decobench.errors import DecobenchError
from decobench.netem.tc import PACKET_LEVEL_MECHANISMS, LinkSetting
from decobench.netem.tcp import HostChange

PROBE_PORT: int = 47031
"""TCP port the receivers listen on (each in its own namespace)."""

PING_BYTES: int = 64
WARMUP_PINGS: int = 3
LATENCY_ON_THE_PATH: tuple[str, ...] = (*PACKET_LEVEL_MECHANISMS, "kernel")
"""Mechanisms under which a round trip takes 2 b: netem, nfqueue, and ``kernel`` (a rank's
word for "the network adds it", e.g. a shaper it did not start, or a real path)."""
LATENCY_SLACK_S: float = 0.002
"""Absolute slack on the kernel latency check (process scheduling, serialisation)."""

CHUNK_BYTES: int = 256 * 1024


class ProbedNetwork(Protocol):
    """What the probe needs from :class:`decobench.netem.netns.NamespaceNetwork`."""

    mechanism: str

    @property
    def workers(self) -> int: ...

    def worker_address(self, i: int) -> str: ...

    def exec_prefix(self, i: int) -> list[str]: ...


# ------------------------------------------------------------------------------ results
@dataclass(frozen=True)
class LinkProbe:
    """One measured link (``src`` -> ``dst``, worker indices); rates in Mbit/s, times in ms."""

    src: int
    dst: int
    src_address: str
    dst_address: str
    requested_mbps: float
    measured_mbps: float
    rel_error: float
    requested_latency_ms: float
    kernel_latency_ms: float
    mechanism: str
    goodput_ok: bool
    latency_ok: bool
    bytes_measured: int
    seconds_measured: float

    @property
    def ok(self) -> bool:
        return self.goodput_ok and self.latency_ok

    @property
    def name(self) -> str:
        return f"worker {self.src} -> worker {self.dst} ({self.src_address} -> {self.dst_address})"


@dataclass(frozen=True)
class ProbeReport:
    """The probe of every ring link against one requested :class:`LinkSetting`."""

    setting: LinkSetting
    mechanism: str
    tolerance: float
    links: tuple[LinkProbe, ...] = ()
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(link.ok for link in self.links)

    def problems(self) -> list[str]:
        """One line per failed check, naming the link and the numbers."""
        out: list[str] = []
        tol = f"{self.tolerance:.0%}"
        for link in self.links:
            if not link.goodput_ok:
                out.append(
                    f"link {link.name}: goodput {link.measured_mbps:.2f} Mbit/s, requested "
                    f"{link.requested_mbps:.2f} Mbit/s ({link.rel_error:+.1%}, tolerance {tol})"
                )
            if not link.latency_ok:
                if self.mechanism in LATENCY_ON_THE_PATH:
                    want = f"requested {link.requested_latency_ms:.1f} ms (tolerance {tol})"
                else:
                    want = (
                        f"expected about 0 ms because the communication layer adds the "
                        f"{link.requested_latency_ms:.1f} ms"
                    )
                out.append(
                    f"link {link.name}: kernel one-way latency "
                    f"{link.kernel_latency_ms:.2f} ms, {want}"
                )
        return out

    def check(self) -> None:
        """Raise :class:`DecobenchError` naming each link that is off by more than tolerance."""
        problems = self.problems()
        if problems:
            raise DecobenchError(
                "the emulated network does not deliver the requested "
                f"{self.setting.describe()}: "
                + "; ".join(problems)
                + " (is the machine overloaded, or the shaping wrong? see network_probe.json)"
            )

    def to_dict(self) -> dict[str, Any]:
        comm = self.mechanism == "comm-layer"
        return {
            "ok": self.ok,
            "requested_mbps": self.setting.rate_bps / 1e6,
            "requested_latency_ms": self.setting.latency_s * 1e3,
            "latency_mechanism": self.mechanism,
            "latency_note": (
                "the requested latency is supplied by the communication layer; the kernel "
                "adds none, so kernel_latency_ms is expected near 0"
                if comm
                else "the kernel (netem) adds the requested latency"
                if self.mechanism == "netem"
                else "the network (a shaper the ranks did not start, or the real path) adds "
                "the requested latency"
                if self.mechanism == "kernel"
                else "a user-space delayer on each receiving link (NFQUEUE) holds every "
                "packet for the requested latency"
            ),
            "tolerance": self.tolerance,
            "duration_s": self.duration_s,
            "links": [asdict(link) | {"ok": link.ok} for link in self.links],
            "problems": self.problems(),
        }


def evaluate_link(
    src: int,
    dst: int,
    addresses: tuple[str, str],
    setting: LinkSetting,
    mechanism: str,
    tolerance: float,
    goodput: Mapping[str, float],
    rtts_s: Sequence[float],
) -> LinkProbe:
    """A :class:`LinkProbe` from raw measurements: the receiver's result (see :func:`serve`)
    and the ping-pong round trips in seconds."""
    measured = float(goodput["bytes_per_s"]) * 8
    rel = (measured - setting.rate_bps) / setting.rate_bps
    kernel_latency = statistics.median(rtts_s) / 2 if rtts_s else math.inf
    if mechanism in LATENCY_ON_THE_PATH:
        latency_ok = (
            abs(kernel_latency - setting.latency_s)
            <= tolerance * setting.latency_s + LATENCY_SLACK_S
        )
    else:
        latency_ok = kernel_latency <= LATENCY_SLACK_S
    return LinkProbe(
        src=src,
        dst=dst,
        src_address=addresses[0],
        dst_address=addresses[1],
        requested_mbps=setting.rate_bps / 1e6,
        measured_mbps=measured / 1e6,
        rel_error=rel,
        requested_latency_ms=setting.latency_s * 1e3,
        kernel_latency_ms=kernel_latency * 1e3,
        mechanism=mechanism,
        goodput_ok=abs(rel) <= tolerance,
        latency_ok=latency_ok,
        bytes_measured=int(goodput["bytes"]),
        seconds_measured=float(goodput["seconds"]),
    )


# ------------------------------------------------------------------------------ driver
@dataclass
class _Agent:
    """One agent process with a thread that queues its stdout lines."""

    argv: list[str]
    proc: subprocess.Popen[str] = field(init=False)
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue, init=False)

    def __post_init__(self) -> None:
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, deadline: float, what: str) -> str:
        """The next stdout line; DecobenchError if the agent ends or the deadline passes."""
        try:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            line = None
            reason = "timed out"
        else:
            reason = "exited"
        if line is None:
            self.kill()
            stderr = (self.proc.stderr.read() if self.proc.stderr else "").strip()
            raise DecobenchError(
                f"network probe agent {reason} while waiting for {what}: "
                f"{' '.join(self.argv)}" + (f": {stderr.splitlines()[-1]}" if stderr else "")
            )
        return line

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def warmup_seconds(setting: LinkSetting, mechanism: str) -> float:
    """Time excluded from the goodput: 0.3 s plus 6 kernel round trips (TCP slow start)."""
    rtt = 2 * setting.latency_s if mechanism in LATENCY_ON_THE_PATH else 0.0
    return 0.3 + 6 * rtt


def probe_links(
    network: ProbedNetwork,
    setting: LinkSetting,
    tolerance: float = 0.10,
    *,
    measure_s: float = 1.5,
    pings: int = 20,
    port: int = PROBE_PORT,
    python: str = sys.executable,
) -> ProbeReport:
    """Measure every ring link of ``network`` against ``setting`` (module docstring).

    ``measure_s`` is the measured part of each bulk transfer at the requested rate; a slower
    link takes proportionally longer, up to 4 times the planned duration. One worker has no
    links: the report is empty and OK.
    """
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance!r}")
    if pings < 1 or not measure_s > 0:
        raise ValueError(f"need pings >= 1 and measure_s > 0, got {pings!r}, {measure_s!r}")
    n = network.workers
    started = time.monotonic()
    if n < 2:
        return ProbeReport(setting, network.mechanism, tolerance, (), 0.0)
    warmup = warmup_seconds(setting, network.mechanism)
    planned = warmup + measure_s
    nbytes = math.ceil(setting.rate_bps / 8 * planned)
    max_s = 4 * planned + 2
    links = [(i, (i + 1) % n) for i in range(n)]
    agent = [python, "-m", "decobench.netem.probe"]
    servers: list[_Agent] = []
    senders: list[_Agent] = []
    try:
        for _, dst in links:
            serve_args = (
                f"serve --bind {network.worker_address(dst)} --port {port} "
                f"--warmup-s {warmup:g} --max-s {max_s:g}"
            )
            servers.append(_Agent(network.exec_prefix(dst) + agent + serve_args.split()))
        deadline = time.monotonic() + 30
        for server in servers:
            if server.expect(deadline, "its READY line") != "READY":
                raise DecobenchError("network probe receiver did not start")
        for src, dst in links:
            send_args = (
                f"send --host {network.worker_address(dst)} --port {port} --pings {pings} "
                f"--bytes {nbytes} --max-s {max_s:g}"
            )
            senders.append(_Agent(network.exec_prefix(src) + agent + send_args.split()))
        deadline = time.monotonic() + 30 + 4 * (pings + WARMUP_PINGS) * setting.latency_s
        rtts = [json.loads(s.expect(deadline, "ping-pong results"))["rtts_s"] for s in senders]
        for sender in senders:  # all pings done before any bulk transfer starts
            sender.send("GO\n")
        deadline = time.monotonic() + max_s + 30
        results = [json.loads(s.expect(deadline, "goodput results")) for s in servers]
        for agent_proc in senders + servers:  # done: they exit by themselves
            try:
                agent_proc.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass  # killed below
    finally:
        for agent_proc in senders + servers:
            agent_proc.kill()
    probes = tuple(
        evaluate_link(
            src,
            dst,
            (network.worker_address(src), network.worker_address(dst)),
            setting,
            network.mechanism,
            tolerance,
            res,
            rtt,
        )
        for (src, dst), res, rtt in zip(links, results, rtts, strict=True)
    )
    return ProbeReport(setting, network.mechanism, tolerance, probes, time.monotonic() - started)


class _HasCommands(Protocol):
    @property
    def tc_commands(self) -> list[str]: ...

    @property
    def commands(self) -> list[str]: ...

    @property
    def host_changes(self) -> list[HostChange]: ...


def write_probe(report: ProbeReport, network: _HasCommands, path: str | os.PathLike[str]) -> None:
    """Write ``network_probe.json``: the report plus the exact tc commands applied so far and
    the host settings changed to set the network up (each put back before the probe)."""
    data = report.to_dict() | {
        "tc_commands": network.tc_commands,
        "commands": network.commands,
        "host_changes": [change.to_dict() for change in network.host_changes],
    }
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


# ------------------------------------------------------------------------------- agents
def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed the connection")
        buf += chunk
    return bytes(buf)


def goodput_slope(samples: Sequence[tuple[float, int]]) -> float:
    """Least-squares slope (bytes/s) of cumulative bytes against time.

    Data arrives in lumps (segmentation offload, token-bucket bursts); a slope fitted over
    every arrival averages the lumps out, where bytes/(last - first) would be off by up to
    one lump.
    """
    n = len(samples)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in samples) / n
    mb = sum(b for _, b in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    if var <= 0:
        return 0.0
    return sum((t - mt) * (b - mb) for t, b in samples) / var


def serve(bind: str, port: int, warmup_s: float, max_s: float,
          ready: Callable[[], None] | None = None) -> dict[str, float]:
    """Receiver agent: echo pings, then time the bulk bytes; returns the goodput measured
    after the warm-up (``bytes_per_s``, a least-squares slope) and the window it covers.
    ``ready`` is called once it listens (default: print ``READY``)."""
    with socket.create_server((bind, port)) as listener:
        if ready is None:
            print("READY", flush=True)
        else:
            ready()
        conn, _ = listener.accept()
    samples: list[tuple[float, int]] = []
    total = 0
    first: float | None = None
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pings = int(_recv_exact(conn, 8).decode("ascii"))
        for _ in range(pings):
            conn.sendall(_recv_exact(conn, PING_BYTES))
        buf = bytearray(CHUNK_BYTES)
        while True:
            got = conn.recv_into(buf)
            now = time.monotonic()
            if not got:
                break
            total += got
            if first is None:
                first = now
            if now - first >= warmup_s:
                samples.append((now, total))
            if now - first >= max_s:
                break
    if len(samples) < 2:  # too short for a warm-up
        return {"bytes_per_s": 0.0, "bytes": total, "seconds": 0.0, "total_bytes": total}
    return {
        "bytes_per_s": goodput_slope(samples),
        "bytes": samples[-1][1] - samples[0][1],
        "seconds": samples[-1][0] - samples[0][0],
        "total_bytes": total,
    }


def send(host: str, port: int, pings: int, nbytes: int, max_s: float,
         go: Callable[[list[float]], bool] | None = None) -> list[float]:
    """Sender agent: ping-pong, then the bulk transfer once ``go(round trips)`` says so
    (default: print the round trips and wait for ``GO`` on stdin)."""
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(f"{pings + WARMUP_PINGS:08d}".encode("ascii"))
        msg = b"p" * PING_BYTES
        rtts = []
        for k in range(pings + WARMUP_PINGS):
            t = time.monotonic()
            sock.sendall(msg)
            _recv_exact(sock, PING_BYTES)
            if k >= WARMUP_PINGS:
                rtts.append(time.monotonic() - t)
        if go is None:
            print(json.dumps({"rtts_s": rtts}), flush=True)
            if sys.stdin.readline().strip() != "GO":
                return rtts
        elif not go(rtts):
            return rtts
        sock.settimeout(max_s + 10)
        chunk = memoryview(b"\0" * CHUNK_BYTES)
        left = nbytes
        try:
            while left > 0:
                sock.sendall(chunk[: min(left, CHUNK_BYTES)])
                left -= min(left, CHUNK_BYTES)
            sock.shutdown(socket.SHUT_WR)
            sock.recv(1)  # wait until the receiver has read everything and closed
        except OSError:
            pass  # the receiver stopped early (max_s): it reports what it got
    return rtts


def main(argv: Sequence[str] | None = None) -> int:
    """Agent entry point (run by :func:`probe_links` inside the namespaces)."""
    parser = argparse.ArgumentParser(
        prog="python -m decobench.netem.probe",
        description="Link-probe agents run inside the emulated network's namespaces by "
        "decobench.netem.probe.probe_links; not meant to be run by hand.",
    )
    sub = parser.add_subparsers(dest="role", required=True)
    srv = sub.add_parser("serve", help="receiver: echo pings, then measure bulk goodput")
    srv.add_argument("--bind", required=True)
    srv.add_argument("--port", type=int, default=PROBE_PORT)
    srv.add_argument("--warmup-s", type=float, required=True)
    srv.add_argument("--max-s", type=float, required=True)
    snd = sub.add_parser("send", help="sender: ping-pong, then a bulk transfer")
    snd.add_argument("--host", required=True)
    snd.add_argument("--port", type=int, default=PROBE_PORT)
    snd.add_argument("--pings", type=int, default=20)
    snd.add_argument("--bytes", type=int, required=True)
    snd.add_argument("--max-s", type=float, required=True)
    args = parser.parse_args(argv)
    if args.role == "serve":
        print(json.dumps(serve(args.bind, args.port, args.warmup_s, args.max_s)), flush=True)
    else:
        send(args.host, args.port, args.pings, args.bytes, args.max_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
