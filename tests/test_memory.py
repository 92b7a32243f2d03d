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
