"""Handing freed memory back to the operating system between phases of a long run.

CPython and torch free their objects into the C allocator, and glibc keeps freed chunks below its
mmap threshold (which grows to 32 MB as large tensors come and go) in the process heap: a learner
step's activations, once freed, stay in the process's resident memory while the sampler that
follows allocates its own. :func:`release` returns them (``malloc_trim``), so the resident peak of
a run that alternates sampling and learning is the larger of the two, not their sum.
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


def resident_mib() -> float:
    """This process's resident memory now, in MiB (0.0 where ``/proc`` is absent)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return 0.0
