"""decobench.training.allocator: a training process keeps freed memory (glibc mallopt), says so, and
leaves the C library alone when asked or when it is not glibc."""

import os
import subprocess
import sys
import textwrap

import pytest

from decobench.training import allocator
from decobench.training.allocator import keep_freed_memory

glibc = pytest.mark.skipif(not os.confstr("CS_GNU_LIBC_VERSION"), reason="needs glibc")

# A fresh interpreter holds an 8 MiB block and reports the bytes glibc serves with mmap
# (mallinfo2().hblkhd): above the default 128 KiB threshold it is an mmap, which goes back
# to the kernel on free; with the settings it comes from the heap and stays for reuse.
_PROBE = textwrap.dedent("""
    import ctypes, sys
    from decobench.training.allocator import keep_freed_memory
    if sys.argv[1] == "kept":
        keep_freed_memory()
    class Info(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks "
                    "keepcost".split()]
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = Info
    libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, (ctypes.c_void_p,)
    block = libc.malloc(8 << 20)
    print(libc.mallinfo2().hblkhd)
    libc.free(block)
""")


def _mmapped_bytes(mode: str) -> int:
    env = {**os.environ}
    env.pop(allocator.OPT_OUT, None)
    done = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True,
                          text=True, env=env, check=True)
    return int(done.stdout)


@glibc
def test_an_8_mib_block_comes_from_the_heap_once_freed_memory_is_kept():
    assert _mmapped_bytes("default") >= 8 << 20
    assert _mmapped_bytes("kept") < 8 << 20


@glibc
def test_it_says_what_it_set(monkeypatch):
    monkeypatch.delenv(allocator.OPT_OUT, raising=False)
    assert keep_freed_memory() == (f"{os.confstr('CS_GNU_LIBC_VERSION')}: mmap threshold "
                                   "32 MiB, no trimming")


def test_the_opt_out_touches_nothing(monkeypatch):
    monkeypatch.setenv(allocator.OPT_OUT, "default")
    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda *_: pytest.fail("mallopt called"))
    assert keep_freed_memory() == "C library defaults (DECOBENCH_MALLOC=default)"


def test_other_c_libraries_are_left_alone(monkeypatch):
    monkeypatch.delenv(allocator.OPT_OUT, raising=False)
    monkeypatch.setattr(allocator.os, "confstr", lambda name: None)
    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda *_: pytest.fail("mallopt called"))
    assert keep_freed_memory() == "C library defaults (not glibc)"
