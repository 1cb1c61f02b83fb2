"""Atomic file writes: a temporary file in the same folder, fsync, then ``os.replace``.

Readers see either the old file or the complete new one, never a partial write; an
interrupted write leaves no temporary file behind.
"""

from __future__ import annotations

import os
import pathlib
import tempfile


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (mode kept if the file exists, else 0644)."""
    target = pathlib.Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.chmod(tmp, target.stat().st_mode & 0o777 if target.exists() else 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))
