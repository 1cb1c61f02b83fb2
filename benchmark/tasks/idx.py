"""The IDX file format of (Fashion-)MNIST, checked before torchvision reads it.

An IDX file is a 4-byte magic number (two zero bytes, a type code, the number of
dimensions), one big-endian int32 per dimension, then the data: for unsigned bytes (type
0x08) exactly ∏ dims bytes. torchvision reports a malformed file as a bare assertion or a
reshape error that does not name the file; :func:`idx_problem` names what is wrong.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

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
