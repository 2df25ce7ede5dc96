"""`Store.transcript.message_page`: a page of a session's history is the same slice of message
entries as the whole transcript gives (branches included, other entry kinds left out), and only
the page's rows are read from the database."""

from __future__ import annotations

from typing import Any

import pytest

from sessions import _store_rows
from sessions.errors import NotFound
from sessions.store import NewEntry, Store


def message(text: str) -> NewEntry:
    return NewEntry(kind="message", payload={"role": "user", "content": text})


async def test_pages_of_a_branch_match_slices_of_its_whole_transcript(store: Store) -> None:
    tree = store.tree
    root = await tree.create_session(agent_id="main", key="agent:main:page")
    first = await store.transcript.append(root.id, [message(f"r{i}") for i in range(5)])
    await store.transcript.append(root.id, [NewEntry(kind="custom", payload={"x": 1}), message("r5")])
    branch = await tree.branch(root.id, at_entry_id=first[3].id, key="agent:main:page:b")
    await store.transcript.append(branch.id, [message("b0"), NewEntry(kind="label", payload={"l": 1})])
    await store.transcript.append(branch.id, [message("b1"), message("b2")])

    whole = [e.payload["content"] for e in await store.transcript.read(branch.id) if e.kind == "message"]
    assert whole == ["r0", "r1", "r2", "r3", "b0", "b1", "b2"]
    for skip in range(len(whole) + 2):
        for limit in (1, 2, 3, 10):
            page, total = await store.transcript.message_page(branch.id, skip=skip, limit=limit)
            end = max(0, len(whole) - skip)
            assert [e.payload["content"] for e in page] == whole[max(0, end - limit) : end], (skip, limit)
            assert total == len(whole)
    with pytest.raises(NotFound):
        await store.transcript.message_page("no-such-session", skip=0, limit=1)


async def test_only_the_page_is_read(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    session = await store.tree.create_session(agent_id="main", key="agent:main:big")
    await store.transcript.append(session.id, [message("x" * 1_000_000), message("small")])
    built: list[str] = []
    original = _store_rows.entry_record

    def entry_record(row: Any) -> Any:
        record = original(row)
        built.append(record.payload["content"][:10])
        return record

    monkeypatch.setattr(_store_rows, "entry_record", entry_record)
    page, total = await store.transcript.message_page(session.id, skip=0, limit=1)
    assert [e.payload["content"] for e in page] == ["small"] and total == 2
    assert built == ["small"], "rows outside the page were read"
