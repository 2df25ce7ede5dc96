"""`gateway.health.SessionsSummary`: `health` reads the store once, then answers from memory; a
change has it read again in the background, no more often than its interval."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from gateway.health import SessionsSummary
from sessions import SessionRecord


class Store:
    """The store's session listing, counting its reads."""

    def __init__(self) -> None:
        self.count = 1
        self.reads = 0

    async def list_sessions(self, limit: int) -> tuple[Sequence[SessionRecord], int]:
        self.reads += 1
        return [], self.count


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


async def test_health_reads_the_store_once_then_answers_from_memory() -> None:
    store = Store()
    summary = SessionsSummary(store.list_sessions)
    assert summary.reads == 0  # nothing read before it is asked for
    assert (await summary.current()).count == 1
    store.count = 2
    for _ in range(100):
        assert (await summary.current()).count == 1
    assert store.reads == 1
    await summary.aclose()


async def test_a_change_is_read_again_in_the_background_and_changes_are_coalesced() -> None:
    store = Store()
    summary = SessionsSummary(store.list_sessions, min_interval_s=0.05)
    await summary.current()
    store.count = 7
    for _ in range(50):
        summary.stale()
    await until(lambda: store.reads >= 2)
    assert (await summary.current()).count == 7
    await asyncio.sleep(0.12)
    assert store.reads == 2  # fifty changes, one read
    summary.stale()
    await until(lambda: store.reads == 3)
    await summary.aclose()


async def test_a_change_before_the_first_read_reads_nothing() -> None:
    store = Store()
    summary = SessionsSummary(store.list_sessions)
    summary.stale()
    await asyncio.sleep(0.01)
    assert store.reads == 0
    assert (await summary.current()).count == 1
    await summary.aclose()
