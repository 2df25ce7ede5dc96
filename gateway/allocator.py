"""The C allocator: give freed memory back to the operating system.

A long-running daemon's RSS should follow what it holds, not the most it ever held. glibc keeps
freed memory in three ways that make RSS drift up over hours of work:

- **Large blocks.** glibc serves big allocations with their own `mmap` (returned to the system on
  free) only above a threshold that it raises, by default, to the size of each large block freed,
  up to 32 MiB. After a burst of large frames (a 10 MB transcript page for each of several slow
  readers), the next blocks of that size come from the heap, where freed memory mostly stays with
  the process. `release_large_blocks` fixes the threshold (`mallopt(M_MMAP_THRESHOLD)`), so every
  block at least `MMAP_THRESHOLD` long is mapped on its own and unmapped when freed.
- **Arenas.** Each thread that allocates may get an arena of its own (up to eight per core); the
  database threads, the executor's and the event loop's each fragment their own, and freed
  memory in one arena never serves another. `limit_arenas` caps them at `ARENAS`.
- **Free pages inside the heap.** glibc returns memory only from the top of an arena on its own;
  free pages below a block still in use stay resident. `malloc_trim(0)` hands every whole free
  page back (`madvise`), and `MemoryTrimmer` calls it every `[gateway] memory_trim_s` seconds,
  after a full run of Python's cyclic collector unless the collector made one of its own since
  the last trim: memory held by objects in reference cycles (a cancelled writer's traceback keeps
  the frame it was sending) is freed only by the collector, which a daemon at rest, allocating
  little, does not trigger, while a busy daemon's collector does (and a full collection stops
  the event loop for as long as it walks every live session's objects: 110-240 ms with 1,000).

In a 14-minute `bench.soak` beside an untouched daemon (same machine, same time), free memory
held inside the arenas rose from 4.5 to 14 MiB untouched and stayed between 2 and 8 MiB with two
arenas and a trim every 10 seconds; RSS ended 9 MiB lower. A trim took 0.2 to 14 ms, on a thread
of the default executor (the foreign call releases the GIL): the event loop goes on meanwhile,
and waits only if it allocates from the arena being trimmed at that moment.

`gatewayd` calls `release_large_blocks` and `limit_arenas` once at start-up; the app runs the
trimmer. All are no-ops where the C library is not glibc.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import time
from typing import Any

M_MMAP_THRESHOLD = -3
"""glibc's `mallopt` parameter numbers (malloc.h)."""
M_ARENA_MAX = -8
MMAP_THRESHOLD = 256 * 1024
"""Blocks at least this long are mapped on their own (glibc's initial default is 128 KiB)."""
ARENAS = 2
"""Arenas glibc may create (its default is eight per core)."""


def _libc_function(name: str) -> Any:
    """`name` from the symbols the process has loaded (the C library's among them), None where
    there is no such function. (Looking the library up by name, `ctypes.util.find_library`, would
    start `ldconfig` at every start-up.)"""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError, TypeError):
        return None


def _mallopt(parameter: int, value: int) -> bool:
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(parameter, value))


def release_large_blocks(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at `threshold` bytes. True when it was set; False where the C
    library has no `mallopt` or refused (nothing changes then)."""
    return _mallopt(M_MMAP_THRESHOLD, threshold)


def limit_arenas(count: int = ARENAS) -> bool:
    """Let glibc create at most `count` arenas (threads beyond share them). True when set. Call
    it before the process starts threads: arenas that already exist stay."""
    return _mallopt(M_ARENA_MAX, count)


def trim() -> bool | None:
    """Give the free pages of every arena back to the system (`malloc_trim(0)`). True when some
    memory was returned, False when none could be, None where there is no `malloc_trim`."""
    malloc_trim = _libc_function("malloc_trim")
    if malloc_trim is None:
        return None
    malloc_trim.argtypes = (ctypes.c_size_t,)
    malloc_trim.restype = ctypes.c_int
    return bool(malloc_trim(0))


class MemoryTrimmer:
    """Calls `trim` every `interval_s` seconds, on a thread of the loop's default executor, until
    its task is cancelled. `snapshot()` says how often and how long (`status.memory`)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.trims = 0
        self.released = 0
        """Trims that returned memory."""
        self.last_ms: float | None = None
        self.collections = 0
        """Full collections the trimmer made (the collector made none of its own since the last)."""
        self._full_seen = full_collections()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            started = time.perf_counter()
            # Objects in reference cycles (a cancelled writer's traceback holding the frame it was
            # sending) are freed only by the cyclic collector, which an idle daemon, allocating
            # nothing, never triggers; collect them so that the trim can return their memory.
            if full_collections() == self._full_seen:
                gc.collect()
                self.collections += 1
            self._full_seen = full_collections()
            outcome = await asyncio.to_thread(trim)
            if outcome is None:
                return  # not glibc: nothing to do, ever
            self.last_ms = (time.perf_counter() - started) * 1000
            self.trims += 1
            self.released += outcome

    def snapshot(self) -> dict[str, Any]:
        return {
            "trimIntervalS": self.interval_s,
            "trims": self.trims,
            "trimsReleasing": self.released,
            "lastTrimMs": None if self.last_ms is None else round(self.last_ms, 2),
            "collector": collector_snapshot(self.collections),
        }


def full_collections() -> int:
    """Collections of the oldest generation so far (the collector's and `gc.collect()`'s)."""
    return int(gc.get_stats()[-1]["collections"])


def collector_snapshot(trimmer_collections: int) -> dict[str, Any]:
    """The cyclic collector: its thresholds, the collections of each generation so far (young to
    old) and how many of the full ones the trimmer asked for."""
    return {
        "thresholds": list(gc.get_threshold()),
        "collections": [int(stats["collections"]) for stats in gc.get_stats()],
        "trimmerCollections": trimmer_collections,
    }
