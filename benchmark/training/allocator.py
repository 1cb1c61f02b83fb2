"""Keep freed memory in the process, so each training step reuses the pages of the last one.

glibc's malloc serves a request above its mmap threshold with a fresh ``mmap`` and gives it
back to the kernel on ``free``; the threshold adapts upwards only up to a point, and the top
of the heap is trimmed once more than the trim threshold is free. A training step allocates
the same large activations and gradients every iteration, so with the defaults many of them
are page-faulted in afresh each time: measured on 2 cores (``make bench``,
``gradient_engines``, cpu-profile ViT, 16 workers x 32 samples, 2026-11-24), one plain
forward/backward took 0.73-0.88 s with the defaults and 0.73-0.78 s with the settings below,
and the per-worker (grouped) pass, whose extra buffers pushed more allocations over the
threshold, went from 1.12-1.35x of it to 1.01-1.11x.

:func:`keep_freed_memory` sets the mmap threshold to glibc's largest allowed value and turns
trimming off (``mallopt``), the effect PyTorch's performance tuning guide gets by switching
to jemalloc or TCMalloc ("reusing memory as much as possible"), with nothing to install.
The price: the process keeps its peak heap until it exits. It is called by the training
loop (:class:`decobench.training.loop.ModelLearner`) and by ``make bench``; the library pieces a user
drops into their own loop never call it. ``DECOBENCH_MALLOC=default`` leaves glibc's
settings alone; on a C library other than glibc it does nothing. What it did is recorded in
the run's ``config.yaml`` (``gradients.allocator``).
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
"""glibc's largest mmap threshold on 64-bit (``HEAP_MAX_SIZE / 2``); requests above it are
still served by ``mmap``."""
TRIM_THRESHOLD = 2**31 - 1
"""The largest value ``mallopt`` takes (a C ``int``): the heap is never trimmed."""
OPT_OUT = "DECOBENCH_MALLOC"


def keep_freed_memory() -> str:
    """Apply the settings above to this process (idempotent) and say what was done, in one
    line for ``config.yaml``."""
    if os.environ.get(OPT_OUT, "").strip().lower() == "default":
        return f"C library defaults ({OPT_OUT}=default)"
    try:
        libc_version = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        libc_version = None
    if not libc_version:
        return "C library defaults (not glibc)"
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return f"C library defaults ({libc_version} without mallopt)"
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1 \
            or mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
        return f"C library defaults ({libc_version} refused the settings)"
    return f"{libc_version}: mmap threshold {MMAP_THRESHOLD >> 20} MiB, no trimming"
