"""Atomic writes (decobench.atomicio): a reader sees the old file or the complete new one,
an interrupted write leaves no temporary file, and the file's mode is kept."""

import os

import pytest

from decobench.atomicio import atomic_writer, write_bytes_atomic


def test_a_block_that_raises_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "state.bin"
    write_bytes_atomic(path, b"old")
    os.chmod(path, 0o600)
    with pytest.raises(RuntimeError), atomic_writer(path) as handle:
        handle.write(b"half of the new")
        raise RuntimeError("killed mid-write")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.bin"]
    with atomic_writer(path) as handle:
        handle.write(b"new")
    assert path.read_bytes() == b"new" and (path.stat().st_mode & 0o777) == 0o600
    write_bytes_atomic(tmp_path / "sub" / "fresh", b"x")
    assert (tmp_path / "sub" / "fresh").stat().st_mode & 0o777 == 0o644
