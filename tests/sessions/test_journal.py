"""The journal: durable, ordered, published after commit; a refused item fails alone."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import pytest

from sessions.errors import SeqConflict, StoreUnavailable
from sessions.event_payloads import AgentStarted, EventPayload, MessageDelta, StatusChanged
from sessions.journal import Journal, JournalItem
from sessions.records import JSONObject
from sessions.schema import SessionStatus
from sessions.session_events import SessionEvent
from sessions.store import BatchItem, NewEntry, Store
from tests.sessions.manager_support import Recorder


def event(session_id: str, seq: int, data: EventPayload | None = None) -> SessionEvent:
    delta = MessageDelta(message_id="m1", content_index=0, kind="text", delta=str(seq))
    return SessionEvent(session_id, seq, data or delta)


class Flaky:
    """A store whose commits fail `failures` times with StoreUnavailable, or wait for `gate`."""

    def __init__(self, store: Store, failures: int = 0, gate: asyncio.Event | None = None) -> None:
        self.store = store
        self.failures = failures
        self.gate = gate
        self.calls = 0

    async def commit_batch(self, items: Sequence[BatchItem]) -> None:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable("database is locked")
        await self.store.commit_batch(items)


async def _sessions(store: Store, count: int) -> list[str]:
    return [(await store.tree.create_session(agent_id="main", key=f"k{n}")).id for n in range(count)]


async def test_items_are_committed_in_order_then_published(store: Store) -> None:
    a, b = await _sessions(store, 2)
    recorder = Recorder()
    journal = Journal(store, recorder)
    await journal.start()
    for seq in range(1, 51):
        for sid in (a, b):
            entries = (
                [NewEntry(kind="message", payload={"role": "user", "content": f"m{seq}"})]
                if seq % 10 == 0
                else []
            )
            await journal.append(JournalItem(sid, entries=entries, events=[event(sid, seq)]))
    assert journal.pending_for(a) > 0
    await journal.flush()
    assert journal.pending == 0 and journal.pending_for(a) == 0
    for sid in (a, b):
        stored = await store.events.read(sid, limit=1000)
        assert [e.seq for e in stored] == list(range(1, 51))
        assert [e.seq for e in recorder.of(sid)] == list(range(1, 51))
        assert [e.payload["content"] for e in await store.transcript.own_entries(sid)] == [
            f"m{n}" for n in range(10, 51, 10)
        ]
    assert journal.commits < 100  # many items share a commit
    await journal.aclose()


async def test_a_refused_item_fails_alone_and_the_writer_goes_on(store: Store) -> None:
    a, b = await _sessions(store, 2)
    recorder = Recorder()
    journal = Journal(store, recorder)
    await journal.start()
    await journal.append(JournalItem(a, events=[event(a, 1)]))
    bad = journal.commit(JournalItem(a, events=[event(a, 7)]))  # not contiguous
    await journal.append(JournalItem(b, events=[event(b, 1)]))
    with pytest.raises(SeqConflict):
        await bad
    await journal.commit(JournalItem(a, events=[event(a, 2)]))
    assert [e.seq for e in await store.events.read(a)] == [1, 2]
    assert [e.seq for e in await store.events.read(b)] == [1]
    assert [(e.session_id, e.seq) for e in recorder.events] == [(a, 1), (b, 1), (a, 2)]
    await journal.aclose()


async def test_an_unavailable_store_is_retried_until_it_commits(store: Store) -> None:
    (a,) = await _sessions(store, 1)
    flaky = Flaky(store, failures=2)
    recorder = Recorder()
    journal = Journal(cast(Store, flaky), recorder)
    await journal.start()
    await asyncio.wait_for(journal.commit(JournalItem(a, events=[event(a, 1), event(a, 2)])), 5)
    assert flaky.calls == 3
    assert [e.seq for e in await store.events.read(a)] == [1, 2]
    assert [e.seq for e in recorder.events] == [1, 2]
    await journal.aclose()


async def test_a_full_journal_makes_producers_wait(store: Store) -> None:
    (a,) = await _sessions(store, 1)
    gate = asyncio.Event()
    journal = Journal(cast(Store, Flaky(store, gate=gate)), Recorder(), max_pending=2)
    await journal.start()
    await journal.append(JournalItem(a, events=[event(a, 1)]))
    await journal.append(JournalItem(a, events=[event(a, 2)]))
    third = asyncio.create_task(journal.append(JournalItem(a, events=[event(a, 3)])))
    await asyncio.sleep(0.05)
    assert not third.done() and journal.pending == 2
    gate.set()
    await asyncio.wait_for(third, 5)
    await journal.flush()
    assert [e.seq for e in await store.events.read(a)] == [1, 2, 3]
    await journal.aclose()


async def test_closing_commits_what_is_queued_then_refuses(store: Store) -> None:
    (a,) = await _sessions(store, 1)
    recorder = Recorder()
    journal = Journal(store, recorder)
    await journal.start()
    for seq in range(1, 6):
        await journal.append(JournalItem(a, events=[event(a, seq)]))
    await journal.aclose()
    assert [e.seq for e in await store.events.read(a)] == [1, 2, 3, 4, 5]
    assert len(recorder.events) == 5
    with pytest.raises(StoreUnavailable):
        await journal.append(JournalItem(a, events=[event(a, 6)]))
    await journal.aclose()  # idempotent


async def test_session_fields_change_with_the_events(store: Store) -> None:
    (a,) = await _sessions(store, 1)
    journal = Journal(store, Recorder())
    await journal.start()
    item: dict[str, Any] = {"status": "running"}
    running = event(a, 1, StatusChanged(SessionStatus.RUNNING))
    await journal.commit(JournalItem(a, events=[running], session_fields=item))
    record = await store.tree.get_session(a)
    assert record is not None and record.status == "running" and record.last_seq == 1
    await journal.aclose()


async def _until(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


async def test_items_within_a_tick_of_a_commit_wait_and_share_the_next(store: Store) -> None:
    (a,) = await _sessions(store, 1)
    recorder = Recorder()
    journal = Journal(store, recorder, tick_s=60.0)
    await journal.start()
    await journal.commit(JournalItem(a, events=[event(a, 1)]))  # nothing committed for a tick: at once
    for seq in range(2, 12):
        await journal.append(JournalItem(a, events=[event(a, seq)]))
        await asyncio.sleep(0.01)  # every chance to commit; the tick holds the writer back
    assert journal.pending_for(a) == 10 and [e.seq for e in recorder.events] == [1]
    await journal.flush()  # a waiting producer does not wait for the tick
    assert [e.seq for e in await store.events.read(a)] == list(range(1, 12))
    assert [e.seq for e in recorder.events] == list(range(1, 12))
    assert journal.commits == 2
    await journal.aclose()


async def test_a_full_batch_is_committed_without_waiting_for_the_tick(store: Store) -> None:
    (a,) = await _sessions(store, 1)
    recorder = Recorder()
    journal = Journal(store, recorder, tick_s=60.0, max_batch=5)
    await journal.start()
    await journal.commit(JournalItem(a, events=[event(a, 1)]))
    for seq in range(2, 6):
        await journal.append(JournalItem(a, events=[event(a, seq)]))
    await asyncio.sleep(0.05)
    assert journal.pending == 4  # short of a batch: waits for the tick
    await journal.append(JournalItem(a, events=[event(a, 6)]))
    await _until(lambda: journal.pending == 0)
    assert [e.seq for e in recorder.events] == list(range(1, 7)) and journal.commits == 2
    await journal.aclose()


DUMPS: list[str] = []


@dataclass(frozen=True, slots=True)
class CountedDelta(MessageDelta):
    """A delta that counts how often its payload is turned into JSON fields."""

    def dump(self) -> JSONObject:
        DUMPS.append(self.delta)
        return MessageDelta.dump(self)


async def test_each_payload_is_encoded_once_and_published_with_its_text(store: Store) -> None:
    (a,) = await _sessions(store, 1)
    recorder = Recorder()
    journal = Journal(store, recorder)
    await journal.start()
    DUMPS.clear()
    counted = CountedDelta(message_id="m1", content_index=0, kind="text", delta='héllo "wörld"')
    events = [
        SessionEvent(a, 1, counted, run_id="r1", session_key="agent:main:k0"),
        SessionEvent(a, 2, AgentStarted(), run_id="r1"),
    ]
    await journal.commit(JournalItem(a, events=events))
    published = recorder.events[0]
    text = published.data_json()  # what the gateway reuses: no second encoding
    assert DUMPS == ['héllo "wörld"']
    assert json.loads(text) == counted.dump() and recorder.events[1].data_json() == "{}"
    stored = await store.events.read(a)
    assert [(e.type, e.payload) for e in stored] == [(e.name, e.log_payload()) for e in events]
    await journal.aclose()
