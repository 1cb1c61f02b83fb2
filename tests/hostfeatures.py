"""What the live network tests need of the host, as skip reasons (None: all there).

The emulated network (decobench.netem) needs root with ip and tc, and cubic TCP in the
worker namespaces: the kernel must have it, and the host must allow it in namespaces or
let this process add it to the allowed list for the set-up (decobench.netem.tcp: only the
initial network namespace may write that list). A test that needs these skips with the
reason, as the root-only tests always did."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from decobench.netem.host import SubprocessRunner
from decobench.netem.netns import namespace_owner
from decobench.netem.tcp import (
    ALLOWED_CONGESTION_CONTROL,
    AVAILABLE_CONGESTION_CONTROL,
    CONGESTION_CONTROL_ALGORITHM,
    allow_command,
    proc_path,
)


def emulation_unavailable() -> str | None:
    """Why the emulated network cannot be built here, or None."""
    if os.geteuid() != 0:
        return "needs root (CAP_NET_ADMIN) to create network namespaces (CI runs as root)"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "needs the ip and tc commands (iproute2)"
    return congestion_control_unavailable()


def congestion_control_unavailable() -> str | None:
    """Why the worker namespaces cannot get cubic here, or None."""
    algorithm = CONGESTION_CONTROL_ALGORITHM
    available = Path(proc_path(AVAILABLE_CONGESTION_CONTROL)).read_text().split()
    if algorithm not in available:
        return (f"the kernel has no {algorithm} TCP ({AVAILABLE_CONGESTION_CONTROL}: "
                f"{' '.join(available)!r})")
    allowed = Path(proc_path(ALLOWED_CONGESTION_CONTROL))
    if algorithm not in allowed.read_text().split() and not os.access(allowed, os.W_OK):
        return (f"the host does not allow {algorithm} in network namespaces and this process "
                f"cannot add it (not the initial network namespace); on the host: "
                f"{allow_command(algorithm)}")
    return None


def namespaces() -> set[str]:
    """Every network namespace on the host (``ip netns list``)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def left_behind(before: set[str], *launchers: int) -> set[str]:
    """Namespaces made since ``before`` by this test's runs (owner tag: this process or one
    of the ``launchers`` it started) that still exist. Another process on the host (a live
    test or an emulated run beside this one) makes and removes its own meanwhile; those are
    not this test's to judge (a clean-clone make test once failed on a neighbour's)."""
    owners = {os.getpid(), *launchers}
    runner = SubprocessRunner()
    left = set()
    for ns in namespaces() - before:
        match = re.search(r"pid=(\d+)", namespace_owner(runner, ns) or "")
        if match and int(match.group(1)) in owners:
            left.add(ns)
    return left
