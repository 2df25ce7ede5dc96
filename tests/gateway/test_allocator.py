"""The C allocator's settings (`gateway.allocator`): set without starting a program to find libc,
and a trim hands freed pages inside the heap back to the system."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import platform
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from gateway.allocator import MemoryTrimmer, limit_arenas, release_large_blocks

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")


@glibc
def test_the_settings_are_made_without_starting_a_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a subprocess was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    assert release_large_blocks() is True
    assert limit_arenas() is True


# In a process of its own: 60,000 blocks of 3 KiB (served by malloc, under the mmap threshold),
# every twentieth kept, the rest freed. The freed pages lie below live blocks, so glibc keeps
# them resident until something trims the heap.
FRAGMENT_AND_TRIM = textwrap.dedent(
    """
    import gc, sys
    from gateway.allocator import trim

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    blocks = [bytearray(3000) for _ in range(60_000)]
    kept = blocks[::20]
    del blocks
    gc.collect()
    before = rss()
    released = trim()
    print(before, rss(), released, len(kept))
    """
)


@glibc
def test_a_trim_hands_the_free_pages_inside_the_heap_back() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FRAGMENT_AND_TRIM], capture_output=True, text=True, check=True, timeout=60
    )
    before, after, released, _ = done.stdout.split()
    assert released == "True"
    # About 170 MiB were allocated and 95% freed; the trim gives back most of what was freed.
    assert int(before) - int(after) > 100 * 2**20, (int(before) >> 20, int(after) >> 20)


@glibc
async def test_the_trimmer_collects_only_when_the_collector_made_no_full_collection() -> None:
    """At rest the collector makes no full collection, so the trimmer makes one before each trim;
    when the collector made one since the last trim (a busy daemon), the trimmer does not stop
    the event loop for another."""
    trimmer = MemoryTrimmer(0.05)
    task = asyncio.create_task(trimmer.run())
    try:
        while trimmer.trims < 2:
            await asyncio.sleep(0.01)
        assert trimmer.collections == trimmer.trims
        made = trimmer.collections
        for _ in range(6):
            gc.collect()  # as the collector of a busy daemon would
            trims = trimmer.trims
            while trimmer.trims == trims:
                await asyncio.sleep(0.005)
        # The trim after each outside collection saw it and made none of its own.
        assert trimmer.collections - made <= 1, (trimmer.collections, made)
        assert trimmer.snapshot()["collector"]["trimmerCollections"] == trimmer.collections
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
