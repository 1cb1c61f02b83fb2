"""Atomic file writes: a temporary file in the same folder, fsync, then ``os.replace``.

Readers see either the old file or the complete new one, never a partial write; an
interrupted write leaves no temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
from collections.abc import Iterator
from typing import BinaryIO


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary handle whose content replaces ``path`` atomically when the block ends
    (mode kept if the file exists, else 0644); the temporary file is ``.NAME.*.tmp`` beside
    it and is removed if the block raises."""
    target = pathlib.Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.chmod(tmp, target.stat().st_mode & 0o777 if target.exists() else 0o644)
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (:func:`atomic_writer`)."""
    with atomic_writer(path) as handle:
        handle.write(data)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def check_output_dir(path: str | os.PathLike[str], flag: str) -> pathlib.Path:
    """Check, before anything is written, that ``path`` can be a folder this process fills:
    an existing folder, or one that can be created (its nearest existing ancestor is a
    writable folder). Raises :class:`decobench.errors.DecobenchError` with one line naming
    ``flag`` (e.g. ``--out``) otherwise; returns the path."""
    from decobench.errors import DecobenchError

    target = pathlib.Path(path)
    if target.exists() and not target.is_dir():
        raise DecobenchError(f"{flag} {target} is a file, not a folder: choose another {flag}")
    existing = next((p for p in (target, *target.parents) if p.exists()), pathlib.Path("."))
    if not existing.is_dir():
        raise DecobenchError(f"{flag} {target}: {existing} is a file, so no folder can be "
                             f"created under it; choose another {flag}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise DecobenchError(f"{flag} {target}: {existing} is not writable for this user; "
                             f"choose another {flag}")
    return target
