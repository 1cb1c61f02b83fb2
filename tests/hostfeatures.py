"""What the live network tests need of the host, as skip reasons (None: all there).

The emulated network (decobench.netem) needs root with ip and tc, and cubic TCP in the
worker namespaces: the kernel must have it, and the host must allow it in namespaces or
let this process add it to the allowed list for the set-up (decobench.netem.tcp: only the
initial network namespace may write that list). A test that needs these skips with the
reason, as the root-only tests always did."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

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
