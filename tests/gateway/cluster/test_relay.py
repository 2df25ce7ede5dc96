"""The relay on a real store: remote events reach the publisher exactly once and in seq order per
session, holes are filled from the event log (later events waiting for the fill), and a catch-up
after a bus loss delivers only what is missing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from gateway.cluster.relay import Relay, read_since
from sessions import EventRecord, SessionEvent, Store
from tests.gateway.cluster.conftest import commit, delta, eventually, new_session, turn


class Recorder:
    """An `EventPublisher` that keeps what it was given."""

    def __init__(self) -> None:
        self.events: list[SessionEvent] = []

    def publish(self, event: SessionEvent) -> None:
        self.events.append(event)

    def seqs(self, session_id: str) -> list[int]:
        return [e.seq for e in self.events if e.session_id == session_id]


class Log:
    """The relay's view of the store's log, with a gate a test can close to hold fills back and
    a count of failures to inject (a log that cannot be read)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.gate = asyncio.Event()
        self.gate.set()
        self.failures = 0
        self.reads: list[tuple[str, int]] = []

    async def read_after(self, session_id: str, after: int) -> list[EventRecord]:
        self.reads.append((session_id, after))
        await self.gate.wait()
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the log is unreachable")
        return await self.store.events.read(session_id, after_seq=after, limit=3)

    async def read_since(self, since_ms: int) -> list[EventRecord]:
        return await read_since(self.store.database, since_ms)


@pytest.fixture
def log(store: Store) -> Log:
    return Log(store)


@pytest.fixture
async def relay(log: Log) -> AsyncIterator[tuple[Relay, Recorder]]:
    recorder = Recorder()
    async with Relay(recorder, read_after=log.read_after, read_since=log.read_since, margin_ms=0) as opened:
        yield opened, recorder


def records(events: list[SessionEvent]) -> list[EventRecord]:
    """Events as the bus hands them over."""
    return [EventRecord(e.session_id, e.seq, e.run_id, e.name, e.log_payload(), e.ts) for e in events]


async def stored(store: Store, session_id: str, first: int, last: int) -> list[SessionEvent]:
    events = [turn(session_id, seq) for seq in range(first, last + 1)]
    await commit(store, events)
    return events


async def test_in_order_events_pass_and_duplicates_are_dropped(
    relay: tuple[Relay, Recorder], log: Log
) -> None:
    relay_, out = relay
    events = [turn("s1", seq) for seq in range(1, 5)]
    relay_.remote(records(events[:3]))
    relay_.remote(records(events[1:]))
    relay_.remote(records(events[3:]))
    assert out.seqs("s1") == [1, 2, 3, 4]
    assert out.events[0] == events[0]  # read back as the event it was
    assert relay_.duplicates == 3 and relay_.holes == 0
    assert log.reads == []


async def test_a_hole_is_filled_from_the_log_in_order(
    relay: tuple[Relay, Recorder], store: Store, log: Log
) -> None:
    relay_, out = relay
    sid = await new_session(store)
    events = await stored(store, sid, 1, 9)
    relay_.remote(records(events[:2]))
    relay_.remote(records([events[7]]))  # 3..7 lost on the bus
    await eventually(lambda: relay_.filling == 0 and relay_.last_seq(sid) == 8)
    assert out.seqs(sid) == list(range(1, 9))
    relay_.remote(records(events[6:]))
    assert out.seqs(sid) == list(range(1, 10))
    assert relay_.holes == 1 and relay_.filled == 6 and relay_.duplicates == 2
    assert log.reads[0] == (sid, 2)  # pages of 3 after the last delivered


async def test_later_events_of_the_session_wait_for_the_fill(
    relay: tuple[Relay, Recorder], store: Store, log: Log
) -> None:
    relay_, out = relay
    sid, other = await new_session(store), await new_session(store)
    events = await stored(store, sid, 1, 7)
    relay_.remote(records(events[:2]))
    log.gate.clear()
    relay_.remote(records([events[4]]))
    relay_.remote(records([events[5]]))
    relay_.remote(records([turn(other, 1)]))  # another session is not held up
    await asyncio.sleep(0.05)
    assert out.seqs(sid) == [1, 2]
    assert out.seqs(other) == [1]

    log.gate.set()
    relay_.remote(records([events[6]]))
    await eventually(lambda: out.seqs(sid) == list(range(1, 8)), what="the fill")
    await eventually(lambda: relay_.filling == 0)
    assert out.seqs(sid) == list(range(1, 8))


async def test_events_the_log_no_longer_holds_are_skipped(
    relay: tuple[Relay, Recorder], store: Store, log: Log
) -> None:
    relay_, out = relay
    sid = await new_session(store)
    events = [turn(sid, 1), delta(sid, 2), delta(sid, 3), turn(sid, 4), delta(sid, 5), turn(sid, 6)]
    await commit(store, events)
    await store.events.prune(sid, before_seq=6, types=["message.delta"])
    relay_.remote(records(events[:1]))
    relay_.remote(records(events[5:]))
    await eventually(lambda: relay_.filling == 0 and relay_.last_seq(sid) == 6)
    assert out.seqs(sid) == [1, 4, 6]


async def test_a_fill_whose_reads_fail_waits_for_the_next_event(
    relay: tuple[Relay, Recorder], store: Store, log: Log
) -> None:
    relay_, out = relay
    sid = await new_session(store)
    events = await stored(store, sid, 1, 5)
    relay_.remote(records(events[:1]))
    log.failures = 3
    relay_.remote(records([events[3]]))
    await eventually(lambda: relay_.filling == 0, what="the fill giving up")
    assert out.seqs(sid) == [1]
    assert relay_.failed_reads == 3

    relay_.remote(records([events[4]]))
    await eventually(lambda: out.seqs(sid) == [1, 2, 3, 4, 5], what="the second fill")


async def test_a_parked_fill_starts_again_on_an_event_that_continues_the_last(
    relay: tuple[Relay, Recorder], store: Store, log: Log
) -> None:
    relay_, out = relay
    sid = await new_session(store)
    events = await stored(store, sid, 1, 4)
    relay_.remote(records(events[:1]))
    log.failures = 3
    relay_.remote(records([events[3]]))
    await eventually(lambda: relay_.filling == 0, what="the fill giving up")
    relay_.remote(records([events[1]]))  # 2 arrives late; 4 still waits for 3
    await eventually(lambda: out.seqs(sid) == [1, 2, 3, 4], what="the fill")


async def test_local_events_move_the_last_seq_without_publishing(relay: tuple[Relay, Recorder]) -> None:
    relay_, out = relay
    relay_.remote(records([turn("s1", 1), turn("s1", 2)]))
    relay_.local(turn("s1", 3))  # this node took the session over
    relay_.local(turn("s1", 4))
    relay_.remote(records([turn("s1", 3), turn("s1", 4), turn("s1", 5)]))
    assert out.seqs("s1") == [1, 2, 5]
    assert relay_.last_seq("s1") == 5


async def test_catch_up_delivers_only_what_is_missing(relay: tuple[Relay, Recorder], store: Store) -> None:
    relay_, out = relay
    followed, unseen, mine = await new_session(store), await new_session(store), await new_session(store)
    followed_events = await stored(store, followed, 1, 3)
    relay_.remote(records(followed_events[:2]))
    for event in await stored(store, mine, 1, 2):
        relay_.local(event)
    since = (await store.events.read(followed, after_seq=2))[0].created_at

    # The bus is lost; meanwhile the log goes on.
    await stored(store, followed, 4, 6)
    await stored(store, unseen, 1, 2)
    await stored(store, mine, 3, 3)  # committed here, not yet handed to `local`
    await relay_.catch_up(since)
    await eventually(lambda: relay_.filling == 0)

    assert out.seqs(followed) == [1, 2, 3, 4, 5, 6]
    assert out.seqs(unseen) == [1, 2]
    assert out.seqs(mine) == []
    count = len(out.events)
    await relay_.catch_up(since)
    assert len(out.events) == count


async def test_catch_up_restarts_a_parked_fill(relay: tuple[Relay, Recorder], store: Store, log: Log) -> None:
    relay_, out = relay
    sid = await new_session(store)
    events = await stored(store, sid, 1, 4)
    relay_.remote(records(events[:1]))
    log.failures = 3
    relay_.remote(records([events[3]]))
    await eventually(lambda: relay_.filling == 0, what="the fill giving up")
    await relay_.catch_up(10**13)  # nothing new in the log: the parked fill starts again all the same
    await eventually(lambda: out.seqs(sid) == [1, 2, 3, 4], what="the fill")


async def test_read_since_returns_every_session_from_a_time(store: Store) -> None:
    first, second = await new_session(store), await new_session(store)
    await stored(store, first, 1, 2)
    since = (await store.events.read(first))[-1].created_at + 1
    while int(time.time() * 1000) < since:
        await asyncio.sleep(0.002)
    await stored(store, second, 1, 2)
    await stored(store, first, 3, 3)

    found = await read_since(store.database, since)
    assert sorted((r.session_id, r.seq) for r in found) == sorted([(second, 1), (second, 2), (first, 3)])
    assert [(r.session_id, r.seq) for r in found] == sorted((r.session_id, r.seq) for r in found)
    assert found[0].payload["turnIndex"] == found[0].seq
    assert len(await read_since(store.database, 0, limit=2)) == 2


async def test_sessions_are_forgotten_oldest_first(log: Log) -> None:
    out = Recorder()
    async with Relay(out, read_after=log.read_after, read_since=log.read_since, max_sessions=2) as relay_:
        for sid in ("a", "b", "c"):
            relay_.remote(records([turn(sid, 1)]))
        assert relay_.sessions == 2
        assert relay_.last_seq("a") is None and relay_.last_seq("c") == 1
