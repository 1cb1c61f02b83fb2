"""TCP on the emulated hosts, tuned for a long fat network (docs/emulation.md "TCP").

The time model (docs/design.md §4) charges ``W / a`` for a message of ``W`` bits whatever came
before it. Linux's TCP defaults do not: a connection starts with 10 packets in flight (about
14 kB) and, by default, falls back to that after every pause longer than a retransmission
timeout (``net.ipv4.tcp_slow_start_after_idle = 1``). On a 200 ms round trip a 29 kB message
then takes two round trips instead of 12 ms at 20 Mbit/s, and DeCo's first plan read
0.8 Mbit/s on a 20 Mbit/s link (measured, nfqueue, 2 workers). The emulated hosts therefore
get the two settings a long-fat-network deployment would use:

- ``net.ipv4.tcp_slow_start_after_idle = 0`` (per network namespace): a connection keeps its
  window across the pauses between messages;
- ``initcwnd`` and ``initrwnd`` on the link's routes (:func:`initial_window_packets`): a new
  connection may send one bandwidth-delay product at once, and the receiver advertises as
  much;
- ``net.ipv4.tcp_rmem`` and ``tcp_wmem`` (per network namespace) start each socket's
  buffers at :func:`buffer_bytes`: with Linux's 128 kB receive buffer a fresh connection's
  window held a 125 kB all-gather back by one round trip (426 ms instead of 251 ms at 20
  Mbit/s and 200 ms, measured), however large the congestion window;
- ``net.ipv4.tcp_congestion_control = cubic`` (per network namespace; Linux's default, and
  what most clusters run). With BBR, this project's hosts' default, D-SGD's iterations (a
  1.8 MB ring all-reduce on 20 Mbit/s and 100 ms) took 1.16-1.21 s in 15 of 28 and one to
  three round trips more in the others (1.37-1.77 s), 1.36 s on average; with cubic
  1.17-1.20 s in all 28, 1.18 s on average (measured 2026-11-26, nfqueue, 2 workers). BBR
  paces and probes a connection that idles between messages; the time model has no such
  stalls.

A network namespace other than the host's first one may choose only an *allowed*
algorithm (``net.ipv4.tcp_allowed_congestion_control``, one list for the whole host); hosts
whose default is BBR often allow only ``reno bbr``. :func:`congestion_control_allowed` adds
cubic to that list while the namespaces are tuned and puts the list back right after: a
namespace keeps its default once set, and every socket it opens later gets it (checked
live: cubic on both ends of a connection made after the list was restored). The change is
printed and logged with the run's commands; where the list cannot be written (not the
initial network namespace, e.g. inside a container) the run stops with the command that
fixes it. The Docker stack's workers set the algorithm through their ``sysctls``, so the
host must allow it before ``docker compose up``: ``python -m decobench.netem.tcp -- docker
compose ... up -d`` does that around the command (:func:`main`) and passes the change on
in :data:`HOST_CHANGES_ENV`, which the compose file hands to the workers; rank 0 records it
in ``network_probe.json``.

All are read back after they are set (:func:`check_tuning`); a mismatch stops the run
naming the host. Where a container's ``/proc/sys`` is read-only, the sysctls come from the
container's own settings (the generated ``docker/compose.yaml`` sets them on every worker)
and are only checked. ``net.core.rmem_max`` / ``wmem_max`` are not per-namespace and are
left alone (gloo asks for 32 MB per socket and the kernel grants up to them).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from decobench.errors import DecobenchError
from decobench.netem.tc import TCP_PAYLOAD_BYTES, exec_in

SLOW_START_AFTER_IDLE = "net.ipv4.tcp_slow_start_after_idle"
"""The sysctl that restarts slow start after an idle period (0: keep the window)."""

DEFAULT_INITIAL_WINDOW: int = 10
"""Linux's own initial congestion window, in packets (RFC 6928)."""

MAX_INITIAL_WINDOW: int = 4096
"""Largest initial window set, in packets (about 5.9 MB): beyond it a connection grows its
window in a few round trips anyway."""

BUFFER_FLOOR_BYTES: int = 4 * 1024 * 1024
"""Smallest default socket buffer set (4 MiB)."""

BUFFER_CAP_BYTES: int = 64 * 1024 * 1024
"""Largest default socket buffer set (64 MiB)."""

BUFFER_SYSCTLS: tuple[str, ...] = ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem")
"""Per-namespace socket buffer sizes (min, default, max in bytes)."""

CONGESTION_CONTROL = "net.ipv4.tcp_congestion_control"
"""The per-namespace congestion control algorithm."""

CONGESTION_CONTROL_ALGORITHM = "cubic"
"""The algorithm the emulated hosts use (module docstring: why not the host's BBR)."""

ALLOWED_CONGESTION_CONTROL = "net.ipv4.tcp_allowed_congestion_control"
"""The algorithms a namespace other than the initial one may choose (one list per host,
writable only from the initial network namespace)."""

AVAILABLE_CONGESTION_CONTROL = "net.ipv4.tcp_available_congestion_control"
"""The algorithms the kernel has."""

HOST_LOCK_NAME = "decobench-tcp-allowed.lock"
"""A file in the temporary directory that serialises :func:`congestion_control_allowed`
between decobench processes on one host (one run's restore must not undo the list another
run is still tuning with)."""


def initial_window_packets(rate_bps: float, latency_s: float) -> int:
    """One bandwidth-delay product of full TCP payloads: ``ceil(a/8 · 2b / 1448)``, at least
    Linux's 10 and at most :data:`MAX_INITIAL_WINDOW` (a round trip is ``2b``)."""
    if not (math.isfinite(rate_bps) and rate_bps > 0 and math.isfinite(latency_s)
            and latency_s >= 0):
        raise DecobenchError(f"cannot size a TCP window for {rate_bps!r} bit/s and "
                             f"{latency_s!r} s")
    packets = math.ceil(rate_bps / 8 * 2 * latency_s / TCP_PAYLOAD_BYTES)
    return max(DEFAULT_INITIAL_WINDOW, min(MAX_INITIAL_WINDOW, packets))


def buffer_bytes(rate_bps: float, latency_s: float) -> int:
    """Default socket buffer: four bandwidth-delay products (a window for the round trip plus
    the queue a connection builds behind its own data), at least
    :data:`BUFFER_FLOOR_BYTES`, at most :data:`BUFFER_CAP_BYTES`."""
    bdp = rate_bps / 8 * 2 * latency_s
    return int(max(BUFFER_FLOOR_BYTES, min(BUFFER_CAP_BYTES, math.ceil(4 * bdp))))


def buffer_value(size: int) -> str:
    """A ``tcp_rmem`` / ``tcp_wmem`` value with ``size`` as the default: min 4096, max at
    least 32 MiB."""
    return f"4096 {size} {max(size, 32 * 1024 * 1024)}"


@dataclass(frozen=True)
class TcpTuning:
    """What :func:`apply_tuning` sets on one host: the initial window in packets and the
    default socket buffer in bytes."""

    initial_window: int
    buffer_bytes: int = BUFFER_FLOOR_BYTES

    def to_dict(self) -> dict[str, int | str]:
        return {"initcwnd": self.initial_window, "initrwnd": self.initial_window,
                **sysctl_values(self.buffer_bytes), SLOW_START_AFTER_IDLE: 0}


def proc_path(key: str) -> str:
    """The ``/proc/sys`` file of a sysctl (``net.ipv4.tcp_rmem`` -> ``/proc/sys/net/ipv4/tcp_rmem``).

    The sysctls are written and read through these files, not the ``sysctl`` program: slim
    images (``python:3.11-slim``, a debootstrap minbase) have no procps, and a network
    namespace's ``/proc/sys/net`` is the namespace's own."""
    return "/proc/sys/" + key.replace(".", "/")


def sysctl_values(buffer: int = BUFFER_FLOOR_BYTES) -> dict[str, str]:
    """The per-namespace sysctls of the tuning: keep the congestion window across idle
    periods, start sockets with ``buffer`` bytes, congestion control
    :data:`CONGESTION_CONTROL_ALGORITHM`."""
    return {SLOW_START_AFTER_IDLE: "0", **{key: buffer_value(buffer) for key in BUFFER_SYSCTLS},
            CONGESTION_CONTROL: CONGESTION_CONTROL_ALGORITHM}


def write_command(key: str, value: str, netns: str | None = None) -> list[str]:
    """Write ``value`` to the sysctl ``key`` through ``/proc/sys`` (images without the
    ``sysctl`` program have the file), in ``netns`` or on the host."""
    return [*exec_in(netns), "sh", "-c", f"echo {value} > {proc_path(key)}"]


def sysctl_commands(netns: str | None = None,
                    buffer: int = BUFFER_FLOOR_BYTES) -> list[list[str]]:
    """Write :func:`sysctl_values` (all per network namespace)."""
    return [write_command(key, value, netns) for key, value in sysctl_values(buffer).items()]


def sysctl_read_commands(netns: str | None = None) -> list[list[str]]:
    """The sysctls' values as :func:`check_tuning` reads them (one line each, in the order
    slow start after idle, tcp_rmem, tcp_wmem, congestion control)."""
    return [[*exec_in(netns), "cat", proc_path(SLOW_START_AFTER_IDLE),
             *(proc_path(key) for key in BUFFER_SYSCTLS), proc_path(CONGESTION_CONTROL)]]


def routes_commands(dev: str, netns: str | None = None) -> list[list[str]]:
    """``ip route show dev DEV``: the routes :func:`route_commands` rewrites."""
    return [[*exec_in(netns), "ip", "route", "show", "dev", dev]]


_WINDOW_KEYS = ("initcwnd", "initrwnd")
_STATE_FLAGS = ("linkdown", "dead", "offload", "trap", "rt_offload", "rt_trap")
"""Words ``ip route show`` prints about a route's state, which ``ip route change`` refuses."""


def route_commands(routes: str, dev: str, window: int,
                   netns: str | None = None) -> list[list[str]]:
    """``ip route change ROUTE dev DEV initcwnd W initrwnd W`` for each line of ``routes``
    (the output of :func:`routes_commands`), keeping everything else the route says."""
    commands = []
    for line in routes.splitlines():
        tokens = line.split()
        if not tokens:
            continue
        kept: list[str] = []
        skip = False
        for token in tokens:
            if skip:
                skip = False
                continue
            if token in _WINDOW_KEYS:
                skip = True
                continue
            if token not in _STATE_FLAGS:
                kept.append(token)
        commands.append([*exec_in(netns), "ip", "route", "change", *kept, "dev", dev,
                         "initcwnd", str(window), "initrwnd", str(window)])
    if not commands:
        raise DecobenchError(f"{dev} has no routes to set the TCP window on "
                             f"({'namespace ' + netns if netns else 'this host'})")
    return commands


def check_tuning(routes: str, sysctls: str, window: int, where: str,
                 buffer: int = BUFFER_FLOOR_BYTES) -> None:
    """Raise naming ``where`` unless every route of the device carries ``initcwnd`` and
    ``initrwnd`` equal to ``window``, slow start after idle is off and both socket buffers
    start at ``buffer`` bytes or more and congestion control is
    :data:`CONGESTION_CONTROL_ALGORITHM` (``sysctls``: :func:`sysctl_read_commands`' output)."""
    lines = sysctls.strip().splitlines()
    fix = "(in a container, set it with the container's sysctls, as docker/compose.yaml does)"
    if not lines or lines[0].strip() != "0":
        raise DecobenchError(
            f"{where}: {SLOW_START_AFTER_IDLE} is {(lines[:1] or [''])[0].strip()!r}, not 0: "
            f"TCP would restart slow start after every pause between messages {fix}")
    for key, line in zip(BUFFER_SYSCTLS, lines[1:], strict=False):
        values = line.split()
        if len(values) != 3 or int(values[1]) < buffer:
            raise DecobenchError(f"{where}: {key} is {line.strip()!r}, its default below "
                                 f"{buffer} bytes: a fresh connection's window would hold "
                                 f"messages back by a round trip {fix}")
    if len(lines) < 2 + len(BUFFER_SYSCTLS):
        raise DecobenchError(f"{where}: could not read "
                             f"{', '.join((*BUFFER_SYSCTLS, CONGESTION_CONTROL))}")
    algorithm = lines[1 + len(BUFFER_SYSCTLS)].strip()
    if algorithm != CONGESTION_CONTROL_ALGORITHM:
        raise DecobenchError(
            f"{where}: {CONGESTION_CONTROL} is {algorithm!r}, not "
            f"{CONGESTION_CONTROL_ALGORITHM}: the emulation's timings assume it (with BBR "
            f"collectives stall by whole round trips); a namespace may choose it only if the "
            f"host allows it: {allow_command(CONGESTION_CONTROL_ALGORITHM)} {fix}")
    lines = [line for line in routes.splitlines() if line.strip()]
    if not lines:
        raise DecobenchError(f"{where}: the link has no routes")
    for line in lines:
        for key in _WINDOW_KEYS:
            found = re.search(rf"\b{key} (\d+)", line)
            if found is None or int(found.group(1)) != window:
                raise DecobenchError(f"{where}: route {line.strip()!r} does not carry "
                                     f"{key} {window}")


def apply_tuning(run: Callable[[list[str]], object], read: Callable[[list[str]], str],
                 dev: str, window: int, netns: str | None, where: str,
                 buffer: int = BUFFER_FLOOR_BYTES) -> TcpTuning:
    """Set (``run``) and read back (``read``, returning stdout) the tuning of one host.

    A sysctl that cannot be written (a container's read-only ``/proc/sys``) is only checked:
    the read-back names the fix if it is not already 0."""
    for argv in sysctl_commands(netns, buffer):
        try:
            run(argv)
        except Exception:  # noqa: BLE001 - read-only /proc/sys: the check below decides
            pass
    routes = "".join(read(argv) for argv in routes_commands(dev, netns))
    for argv in route_commands(routes, dev, window, netns):
        run(argv)
    check_tuning("".join(read(argv) for argv in routes_commands(dev, netns)),
                 "".join(read(argv) for argv in sysctl_read_commands(netns)), window, where,
                 buffer)
    return TcpTuning(window, buffer)


# ------------------------------------------------------------------ the host's allowed list
@dataclass(frozen=True)
class HostChange:
    """A host setting changed for a run and put back: ``key`` went from ``before`` to
    ``during``."""

    key: str
    before: str
    during: str

    def to_dict(self) -> dict[str, str]:
        return {"key": self.key, "before": self.before, "during": self.during}


HOST_CHANGES_ENV = "DECOBENCH_HOST_CHANGES"
"""Environment variable through which ``python -m decobench.netem.tcp -- COMMAND`` tells the
runs COMMAND starts (the Docker workers: docker/compose.yaml passes it on) which host settings
it changed, so that they record them in the run directory (``network_probe.json``)."""


def host_changes_to_env(changes: Sequence[HostChange]) -> str:
    """The value of :data:`HOST_CHANGES_ENV` for ``changes``: a JSON list of their dicts."""
    return json.dumps([change.to_dict() for change in changes])


def host_changes_from_env(environ: Mapping[str, str]) -> list[HostChange]:
    """The host changes :data:`HOST_CHANGES_ENV` names in ``environ`` (none when unset or
    empty); one error line naming the variable when it is not what
    :func:`host_changes_to_env` writes."""
    text = environ.get(HOST_CHANGES_ENV, "").strip()
    if not text:
        return []
    try:
        items = json.loads(text)
        return [HostChange(str(item["key"]), str(item["before"]), str(item["during"]))
                for item in items]
    except (ValueError, TypeError, KeyError) as exc:
        raise DecobenchError(
            f"{HOST_CHANGES_ENV}={text!r} is not a JSON list of {{key, before, during}} "
            f"objects ({exc}); it is set by python -m decobench.netem.tcp: unset it") from None


def allow_command(algorithm: str) -> str:
    """The shell line that adds ``algorithm`` to the host's allowed list (run as root on
    the host, outside any container)."""
    return (f"sysctl -w {ALLOWED_CONGESTION_CONTROL}=\"$(sysctl -n "
            f"{ALLOWED_CONGESTION_CONTROL}) {algorithm}\"")


@contextlib.contextmanager
def _host_lock(directory: str | None = None) -> Iterator[None]:
    path = Path(directory or tempfile.gettempdir()) / HOST_LOCK_NAME
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def congestion_control_allowed(
        run: Callable[[list[str]], object], read: Callable[[list[str]], str],
        notify: Callable[[str], None],
        algorithm: str = CONGESTION_CONTROL_ALGORITHM,
        lock_dir: str | None = None) -> Iterator[HostChange | None]:
    """Within the block, network namespaces may choose ``algorithm`` (module docstring).

    Reads the host's allowed list (``read``: a command's stdout); if ``algorithm`` is
    missing, appends it (``run``), says so through ``notify``, and writes the old list back
    when the block ends, also after an exception. Yields the :class:`HostChange`, or None when
    the host already allowed it. Raises one line naming the fix when the kernel lacks the
    algorithm or the list cannot be written. Serialised between decobench processes by a
    lock file (:data:`HOST_LOCK_NAME`)."""
    with _host_lock(lock_dir):
        allowed = read(["cat", proc_path(ALLOWED_CONGESTION_CONTROL)]).split()
        if algorithm in allowed:
            yield None
            return
        available = read(["cat", proc_path(AVAILABLE_CONGESTION_CONTROL)]).split()
        if algorithm not in available:
            raise DecobenchError(
                f"this kernel has no {algorithm} congestion control ({AVAILABLE_CONGESTION_CONTROL}"
                f" is {' '.join(available)!r}); the emulation's timings assume it: use a kernel "
                f"built with CONFIG_TCP_CONG_CUBIC")
        change = HostChange(ALLOWED_CONGESTION_CONTROL, " ".join(allowed),
                            " ".join([*allowed, algorithm]))
        try:
            run(write_command(change.key, change.during))
        except Exception as exc:  # noqa: BLE001 - not root, or not the initial namespace
            raise DecobenchError(
                f"the host allows only {change.before!r} as TCP congestion control in network "
                f"namespaces and this process cannot add {algorithm} ({exc}); as root on the "
                f"host (outside any container) run: {allow_command(algorithm)}") from None
        notify(f"decobench: note: the host's {change.key} was {change.before!r}; added "
               f"{algorithm} while the emulated hosts are set up (restored right after)")
        try:
            yield change
        finally:
            run(write_command(change.key, change.before))
            notify(f"decobench: note: restored {change.key} to {change.before!r}")


def print_note(line: str) -> None:
    """Where the notes of :func:`congestion_control_allowed` go by default: the terminal
    (standard error), at once."""
    print(line, file=sys.stderr, flush=True)


def _host_run(argv: list[str]) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise DecobenchError(f"{' '.join(argv)}: {proc.stderr.strip() or 'failed'}")
    return proc.stdout


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m decobench.netem.tcp -- COMMAND...``: run COMMAND with cubic allowed."""
    parser = argparse.ArgumentParser(
        prog="python -m decobench.netem.tcp",
        description="Run a command (e.g. `docker compose -f docker/compose.yaml up -d`) while "
                    "the host allows the emulated hosts' TCP congestion control "
                    f"({CONGESTION_CONTROL_ALGORITHM}) in network namespaces and containers, "
                    f"then put {ALLOWED_CONGESTION_CONTROL} back. A container keeps the "
                    "algorithm its sysctls set at its start. The change is printed and handed "
                    f"to COMMAND in {HOST_CHANGES_ENV} (JSON), which docker/compose.yaml "
                    "passes to the workers: rank 0 records it in network_probe.json. Needs "
                    "root on the host.",
        epilog="example: python -m decobench.netem.tcp -- docker compose -f "
               "docker/compose.yaml up -d")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the command to run (after --)")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    try:
        with congestion_control_allowed(_host_run, _host_run, print_note) as change:
            env = dict(os.environ)
            if change is not None:   # the runs COMMAND starts record it (docker/compose.yaml)
                env[HOST_CHANGES_ENV] = host_changes_to_env([change])
            return subprocess.run(command, check=False, env=env).returncode
    except DecobenchError as exc:
        print(f"decobench.netem.tcp: error: {exc}", file=sys.stderr)
        return 2


__all__: Sequence[str] = ["allow_command", "ALLOWED_CONGESTION_CONTROL", "apply_tuning",
                          "AVAILABLE_CONGESTION_CONTROL", "buffer_bytes", "BUFFER_CAP_BYTES",
                          "BUFFER_FLOOR_BYTES", "BUFFER_SYSCTLS", "buffer_value", "check_tuning",
                          "CONGESTION_CONTROL", "CONGESTION_CONTROL_ALGORITHM",
                          "congestion_control_allowed", "DEFAULT_INITIAL_WINDOW",
                          "HOST_CHANGES_ENV", "host_changes_from_env", "host_changes_to_env",
                          "HostChange", "initial_window_packets", "MAX_INITIAL_WINDOW",
                          "print_note", "proc_path", "route_commands", "routes_commands",
                          "SLOW_START_AFTER_IDLE", "sysctl_commands", "sysctl_read_commands",
                          "sysctl_values", "TcpTuning", "write_command"]


if __name__ == "__main__":
    raise SystemExit(main())
