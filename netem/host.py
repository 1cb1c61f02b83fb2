"""What every shaper shares on this host: running its commands, owning its namespaces.

The lowest module of the emulated network, imported by :mod:`decobench.netem.loss`,
:mod:`decobench.netem.nfqueue` and :mod:`decobench.netem.netns` (which re-exports its names)
and importing none of them. It holds the command :class:`Runner` (and
:class:`SubprocessRunner`, :class:`CommandError`, :func:`require_root`); the owner tag on
each namespace's loopback and :func:`throwaway_namespace`, where the feature checks try what
the kernel can do (docs/emulation.md, "Teardown and leftovers", "Latency mechanisms");
:class:`ShapingMismatch`, raised when a setting read back is not the one set
(docs/emulation.md, "Every setting is read back"); and the :class:`Delayer` protocol, what a
shaper asks of a link's NFQUEUE delayer.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from decobench.errors import DecobenchError
from decobench.netem.tc import format_command

PREFIX_STEM: str = "dcb"
"""Every namespace this project creates starts with this."""

OWNER_TAG_PREFIX: str = "decobench owner"
ROOT_MESSAGE: str = (
    "the emulated backend needs root (CAP_NET_ADMIN) to create network namespaces and shape "
    "links with tc; run as root, e.g. `sudo ...`, or use the default simulated backend"
)


# ------------------------------------------------------------------------------- commands
class CommandError(DecobenchError):
    """A command exited with a non-zero status; the message names it and its stderr."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        detail = " ".join(self.stderr.split()) or "(no error output)"
        super().__init__(f"command failed (exit {returncode}): {format_command(argv)}: {detail}")


class Runner(Protocol):
    """Runs one command; raises :class:`CommandError` if it fails."""

    def run(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]: ...


PACKAGE_OF: dict[str, str] = {"ip": "iproute2", "tc": "iproute2", "iptables": "iptables",
                              "sh": "dash", "cat": "coreutils"}
"""The Debian package of each program the shapers run, for the error when one is missing."""


@dataclass(frozen=True)
class SubprocessRunner:
    """The real runner: ``subprocess.run`` with captured output and a timeout."""

    timeout_s: float = 30.0

    def run(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        args = list(argv)
        try:
            proc = subprocess.run(
                args, capture_output=True, text=True, timeout=self.timeout_s, check=False
            )
        except FileNotFoundError:
            package = PACKAGE_OF.get(Path(args[0]).name)
            fix = (f"install {package} (e.g. `apt-get install {package}`)" if package
                   else "install the package that provides it")
            raise DecobenchError(
                f"{args[0]}: command not found (needed for: {format_command(args)}); {fix}"
            ) from None
        except subprocess.TimeoutExpired:
            raise DecobenchError(
                f"command timed out after {self.timeout_s:g} s: {format_command(args)}"
            ) from None
        if proc.returncode != 0:
            raise CommandError(args, proc.returncode, proc.stderr or "")
        return proc


def require_root() -> None:
    """Raise :class:`DecobenchError` unless we are root and ``ip`` and ``tc`` are installed."""
    if os.geteuid() != 0:
        raise DecobenchError(ROOT_MESSAGE)
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise DecobenchError(
            f"the emulated backend needs the {' and '.join(f'`{m}`' for m in missing)} "
            "command(s) from iproute2, not found on PATH; install iproute2 "
            "(e.g. `apt-get install iproute2`) or use the default simulated backend"
        )


# ------------------------------------------------------------------------------ shaping
class ShapingMismatch(DecobenchError):
    """A link's shaping, read back after it was set, is not what was asked for."""


class Delayer(Protocol):
    """A running packet delayer of one link (:class:`decobench.netem.nfqueue.DelayerProcess`)."""

    def set_delay(self, delay_s: float) -> float: ...

    def alive(self) -> bool: ...

    def stop(self) -> Any: ...


# ---------------------------------------------------------------------------- ownership
def _process_start_ticks(pid: int) -> str | None:
    """Start time of a process in clock ticks since boot (``/proc/PID/stat`` field 22)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) "
    return fields[19] if len(fields) > 19 else None


def owner_tag(pid: int | None = None) -> str:
    """The loopback alias naming a namespace's owner: ``decobench owner pid=P start=S``."""
    pid = os.getpid() if pid is None else pid
    return f"{OWNER_TAG_PREFIX} pid={pid} start={_process_start_ticks(pid) or 0}"


def owner_alive(tag: str | None) -> bool:
    """Whether the process named by an owner tag still runs (pid and start time match)."""
    match = re.fullmatch(rf"{OWNER_TAG_PREFIX} pid=(\d+) start=(\d+)", (tag or "").strip())
    if not match:
        return False
    start = _process_start_ticks(int(match.group(1)))
    return start is not None and start == match.group(2)


@contextlib.contextmanager
def throwaway_namespace(runner: Runner, role: str) -> Iterator[str]:
    """A namespace ``dcbXXXXX-ROLE`` with an owner tag, deleted on leaving (also after an
    error): where the feature checks try what this kernel can do."""
    ns = f"{PREFIX_STEM}{secrets.token_hex(3)[:5]}-{role}"
    runner.run(["ip", "netns", "add", ns])
    try:
        runner.run(["ip", "-n", ns, "link", "set", "lo", "alias", owner_tag()])
        yield ns
    finally:
        runner.run(["ip", "netns", "del", ns])
