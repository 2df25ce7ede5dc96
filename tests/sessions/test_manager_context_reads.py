"""How much of a session's transcript the manager reads. A run reads its context, and a
compaction what it summarises; neither may read the history an earlier compaction replaced, or
every run of a long-lived session costs more than the last one."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from msgspec.structs import replace

from agent_core import AssistantMessage, TextContent, UserMessage
from sessions.context import SUMMARY_PREFIX
from sessions.manager import SessionManager
from sessions.records import ContextEntry, EntryRecord
from sessions.store import NewEntry, Store
from sessions.transcripts import Transcripts
from tests.sessions.manager_support import FAST, Directory, Recorder, StreamLog


class CountingTranscripts(Transcripts):
    """The store's transcript area, counting the entries it hands out through every method
    that returns entries."""

    entries_read = 0

    def _count(self, found: Sequence[Any]) -> None:
        self.entries_read += len(found)

    async def read(self, session_id: str) -> list[EntryRecord]:
        found = await super().read(session_id)
        self._count(found)
        return found

    async def context_entries(self, session_id: str) -> list[ContextEntry]:
        found = await super().context_entries(session_id)
        self._count(found)
        return found

    async def own_entries(
        self, session_id: str, after_position: int = 0, limit: int | None = None
    ) -> list[EntryRecord]:
        found = await super().own_entries(session_id, after_position, limit)
        self._count(found)
        return found

    async def get_entry(self, entry_id: str) -> EntryRecord | None:
        found = await super().get_entry(entry_id)
        self._count([found] if found is not None else [])
        return found


@pytest.fixture
async def counting(
    store_url: str,
) -> AsyncIterator[tuple[Store, CountingTranscripts, SessionManager, StreamLog]]:
    log = StreamLog()
    async with Store.open(store_url) as store:
        counter = CountingTranscripts(store.database, lambda: time.time_ns() // 1_000_000)
        store.transcript = counter
        manager = SessionManager(
            store,
            directory=Directory(),
            publisher=Recorder(),
            settings=replace(FAST, compaction_keep_recent_tokens=5),
            stream_fn=log,
        )
        await manager.start()
        try:
            yield store, counter, manager, log
        finally:
            await manager.aclose(grace_s=0.0)


def _message(role: str, text: str) -> NewEntry:
    if role == "user":
        return NewEntry(kind="message", payload=UserMessage(content=[TextContent(text=text)]).dump())
    message = AssistantMessage(content=[TextContent(text=text)], api="faux", provider="faux", model="echo")
    return NewEntry(kind="message", payload=message.dump())


async def _compacted(store: Store, manager: SessionManager, key: str, history: int) -> str:
    """A session with `history` old messages that a compaction replaced by a summary, keeping
    the last question and answer."""
    session = await manager.ensure_session(key)
    old = [_message("user" if i % 2 == 0 else "assistant", f"old {i}") for i in range(history)]
    for start in range(0, len(old), 200):
        await store.transcript.append(session.id, old[start : start + 200])
    kept, _ = await store.transcript.append(
        session.id, [_message("user", "kept question"), _message("assistant", "kept answer")]
    )
    payload = {"summary": "what came before", "firstKeptEntryId": kept.id, "tokensBefore": 1000}
    await store.transcript.append(session.id, [NewEntry(kind="compaction", payload=payload)])
    return session.id


async def test_a_run_reads_its_context_and_not_the_history_a_compaction_replaced(
    counting: tuple[Store, CountingTranscripts, SessionManager, StreamLog],
) -> None:
    store, counter, manager, log = counting
    read: dict[int, int] = {}
    for history in (20, 1_000):
        session_id = await _compacted(store, manager, f"agent:main:h{history}", history)
        session = await manager.get(session_id=session_id)
        counter.entries_read = 0
        await manager.submit(session=session, message="new question", idempotency_key=f"q-{history}")
        outcome = await manager.wait_run(f"q-{history}", 15)
        assert outcome is not None and outcome["status"] == "ok"
        read[history] = counter.entries_read
        assert log.contexts(session_id)[-1] == [
            ("user", SUMMARY_PREFIX + "what came before\n</summary>"),
            ("user", "kept question"),
            ("assistant", "kept answer"),
            ("user", "new question"),
        ]
    # The compaction entry and the two kept messages, however long the history before them.
    assert read[1_000] == read[20] == 3


async def test_a_compaction_reads_what_it_summarises_and_not_what_an_earlier_one_replaced(
    counting: tuple[Store, CountingTranscripts, SessionManager, StreamLog],
) -> None:
    store, counter, manager, _ = counting
    read: dict[int, int] = {}
    for history in (20, 1_000):
        session_id = await _compacted(store, manager, f"agent:main:c{history}", history)
        await store.transcript.append(
            session_id,
            [_message("user", "newer question"), _message("assistant", "newer answer with more words")],
        )
        counter.entries_read = 0
        result = await manager.compact(session_id)
        read[history] = counter.entries_read
        newest = (await store.transcript.read(session_id))[-1]
        assert newest.kind == "compaction" and newest.payload["summary"] == result.summary
        assert result.summary.startswith("echo: Earlier summary (update it with what follows):")
    assert read[1_000] == read[20] == 5
