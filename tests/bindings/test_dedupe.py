"""`EventOnce`: an event id is remembered only once its event is handled."""

from __future__ import annotations

import asyncio

import pytest

from bindings.dedupe import EventOnce
from tests.bindings.memory_host import MemoryHost


def gate(host: MemoryHost) -> EventOnce:
    return EventOnce(host, "slack", "default", ttl_s=60)


async def test_a_handled_event_is_a_duplicate_afterwards_until_it_expires() -> None:
    now = [1000.0]
    host = MemoryHost(clock=lambda: now[0])
    once = gate(host)
    calls: list[str] = []

    async def handle() -> str:
        calls.append("ran")
        return "submitted"

    assert await once.run("e1", handle, done=lambda _: True) == "submitted"
    assert await once.run("e1", handle, done=lambda _: True) is None
    assert await gate(host).run("e1", handle, done=lambda _: True) is None  # durable, not per object
    now[0] += 61
    assert await once.run("e1", handle, done=lambda _: True) == "submitted"
    assert calls == ["ran", "ran"]


async def test_an_event_not_done_or_failed_is_not_remembered() -> None:
    host = MemoryHost()
    once = gate(host)

    async def rejected() -> str:
        return "rejected"

    async def crashes() -> str:
        raise RuntimeError("the process died here")

    assert await once.run("e1", rejected, done=lambda o: o != "rejected") == "rejected"
    with pytest.raises(RuntimeError):
        await once.run("e1", crashes, done=lambda _: True)
    assert not await host.dedupe_seen("slack", "default", "e1")
    assert once.in_flight == 0


async def test_a_second_delivery_waits_for_the_first_and_takes_over_when_it_fails() -> None:
    host = MemoryHost()
    once = gate(host)
    release = asyncio.Event()
    runs: list[str] = []

    async def slow(outcome: str) -> str:
        runs.append(outcome)
        await release.wait()
        return outcome

    first = asyncio.create_task(once.run("e1", lambda: slow("rejected"), done=lambda o: o != "rejected"))
    await asyncio.sleep(0)
    second = asyncio.create_task(once.run("e1", lambda: slow("submitted"), done=lambda o: o != "rejected"))
    third = asyncio.create_task(once.run("e1", lambda: slow("submitted"), done=lambda o: o != "rejected"))
    await asyncio.sleep(0.05)
    assert runs == ["rejected"]  # the others wait for the one in flight
    release.set()
    results = await asyncio.gather(first, second, third)
    assert results[0] == "rejected"
    assert sorted(map(str, results[1:])) == ["None", "submitted"]  # one took over, one was a duplicate
    assert runs == ["rejected", "submitted"]
