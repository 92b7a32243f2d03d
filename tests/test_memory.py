"""release(): freed heap memory goes back to the OS, not only to the allocator's free lists."""

from __future__ import annotations

import sys

import pytest

from prm_gym.core.memory import release, resident_mib


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc_trim and /proc are Linux's")
def test_release_returns_freed_heap_chunks_to_the_os() -> None:
    blocks = [bytearray(100_000) for _ in range(3000)]  # 300 MB in chunks below glibc's mmap threshold
    kept = blocks[::10]  # every tenth stays alive, so the heap's top cannot simply shrink
    del blocks
    freed = resident_mib()
    assert release()
    after = resident_mib()
    assert freed - after > 150, (freed, after)  # most of the 270 MB freed left the process
    assert len(kept) == 300


_FRAGMENT = """
import ctypes, ctypes.util, sys
from prm_gym.core.memory import map_large_allocations, resident_mib
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "mapped":
    assert map_large_allocations()
libc.free(libc.malloc(16 << 20))  # glibc raises its mmap threshold to 16 MB (unless it was fixed)
base = resident_mib()
blocks, pins = [], []
for _ in range(20):  # 160 MB, as a learner step's activations, each followed by a small live block
    blocks.append(libc.malloc(8 << 20))
    ctypes.memset(blocks[-1], 1, 8 << 20)
    pins.append(libc.malloc(1 << 20))  # so the freed blocks are holes, not the heap's shrinkable top
for b in blocks:
    libc.free(b)
print(resident_mib() - base)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and /proc are Linux's")
def test_mapped_large_allocations_leave_the_process_when_freed() -> None:
    import subprocess

    held = {}
    for mode in ("heap", "mapped"):  # process-wide settings: each in its own interpreter
        out = subprocess.run([sys.executable, "-c", _FRAGMENT, mode], capture_output=True, text=True, check=True)
        held[mode] = float(out.stdout.split()[-1])
    assert held["heap"] > 120, held  # glibc's default: the freed 160 MB stay resident until a trim
    assert held["mapped"] < 20, held  # fixed threshold: each block was its own mapping, gone on free
