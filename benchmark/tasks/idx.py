"""The IDX file format of (Fashion-)MNIST: checked, and read.

An IDX file is a 4-byte magic number (two zero bytes, a type code, the number of
dimensions), one big-endian int32 per dimension, then the data: for unsigned bytes (type
0x08) exactly ∏ dims bytes. torchvision reports a malformed file as a bare assertion or a
reshape error that does not name the file; :func:`idx_problem` names what is wrong.
:func:`read_idx` reads a checked file into the array torchvision's loader would give (the
same bytes, the same shape) without importing torchvision, which costs every process
about 1.4-2 s (it imports torch._dynamo).
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np

from decobench.errors import DecobenchError

UBYTE = 0x08


def idx_problem(path: Path, dimensions: int) -> str:
    """Why ``path`` is not an unsigned-byte IDX file of ``dimensions`` dimensions, or ""."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            head = handle.read(4 + 4 * dimensions)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if len(head) < 4:
        return f"is {size} bytes, too short for an IDX header"
    if head[0:2] != b"\0\0" or head[2] != UBYTE or head[3] != dimensions:
        return (f"is not an IDX file of {dimensions}-dimensional unsigned bytes (magic "
                f"{head[:4].hex()}, expected 000008{dimensions:02x})")
    if len(head) < 4 + 4 * dimensions:
        return f"is {size} bytes, too short for an IDX header"
    dims = struct.unpack(f">{dimensions}i", head[4:])
    expected = 4 + 4 * dimensions + math.prod(dims)
    if size != expected:
        return (f"holds {size} bytes, but its header ({' x '.join(map(str, dims))}) needs "
                f"{expected}: the file is truncated or corrupt")
    return ""


def read_idx(path: Path) -> np.ndarray:
    """An unsigned-byte IDX file as a read-only uint8 array of its header's shape."""
    data = path.read_bytes()
    zero, kind, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or kind != UBYTE:
        raise DecobenchError(f"{path}: not an unsigned-byte IDX file")
    shape = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    return np.frombuffer(data[4 + 4 * ndim:], dtype=np.uint8).reshape(shape)
