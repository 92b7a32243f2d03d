"""Handing freed memory back to the operating system between phases of a long run.

CPython and torch free their objects into the C allocator, and glibc keeps freed chunks below its
mmap threshold (which grows to 32 MB as large tensors come and go) in the process heap: a learner
step's activations, once freed, stay in the process's resident memory while the sampler that
follows allocates its own. :func:`release` returns them (``malloc_trim``), so the resident peak of
a run that alternates sampling and learning is the larger of the two, not their sum.

Within a phase the heap still holds what a step freed until the next :func:`release`: in
``make learn`` a GRPO learner step grew the process from 3.0 to 5.1-5.9 GB (trimming after every
micro-batch still left 5.0 GB). :func:`map_large_allocations` fixes glibc's mmap threshold, so every
allocation of at least that size gets its own mapping and leaves the process the moment torch frees
it: four of the same steps then peaked at 3.7 GB, with the same rewards, their learner about 1.4x
slower (fresh pages are faulted in and zeroed on every large allocation; docs/benchmarks.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
from functools import cache
from typing import Any


@cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        lib = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return lib if lib is not None and hasattr(lib, "malloc_trim") else None


def release(collect: bool = True) -> bool:
    """Collect garbage (with ``collect``), then return the C heap's free pages to the OS (glibc's
    ``malloc_trim(0)``). Returns whether the allocator could be asked (False off glibc, e.g. macOS
    or musl: a no-op). Takes milliseconds; call it between phases (after a learner step, after an
    evaluation), not inside a loop over tokens."""
    if collect:
        gc.collect()
    lib = _libc()
    if lib is None:
        return False
    lib.malloc_trim(0)
    return True


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
LARGE_ALLOCATION = 128 * 1024
"""The threshold :func:`map_large_allocations` sets by default: glibc's own starting value, which it
otherwise raises to 32 MB as large blocks are freed."""


def map_large_allocations(threshold: int = LARGE_ALLOCATION) -> bool:
    """Serve every allocation of at least ``threshold`` bytes from its own ``mmap`` for the rest of
    the process (glibc's ``mallopt(M_MMAP_THRESHOLD)``, which also stops the threshold from growing),
    so freed tensors leave the resident memory at once instead of waiting in the heap. Process-wide:
    ``make learn`` calls it at start; a library should not. Returns whether glibc took it (False off
    glibc: a no-op). If the kernel's mapping limit is reached, glibc falls back to the heap."""
    lib = _libc()
    if lib is None or not hasattr(lib, "mallopt"):
        return False
    return bool(lib.mallopt(M_MMAP_THRESHOLD, int(threshold)))


def resident_mib() -> float:
    """This process's resident memory now, in MiB (0.0 where ``/proc`` is absent)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return 0.0
