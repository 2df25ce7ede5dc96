from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from sessions._direct_write import DirectWrite
from sessions._sqlite_direct import PAGE_CACHE_KIB
from sessions.errors import (
    Conflict,
    InvalidRequest,
    InvalidTransition,
    KeyConflict,
    NotFound,
    SeqConflict,
    SessionsError,
    StoreClosed,
    StoreError,
    StoreUnavailable,
)
from sessions.ids import id_time_ms, new_id
from sessions.store import NewEntry, NewEvent, SessionRecord, Store, default_url, open_database


def msg(text: str) -> NewEntry:
    return NewEntry("message", {"role": "user", "content": text})


def texts(entries: list[Any]) -> list[str]:
    return [e.payload["content"] for e in entries]


async def seeded(store: Store, count: int, *, key: str | None = None, prefix: str = "m") -> SessionRecord:
    session = await store.tree.create_session(agent_id="main", key=key)
    if count:
        await store.transcript.append(session.id, [msg(f"{prefix}{i}") for i in range(1, count + 1)])
    return session


@contextmanager
def statements(store: Store) -> Iterator[list[str]]:
    """Every SQL statement the store sends while the block runs."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(" ".join(statement.split()).upper())

    engines = [engine.sync_engine for engine in store.database.engines]
    for engine in engines:
        event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", record)


# -- ids ------------------------------------------------------------------------------------------


def test_ids_are_uuid7_and_sort_in_creation_order() -> None:
    ids = [new_id() for _ in range(5000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 7 for i in ids)
    assert abs(id_time_ms(ids[0]) - id_time_ms(ids[-1])) < 5000


# -- sessions -------------------------------------------------------------------------------------


async def test_stores_built_on_one_opened_database_share_it(store_url: str) -> None:
    database = await open_database(store_url)
    store = Store(database)
    other = Store(database)  # another user of the same database, as the gateway's channel store
    created = await store.tree.create_session(agent_id="main", key="agent:main:main")
    assert await other.tree.get_session_by_key("agent:main:main") == created
    await store.aclose()  # closes the database for every user of it
    with pytest.raises(StoreClosed):
        await other.tree.get_session(created.id)


async def test_create_and_get_session(store: Store) -> None:
    created = await store.tree.create_session(
        agent_id="main",
        key="agent:main:main",
        label="hello",
        model="faux/echo",
        thinking_level="low",
        queue_mode="followup",
        origin={"channel": "discord", "channelId": "123"},
    )
    assert created.status == "idle"
    assert created.kind == "main"
    assert created.root_id == created.id
    assert created.keys == ("agent:main:main",)
    fetched = await store.tree.get_session(created.id)
    assert fetched == created
    assert await store.tree.get_session_by_key("agent:main:main") == created
    assert await store.tree.get_session(new_id()) is None
    assert await store.tree.get_session_by_key("agent:main:other") is None
    assert await store.tree.keys_of(created.id) == ["agent:main:main"]


async def test_used_key_is_refused_and_nothing_is_created(store: Store) -> None:
    first = await store.tree.create_session(agent_id="main", key="agent:main:main")
    with pytest.raises(KeyConflict) as info:
        await store.tree.create_session(agent_id="other", key="agent:main:main")
    assert info.value.session_id == first.id
    _, total = await store.tree.list_sessions()
    assert total == 1


async def test_bad_arguments_are_refused_before_writing(store: Store) -> None:
    with pytest.raises(InvalidRequest, match="session kind"):
        await store.tree.create_session(agent_id="main", kind="nonsense")
    with pytest.raises(InvalidRequest):
        await store.tree.create_session(agent_id="main", branch_point=new_id())
    with pytest.raises(InvalidRequest):
        await store.tree.create_session(agent_id="main", origin={"bad": {1, 2}})
    with pytest.raises(NotFound):
        await store.tree.create_session(agent_id="main", parent_id=new_id())
    assert (await store.tree.list_sessions())[1] == 0


async def test_list_sessions_filters_pages_and_searches(store: Store) -> None:
    ticks = iter(range(1_000, 10_000, 10))
    store = Store(store.database, clock=lambda: next(ticks))  # a steady clock: a certain update order
    a = await store.tree.create_session(
        agent_id="main", key="agent:main:discord:channel:42", label="Release plan"
    )
    b = await store.tree.create_session(agent_id="main", kind="direct", label="100% done")
    c = await store.tree.create_session(agent_id="ops", key="agent:ops:main")
    child = await store.tree.branch(a.id, label="idea")
    await store.tree.set_status(b.id, "archived")

    page, total = await store.tree.list_sessions()
    assert [s.id for s in page] == [child.id, c.id, a.id]
    assert total == 3
    assert page[2].keys == ("agent:main:discord:channel:42",)

    assert [s.id for s in (await store.tree.list_sessions(include_archived=True))[0]] == [
        b.id,
        child.id,
        c.id,
        a.id,
    ]
    assert [s.id for s in (await store.tree.list_sessions(status="archived"))[0]] == [b.id]
    assert [s.id for s in (await store.tree.list_sessions(agent_id="ops"))[0]] == [c.id]
    assert [s.id for s in (await store.tree.list_sessions(kind="branch"))[0]] == [child.id]
    assert [s.id for s in (await store.tree.list_sessions(parent_id=None))[0]] == [c.id, a.id]
    assert [s.id for s in (await store.tree.list_sessions(parent_id=a.id))[0]] == [child.id]
    assert [s.id for s in (await store.tree.list_sessions(search="RELEASE"))[0]] == [a.id]
    assert [s.id for s in (await store.tree.list_sessions(search="channel:42"))[0]] == [a.id]
    assert [s.id for s in (await store.tree.list_sessions(search="0%", include_archived=True))[0]] == [b.id]
    assert (await store.tree.list_sessions(search="%"))[1] == 0

    page, total = await store.tree.list_sessions(limit=2, offset=1)
    assert [s.id for s in page] == [c.id, a.id]
    assert total == 3


async def test_tree_lists_the_whole_tree_in_creation_order(store: Store) -> None:
    root = await seeded(store, 3, key="agent:main:main")
    first = await store.tree.branch(root.id, label="first")
    second = await store.tree.branch(root.id, label="second")
    nested = await store.tree.branch(first.id, key="k:nested")
    sub = await store.tree.create_session(agent_id="helper", kind="subagent", parent_id=second.id)
    await store.tree.set_status(first.id, "archived")
    other = await seeded(store, 1)

    for member in (root, first, nested, sub):
        tree = await store.tree.tree_of(member.id)
        assert tree.session.id == root.id
        assert [n.session.id for n in tree.walk()] == [root.id, first.id, nested.id, second.id, sub.id]
    tree = await store.tree.tree_of(sub.id)
    assert [c.session.id for c in tree.children] == [first.id, second.id]
    found = tree.find(first.id)
    assert found is not None and found.session.status == "archived"
    assert tree.find(nested.id) is not None and tree.find(nested.id).session.keys == ("k:nested",)  # type: ignore[union-attr]
    assert tree.find(other.id) is None
    with pytest.raises(NotFound):
        await store.tree.tree_of(new_id())


# -- branches and transcripts ---------------------------------------------------------------------


async def test_branch_of_branch_transcripts(store: Store) -> None:
    root = await seeded(store, 5, prefix="r")
    r = await store.transcript.own_entries(root.id)
    b = await store.tree.branch(root.id, at_entry_id=r[2].id)
    await store.transcript.append(b.id, [msg("b1"), msg("b2")])
    c = await store.tree.branch(b.id)
    await store.transcript.append(c.id, [msg("c1")])
    d = await store.tree.branch(b.id, at_entry_id=r[1].id)
    e = await store.tree.branch(d.id)
    f = await store.tree.branch(c.id, at_entry_id=(await store.transcript.own_entries(b.id))[0].id)

    assert texts(await store.transcript.read(root.id)) == ["r1", "r2", "r3", "r4", "r5"]
    assert texts(await store.transcript.read(b.id)) == ["r1", "r2", "r3", "b1", "b2"]
    assert texts(await store.transcript.read(c.id)) == ["r1", "r2", "r3", "b1", "b2", "c1"]
    assert texts(await store.transcript.read(d.id)) == ["r1", "r2"]
    assert d.branch_point == r[1].id
    assert e.branch_point == r[1].id  # d had no entries: its last visible one is its branch point
    assert texts(await store.transcript.read(e.id)) == ["r1", "r2"]
    assert texts(await store.transcript.read(f.id)) == ["r1", "r2", "r3", "b1"]
    # Appending to an ancestor after the fork changes nothing below the branch point.
    await store.transcript.append(root.id, [msg("r6")])
    assert texts(await store.transcript.read(c.id)) == ["r1", "r2", "r3", "b1", "b2", "c1"]
    positions = [(x.session_id, x.position) for x in await store.transcript.read(c.id)]
    assert positions[3:] == [(b.id, 1), (b.id, 2), (c.id, 1)]


async def test_branch_point_must_be_in_the_transcript(store: Store) -> None:
    root = await seeded(store, 5, prefix="r")
    r = await store.transcript.own_entries(root.id)
    b = await store.tree.branch(root.id, at_entry_id=r[2].id)
    stranger = await seeded(store, 1, prefix="s")
    for entry_id in (r[3].id, (await store.transcript.own_entries(stranger.id))[0].id, new_id()):
        with pytest.raises(NotFound, match="not in the transcript"):
            await store.tree.branch(b.id, at_entry_id=entry_id)
        with pytest.raises(NotFound):
            await store.tree.create_session(agent_id="main", parent_id=b.id, branch_point=entry_id)
    with pytest.raises(NotFound):
        await store.tree.branch(new_id())
    assert len((await store.tree.tree_of(root.id)).children) == 1


async def test_subagent_without_branch_point_sees_only_its_own_entries(store: Store) -> None:
    parent = await seeded(store, 3)
    sub = await store.tree.create_session(agent_id="helper", kind="subagent", parent_id=parent.id)
    await store.transcript.append(sub.id, [msg("task")])
    assert sub.branch_point is None
    assert texts(await store.transcript.read(sub.id)) == ["task"]
    empty = await store.tree.create_session(agent_id="main")
    assert await store.transcript.read(empty.id) == []
    assert (await store.tree.branch(empty.id)).branch_point is None
    with pytest.raises(NotFound):
        await store.transcript.read(new_id())


async def test_branch_inherits_settings(store: Store) -> None:
    source = await store.tree.create_session(
        agent_id="coder",
        key="agent:coder:main",
        model="faux/echo",
        thinking_level="high",
        queue_mode="steer",
        origin={"channel": "slack"},
    )
    await store.transcript.append(source.id, [msg("x")])
    branch = await store.tree.branch(source.id, key="agent:coder:branch", label="try")
    assert (branch.agent_id, branch.model, branch.thinking_level, branch.queue_mode) == (
        "coder",
        "faux/echo",
        "high",
        "steer",
    )
    assert branch.origin == {"channel": "slack"}
    assert (branch.kind, branch.label, branch.parent_id, branch.root_id) == (
        "branch",
        "try",
        source.id,
        source.id,
    )
    assert branch.keys == ("agent:coder:branch",)
    assert (await store.tree.get_session(source.id)) is not None
    with pytest.raises(KeyConflict):
        await store.tree.branch(source.id, key="agent:coder:main")


async def test_branch_copies_nothing_and_costs_the_same_for_any_length(store: Store) -> None:
    short = await seeded(store, 10)
    long = await seeded(store, 2000)
    long_child = await store.tree.branch((await store.tree.branch(long.id)).id)  # a branch of a branch of it

    async def measured(source: SessionRecord, at: str | None) -> int:
        with statements(store) as seen:
            made = await store.tree.branch(source.id, at_entry_id=at)
        assert not [s for s in seen if s.startswith("INSERT INTO ENTRIES")]
        assert await store.transcript.count_own(made.id) == 0
        return len(seen)

    # Default branch point (the last entry): the same statements whatever the length.
    assert await measured(short, None) == await measured(long, None)
    # An explicit branch point is checked against the transcript without reading it.
    first_short = (await store.transcript.own_entries(short.id, limit=1))[0].id
    first_long = (await store.transcript.own_entries(long.id, limit=1))[0].id
    costs = {await measured(short, first_short), await measured(long, first_long)}
    costs.add(await measured(long_child, first_long))
    assert len(costs) == 1
    assert len(await store.transcript.read(long_child.id)) == 2000


async def test_transcript_takes_a_fixed_number_of_queries(store: Store) -> None:
    session = await seeded(store, 20)
    for _ in range(6):
        session = await store.tree.branch(session.id)
        await store.transcript.append(session.id, [msg("x"), msg("y")])
    with statements(store) as seen:
        entries = await store.transcript.read(session.id)
    assert len(entries) == 32
    assert len([s for s in seen if s.startswith(("SELECT", "WITH"))]) == 2


# -- keys, reset, delete, settings, status --------------------------------------------------------


async def test_switch_key_creates_or_moves_the_key(store: Store) -> None:
    main = await seeded(store, 2, key="agent:main:main")
    alt = await store.tree.branch(main.id)
    assert await store.tree.switch_key("agent:main:main", alt.id) == main.id
    assert (await store.tree.get_session_by_key("agent:main:main")).id == alt.id  # type: ignore[union-attr]
    assert await store.tree.keys_of(main.id) == []
    assert await store.tree.switch_key("agent:main:new", main.id) is None
    assert await store.tree.keys_of(main.id) == ["agent:main:new"]
    with pytest.raises(NotFound):
        await store.tree.switch_key("agent:main:main", new_id())
    assert (await store.tree.get_session_by_key("agent:main:main")).id == alt.id  # type: ignore[union-attr]


async def test_reset_starts_a_new_session_and_archives_the_old(store: Store) -> None:
    old = await store.tree.create_session(
        agent_id="main", key="agent:main:main", kind="direct", model="faux/echo", queue_mode="collect"
    )
    await store.transcript.append(old.id, [msg("before")])
    child = await store.tree.branch(old.id)
    fresh = await store.tree.reset("agent:main:main")
    assert fresh.id != old.id
    assert (fresh.agent_id, fresh.kind, fresh.model, fresh.queue_mode) == (
        "main",
        "direct",
        "faux/echo",
        "collect",
    )
    assert (fresh.parent_id, fresh.root_id, fresh.keys) == (None, fresh.id, ("agent:main:main",))
    assert await store.transcript.read(fresh.id) == []
    previous = await store.tree.get_session(old.id)
    assert previous is not None and previous.status == "archived" and previous.keys == ()
    assert texts(await store.transcript.read(old.id)) == ["before"]
    assert [n.session.id for n in (await store.tree.tree_of(old.id)).walk()] == [old.id, child.id]
    listed = [s.id for s in (await store.tree.list_sessions(include_archived=True))[0]]
    assert old.id in listed and fresh.id in listed

    kept = await store.tree.reset("agent:main:main", archive_old=False)
    assert kept.kind == "direct"
    assert (await store.tree.get_session(fresh.id)).status == "idle"  # type: ignore[union-attr]
    assert (await store.tree.get_session_by_key("agent:main:main")).id == kept.id  # type: ignore[union-attr]
    with pytest.raises(NotFound):
        await store.tree.reset("agent:main:unknown")
    # A key switched to a branch resets to a session of the kind its conversation started as.
    await store.transcript.append(kept.id, [msg("x")])
    await store.tree.switch_key("agent:main:main", (await store.tree.branch(kept.id)).id)
    assert (await store.tree.reset("agent:main:main")).kind == "direct"


async def test_reset_refuses_a_running_session_and_changes_nothing(store: Store) -> None:
    old = await store.tree.create_session(agent_id="main", key="k")
    await store.tree.set_status(old.id, "running")
    with pytest.raises(InvalidTransition):
        await store.tree.reset("k")
    assert (await store.tree.get_session_by_key("k")).id == old.id  # type: ignore[union-attr]
    assert (await store.tree.list_sessions(include_archived=True))[1] == 1


async def test_delete_session_removes_everything_it_owns(store: Store) -> None:
    root = await seeded(store, 2, key="k:root")
    child = await store.tree.branch(root.id, key="k:child")
    grandchild = await store.tree.branch(child.id)
    await store.transcript.append(child.id, [msg("c")])
    await store.events.append(child.id, [NewEvent(1, "x", {})])
    await store.runs.create("run-c", child.id)
    await store.inputs.record("in-c", session_id=child.id, payload={"text": "hi"})
    child_entry = (await store.transcript.own_entries(child.id))[0]
    unrelated = await seeded(store, 1, key="k:other")

    with pytest.raises(Conflict, match="descendant"):
        await store.tree.delete_session(child.id)
    assert await store.tree.delete_session(child.id, cascade=True) == 2
    for gone in (child.id, grandchild.id):
        assert await store.tree.get_session(gone) is None
    assert await store.transcript.get_entry(child_entry.id) is None
    assert await store.runs.get("run-c") is None
    assert await store.inputs.get("in-c") is None
    assert await store.tree.get_session_by_key("k:child") is None
    assert await store.events.read(child.id) == []
    assert [n.session.id for n in (await store.tree.tree_of(root.id)).walk()] == [root.id]
    assert await store.tree.delete_session(unrelated.id) == 1
    with pytest.raises(NotFound):
        await store.tree.delete_session(unrelated.id)
    assert texts(await store.transcript.read(root.id)) == ["m1", "m2"]


async def test_update_session_changes_only_given_settings(store: Store) -> None:
    session = await store.tree.create_session(agent_id="main", label="a", model="m1", origin={"x": 1})
    updated = await store.tree.update_session(session.id, label="b", thinking_level="high")
    assert (updated.label, updated.model, updated.thinking_level, updated.origin) == (
        "b",
        "m1",
        "high",
        {"x": 1},
    )
    cleared = await store.tree.update_session(session.id, model=None, origin=None)
    assert (cleared.label, cleared.model, cleared.origin) == ("b", None, None)
    assert await store.tree.get_session(session.id) == cleared
    with pytest.raises(NotFound):
        await store.tree.update_session(new_id(), label="x")


async def test_status_transitions_are_guarded(store: Store) -> None:
    session = await store.tree.create_session(agent_id="main")
    assert (await store.tree.set_status(session.id, "running")).status == "running"
    with pytest.raises(InvalidTransition) as info:
        await store.tree.set_status(session.id, "archived")
    assert info.value.current == "running"
    assert info.value.expected == {"idle", "interrupted"}
    assert "expected idle or interrupted" in str(info.value)
    await store.tree.set_status(session.id, "interrupted")
    with pytest.raises(InvalidTransition, match="expected idle"):
        await store.tree.set_status(session.id, "running", expected={"idle"})
    assert (await store.tree.get_session(session.id)).status == "interrupted"  # type: ignore[union-attr]
    await store.tree.set_status(session.id, "idle", expected={"interrupted", "running"})
    await store.tree.set_status(session.id, "archived")
    await store.tree.set_status(session.id, "idle")
    with pytest.raises(InvalidRequest):
        await store.tree.set_status(session.id, "sleeping")
    with pytest.raises(NotFound):
        await store.tree.set_status(new_id(), "running")


async def test_add_usage_accumulates(store: Store) -> None:
    session = await store.tree.create_session(agent_id="main")
    await store.tree.add_usage(session.id, input=100, output=20, total=120, cost=0.25)
    await store.tree.add_usage(session.id, 1, 2, 3, 0.5)
    record = await store.tree.get_session(session.id)
    assert record is not None
    assert (record.input_tokens, record.output_tokens, record.total_tokens) == (101, 22, 123)
    assert record.cost == pytest.approx(0.75)
    with pytest.raises(NotFound):
        await store.tree.add_usage(new_id(), 1, 1, 1, 0.0)


# -- entries --------------------------------------------------------------------------------------


async def test_append_entries_assigns_positions(store: Store) -> None:
    session = await store.tree.create_session(agent_id="main")
    first = await store.transcript.append(session.id, [msg("a"), msg("b")])
    given = new_id()
    second = await store.transcript.append(
        session.id,
        [
            NewEntry(
                "compaction", {"summary": "s", "firstKeptEntryId": first[1].id, "tokensBefore": 900}, id=given
            ),
            msg("c"),
        ],
    )
    assert [e.position for e in first + second] == [1, 2, 3, 4]
    assert second[0].id == given and second[0].kind == "compaction"
    assert await store.transcript.get_entry(given) == second[0]
    assert await store.transcript.own_entries(session.id) == first + second
    assert await store.transcript.own_entries(session.id, after_position=1, limit=2) == [first[1], second[0]]
    assert await store.transcript.count_own(session.id) == 4
    assert (await store.tree.get_session(session.id)).entry_count == 4  # type: ignore[union-attr]
    assert await store.transcript.append(session.id, []) == []
    assert await store.transcript.get_entry(new_id()) is None


async def test_append_entries_is_all_or_nothing(store: Store) -> None:
    session = await seeded(store, 2)
    taken = (await store.transcript.own_entries(session.id))[0].id
    with pytest.raises(Conflict):
        await store.transcript.append(session.id, [msg("new"), NewEntry("message", {"x": 1}, id=taken)])
    with pytest.raises(InvalidRequest):
        await store.transcript.append(session.id, [msg("new"), NewEntry("bogus", {})])
    with pytest.raises(NotFound):
        await store.transcript.append(new_id(), [msg("x")])
    with pytest.raises(NotFound):
        await store.transcript.own_entries(new_id())
    assert await store.transcript.count_own(session.id) == 2
    assert [e.position for e in await store.transcript.append(session.id, [msg("m3")])] == [3]


async def test_concurrent_appends_get_distinct_contiguous_positions(store: Store) -> None:
    session = await store.tree.create_session(agent_id="main")
    batches = await asyncio.gather(
        *(store.transcript.append(session.id, [msg(f"{n}.{i}") for i in range(5)]) for n in range(20))
    )
    positions = sorted(e.position for batch in batches for e in batch)
    assert positions == list(range(1, 101))
    for batch in batches:
        assert [e.position for e in batch] == list(range(batch[0].position, batch[0].position + 5))


# -- events ---------------------------------------------------------------------------------------


async def test_events_must_continue_the_log(store: Store) -> None:
    session = await store.tree.create_session(agent_id="main")
    stored = await store.events.append(
        session.id, [NewEvent(1, "agent_start", {"a": 1}, run_id="r1"), NewEvent(2, "text_delta", {"d": "x"})]
    )
    assert [e.seq for e in stored] == [1, 2]
    assert await store.events.last_seq(session.id) == 2
    for bad, expected in (
        ([NewEvent(4, "x", {})], 3),
        ([NewEvent(2, "x", {})], 3),
        ([NewEvent(1, "x", {})], 3),
    ):
        with pytest.raises(SeqConflict) as info:
            await store.events.append(session.id, bad)
        assert (info.value.expected, info.value.got) == (expected, bad[0].seq)
    with pytest.raises(SeqConflict):
        await store.events.append(session.id, [NewEvent(3, "x", {}), NewEvent(5, "x", {})])
    assert await store.events.last_seq(session.id) == 2
    await store.events.append(session.id, [NewEvent(3, "x", {}), NewEvent(4, "agent_end", {})])
    events = await store.events.read(session.id)
    assert [(e.seq, e.type) for e in events] == [
        (1, "agent_start"),
        (2, "text_delta"),
        (3, "x"),
        (4, "agent_end"),
    ]
    assert events[0].run_id == "r1" and events[0].payload == {"a": 1}
    assert [e.seq for e in await store.events.read(session.id, after_seq=1, limit=2)] == [2, 3]
    assert (await store.tree.get_session(session.id)).last_seq == 4  # type: ignore[union-attr]
    with pytest.raises(NotFound):
        await store.events.append(new_id(), [NewEvent(1, "x", {})])
    with pytest.raises(NotFound):
        await store.events.last_seq(new_id())


async def test_concurrent_appenders_from_the_same_seq_cannot_both_win(store: Store) -> None:
    session = await store.tree.create_session(agent_id="main")
    outcomes = await asyncio.gather(
        *(store.events.append(session.id, [NewEvent(1, f"w{n}", {})]) for n in range(10)),
        return_exceptions=True,
    )
    assert sum(isinstance(o, list) for o in outcomes) == 1
    assert all(isinstance(o, SeqConflict) for o in outcomes if not isinstance(o, list))
    assert len(await store.events.read(session.id)) == 1


async def test_prune_removes_old_deltas_and_reports_where_exact_replay_starts(store: Store) -> None:
    session = await store.tree.create_session(agent_id="main")
    kinds = [
        "agent_start",
        "text_delta",
        "text_delta",
        "message_end",
        "text_delta",
        "text_delta",
        "agent_end",
    ]
    await store.events.append(session.id, [NewEvent(i + 1, t, {}) for i, t in enumerate(kinds)])
    assert await store.events.first_seq_after_prune(session.id) == 1
    assert await store.events.prune(session.id, before_seq=6, types={"text_delta"}) == 3
    assert [e.seq for e in await store.events.read(session.id)] == [1, 4, 6, 7]
    assert await store.events.pruned_seq(session.id) == 5
    assert await store.events.first_seq_after_prune(session.id) == 6
    # A reader at seq 5 replays exactly; one at seq 1 must fall back to a snapshot.
    assert 5 + 1 >= await store.events.first_seq_after_prune(session.id) > 1 + 1
    assert await store.events.prune(session.id, before_seq=4, types={"agent_start"}) == 1
    assert await store.events.pruned_seq(session.id) == 5  # never moves back
    assert await store.events.prune(session.id, before_seq=100, types={"nothing"}) == 0
    assert await store.events.prune(session.id, before_seq=100, types=()) == 0
    await store.events.append(session.id, [NewEvent(8, "x", {})])  # seqs continue after pruning
    with pytest.raises(NotFound):
        await store.events.prune(new_id(), before_seq=5, types={"text_delta"})


# -- group commit ---------------------------------------------------------------------------------


async def test_commit_batch_applies_several_sessions_at_once_or_not_at_all(store: Store) -> None:
    a = await store.tree.create_session(agent_id="main")
    b = await store.tree.create_session(agent_id="main")
    await store.commit_batch(
        [
            (a.id, [msg("a1")], [NewEvent(1, "x", {})], {"status": "running"}),
            (b.id, [], [NewEvent(1, "y", {}), NewEvent(2, "y", {})], {"label": "bee"}),
            (a.id, [msg("a2")], [NewEvent(2, "x", {})], {"status": "running"}),
        ]
    )
    assert texts(await store.transcript.read(a.id)) == ["a1", "a2"]
    assert (await store.events.last_seq(a.id), await store.events.last_seq(b.id)) == (2, 2)
    assert (await store.tree.get_session(a.id)).status == "running"  # type: ignore[union-attr]
    assert (await store.tree.get_session(b.id)).label == "bee"  # type: ignore[union-attr]

    with pytest.raises(SeqConflict):
        await store.commit_batch(
            [
                (b.id, [msg("b1")], [NewEvent(3, "y", {})], None),
                (a.id, [msg("a3")], [NewEvent(9, "x", {})], None),
            ]
        )
    with pytest.raises(InvalidTransition):
        await store.commit_batch([(b.id, [msg("b1")], [], {"status": "interrupted"})])
    with pytest.raises(InvalidRequest):
        await store.commit_batch([(b.id, [], [], {"last_seq": 7})])
    assert await store.transcript.read(b.id) == []
    assert await store.events.last_seq(b.id) == 2
    assert texts(await store.transcript.read(a.id)) == ["a1", "a2"]


async def test_commit_batch_writes_each_table_once_however_many_sessions(store: Store) -> None:
    """A group commit costs a fixed number of statements, not one per session or row."""
    sessions = [await store.tree.create_session(agent_id="main") for _ in range(30)]
    calls: list[tuple[str, int]] = []

    class Counting:  # the transaction, seen through what the commit asks of it
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            method = getattr(self.inner, name)
            if name not in ("execute", "insert_many", "update_many", "fetch"):
                return method

            def counted(*args: Any) -> Any:
                calls.append((name, len(args[-1]) if name.endswith("_many") else 0))
                return method(*args)

            return counted

    real = store.database.write_direct

    @asynccontextmanager
    async def write_direct() -> AsyncIterator[Any]:
        async with real() as tx:
            yield Counting(tx)

    store.database.write_direct = write_direct  # type: ignore[method-assign]
    events = [NewEvent(n, "x", {"n": n}) for n in (1, 2, 3)]
    await store.commit_batch([(s.id, [msg("a"), msg("b")], events, None) for s in sessions])
    assert sorted(calls) == [("fetch", 0), ("insert_many", 60), ("insert_many", 90), ("update_many", 30)]
    for s in sessions:
        assert texts(await store.transcript.read(s.id)) == ["a", "b"]
        assert [e.payload for e in await store.events.read(s.id)] == [{"n": 1}, {"n": 2}, {"n": 3}]


async def test_the_store_writers_never_collide(store: Store) -> None:
    """Appends (the direct writer) and other writes (SQLAlchemy) interleave freely: the database's
    write lock keeps them apart, so none of them meets a locked database."""
    sessions = [await store.tree.create_session(agent_id="main") for _ in range(8)]

    async def appender(session: SessionRecord) -> None:
        for n in range(1, 11):
            await store.events.append(session.id, [NewEvent(n, "x", {})])
            await store.transcript.append(session.id, [msg(f"m{n}")])

    async def patcher(session: SessionRecord) -> None:
        for n in range(10):
            await store.tree.update_session(session.id, label=f"label {n}")

    await asyncio.gather(*(appender(s) for s in sessions), *(patcher(s) for s in sessions))
    for session in sessions:
        record = await store.tree.get_session(session.id)
        assert record is not None
        assert (record.last_seq, record.entry_count, record.label) == (10, 10, "label 9")


async def test_an_append_cancelled_mid_commit_leaves_the_store_consistent(store: Store) -> None:
    session = await store.tree.create_session(agent_id="main")
    cancelled = 0
    for attempt in range(40):
        seq = (await store.events.last_seq(session.id)) + 1
        task = asyncio.create_task(store.events.append(session.id, [NewEvent(seq, "x", {"a": attempt})]))
        for _ in range(attempt % 5):
            await asyncio.sleep(0)
        if task.cancel():
            cancelled += 1
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert cancelled > 0
    # Whatever each cancelled append did, it did completely, and the next append continues the log.
    stored = await store.events.read(session.id)
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
    last = await store.events.last_seq(session.id)
    assert last == len(stored)
    await store.events.append(session.id, [NewEvent(last + 1, "after", {})])
    assert await store.transcript.append(session.id, [msg("after")])


async def test_text_with_a_lone_surrogate_is_stored_not_refused(store: Store) -> None:
    """A provider can stream half of a surrogate pair; it is kept (escaped), not lost."""
    session = await store.tree.create_session(agent_id="main")
    await store.events.append(session.id, [NewEvent(1, "message.delta", {"delta": "half \ud83d"})])
    await store.transcript.append(session.id, [msg("half \ud83d of a pair")])
    assert [e.payload for e in await store.events.read(session.id)] == [{"delta": "half \ud83d"}]
    assert texts(await store.transcript.read(session.id)) == ["half \ud83d of a pair"]


# -- runs -----------------------------------------------------------------------------------------


async def test_runs_start_and_finish_once(store: Store) -> None:
    session = await store.tree.create_session(agent_id="main")
    run = await store.runs.create("run-1", session.id)
    assert (run.status, run.ended_at) == ("running", None)
    await store.runs.create("run-2", session.id)
    assert [r.id for r in await store.runs.running()] == ["run-1", "run-2"]
    with pytest.raises(Conflict):
        await store.runs.create("run-1", session.id)
    with pytest.raises(NotFound):
        await store.runs.create("run-3", new_id())
    done = await store.runs.finish("run-1", "done", "no_tool_calls", result={"text": "hi", "n": [1, 2]})
    assert (done.status, done.termination_reason, done.result) == (
        "done",
        "no_tool_calls",
        {"text": "hi", "n": [1, 2]},
    )
    assert done.ended_at is not None and done.ended_at >= done.started_at
    assert await store.runs.get("run-1") == done
    with pytest.raises(InvalidTransition, match="expected running"):
        await store.runs.finish("run-1", "error", "error")
    failed = await store.runs.finish("run-2", "error", "error", error="boom")
    assert failed.error == "boom"
    assert await store.runs.running() == []
    with pytest.raises(NotFound):
        await store.runs.finish("nope", "done", None)
    with pytest.raises(InvalidRequest):
        await store.runs.finish("run-2", "running", None)
    assert await store.runs.get("nope") is None


# -- inputs ---------------------------------------------------------------------------------------


async def test_record_input_is_idempotent(store: Store) -> None:
    session = await store.tree.create_session(agent_id="main")
    record, created = await store.inputs.record(
        "idem-1",
        session_id=session.id,
        payload={"role": "user", "content": "hi"},
        source={"client": "cli"},
        queue_mode="followup",
        run_id="idem-1",
    )
    assert created
    assert (record.status, record.source, record.queue_mode, record.run_id) == (
        "queued",
        {"client": "cli"},
        "followup",
        "idem-1",
    )
    again, created = await store.inputs.record(
        "idem-1", session_id=session.id, payload={"other": True}, status="done"
    )
    assert not created
    assert again == record
    assert await store.inputs.get("idem-1") == record
    assert await store.inputs.get("idem-2") is None
    with pytest.raises(NotFound):
        await store.inputs.record("idem-3", session_id=new_id(), payload={})


async def test_concurrent_record_input_with_one_key_creates_one_record(store: Store, store_url: str) -> None:
    session = await store.tree.create_session(agent_id="main")
    async with Store.open(store_url) as second:
        calls = [
            (store if n % 2 else second).inputs.record("same", session_id=session.id, payload={"n": n})
            for n in range(30)
        ]
        results = await asyncio.gather(*calls)
    assert sum(created for _, created in results) == 1
    assert all(record == results[0][0] for record, _ in results)
    assert len(await store.inputs.with_status(["queued"])) == 1


async def test_inputs_move_to_one_outcome(store: Store) -> None:
    a = await store.tree.create_session(agent_id="main")
    b = await store.tree.create_session(agent_id="main")
    for key, session in (("k1", a), ("k2", b), ("k3", a), ("k4", a)):
        await store.inputs.record(key, session_id=session.id, payload={"k": key})
    assert [r.idempotency_key for r in await store.inputs.with_status(["queued"])] == ["k1", "k2", "k3", "k4"]
    assert [r.idempotency_key for r in await store.inputs.with_status(["queued"], session_id=a.id)] == [
        "k1",
        "k3",
        "k4",
    ]
    running = await store.inputs.update("k1", status="running", run_id="run-9")
    assert (running.status, running.run_id) == ("running", "run-9")
    done = await store.inputs.update("k1", status="done")
    assert (done.status, done.run_id) == ("done", "run-9")
    rejected = await store.inputs.update("k3", status="rejected", reason="session busy")
    assert rejected.reason == "session busy"
    with pytest.raises(InvalidTransition, match="'done'"):
        await store.inputs.update("k1", status="queued")
    with pytest.raises(InvalidTransition):
        await store.inputs.update("k3", status="done")
    with pytest.raises(NotFound):
        await store.inputs.update("missing", status="done")
    await store.inputs.update("k4", status="steered")
    statuses = ["steered", "done", "rejected"]
    assert [r.idempotency_key for r in await store.inputs.with_status(statuses)] == ["k1", "k3", "k4"]


async def test_a_burst_of_inputs_shares_transactions_and_answers_each_as_its_own(store: Store) -> None:
    a = await store.tree.create_session(agent_id="main")
    b = await store.tree.create_session(agent_id="main")
    transactions = 0
    direct = store.database.write_direct

    @asynccontextmanager
    async def counted() -> AsyncIterator[Any]:
        nonlocal transactions
        transactions += 1
        async with direct() as tx:
            yield tx

    store.database.write_direct = counted  # type: ignore[method-assign]
    try:
        calls = [
            store.inputs.record(f"burst-{n}", session_id=(a, b)[n % 2].id, payload={"n": n})
            for n in range(60)
        ]
        calls.append(store.inputs.record("burst-7", session_id=b.id, payload={"again": True}))
        calls.append(store.inputs.record("burst-gone", session_id=new_id(), payload={}))
        results = await asyncio.gather(*calls, return_exceptions=True)
    finally:
        del store.database.write_direct
    assert transactions < 10, transactions
    recorded = results[:60]
    assert all(isinstance(r, tuple) and r[1] for r in recorded), recorded
    assert [r[0].payload for r in recorded] == [{"n": n} for n in range(60)]  # type: ignore[index]
    repeat = results[60]
    assert isinstance(repeat, tuple) and not repeat[1] and repeat[0].payload == {"n": 7}, repeat
    assert isinstance(results[61], NotFound), results[61]
    assert len(await store.inputs.with_status(["queued"])) == 60


async def test_a_caller_that_stops_waiting_before_its_group_begins_records_nothing(store: Store) -> None:
    session = await store.tree.create_session(agent_id="main")
    first = asyncio.ensure_future(store.inputs.record("kept", session_id=session.id, payload={}))
    dropped = asyncio.ensure_future(store.inputs.record("dropped", session_id=session.id, payload={}))
    await asyncio.sleep(0)  # both queued, the group not begun yet
    dropped.cancel()
    await first
    with contextlib.suppress(asyncio.CancelledError):
        await dropped
    keys = [r.idempotency_key for r in await store.inputs.with_status(["queued"])]
    assert keys == ["kept"], keys


# -- failures at the boundary ---------------------------------------------------------------------


async def test_every_sqlite_connection_keeps_a_bounded_page_cache(gateway_home: Path) -> None:
    """Direct writer and reader, and SQLAlchemy's writer and readers: each caches at most
    PAGE_CACHE_KIB of pages (SQLite's default, 2 MiB a connection, grew the daemon with the file)."""
    async with Store.open(default_url(gateway_home)) as store:
        database = store.database
        seen: dict[str, int] = {}

        async def direct(reader: DirectWrite) -> int:
            return int((await reader.fetch("PRAGMA cache_size"))[0][0])

        async with database.write_direct() as writer:
            seen["direct writer"] = int((await writer.fetch("PRAGMA cache_size"))[0][0])
        seen["direct reader"] = await database.read_direct(direct)
        async with database.write() as conn:
            seen["writer"] = int((await conn.execute(text("PRAGMA cache_size"))).scalar_one())
        async with database.read() as conn:
            seen["reader"] = int((await conn.execute(text("PRAGMA cache_size"))).scalar_one())
    assert seen == dict.fromkeys(seen, -PAGE_CACHE_KIB)
    assert len(seen) == 4


async def test_locked_database_is_retryable_unavailable_then_recovers(gateway_home: Path) -> None:
    async with Store.open(default_url(gateway_home), busy_timeout_ms=150) as store:
        session = await store.tree.create_session(agent_id="main")
        path = store.database.sqlite_path
        assert path is not None
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreUnavailable) as info:
                await store.transcript.append(session.id, [msg("blocked")])
            burst = [store.inputs.record(f"locked-{n}", session_id=session.id, payload={}) for n in range(5)]
            refused = await asyncio.gather(*burst, return_exceptions=True)
            assert all(isinstance(r, StoreUnavailable) and r.retryable for r in refused), refused
            assert (
                info.value.retryable
                and info.value.retry_after_ms is not None
                and info.value.retry_after_ms > 0
            )
            assert isinstance(info.value, SessionsError)
            assert (await store.tree.get_session(session.id)) is not None  # readers are not blocked
            holder.execute("COMMIT")
        finally:
            holder.close()
        stored = await store.transcript.append(session.id, [msg("after")])
        assert [e.position for e in stored] == [1]
        assert await store.inputs.with_status(["queued"]) == []


async def test_a_write_waits_for_another_process_lock_without_blocking_the_loop(gateway_home: Path) -> None:
    """Two daemons on one SQLite file: a write meeting the other's lock waits (up to
    busy_timeout_ms) in asyncio sleeps, so the loop keeps serving, and lands once it is free."""
    async with Store.open(default_url(gateway_home), busy_timeout_ms=3_000) as store:
        session = await store.tree.create_session(agent_id="main")
        path = store.database.sqlite_path
        assert path is not None
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        try:
            write = asyncio.create_task(store.transcript.append(session.id, [msg("waited")]))
            await asyncio.sleep(0.3)
            assert not write.done()
            assert ticks >= 10, f"the loop ran {ticks} times in 300 ms while the write waited"
            holder.execute("COMMIT")
            stored = await asyncio.wait_for(write, 5)
        finally:
            ticker.cancel()
            holder.close()
        assert [e.position for e in stored] == [1]


async def test_locked_database_at_open_is_unavailable(gateway_home: Path) -> None:
    url = default_url(gateway_home)
    async with Store.open(url):
        pass
    holder = sqlite3.connect(gateway_home / "gateway.db", isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreUnavailable):
            await Store.open(url, busy_timeout_ms=100)
    finally:
        holder.close()
    store = await Store.open(url)
    await store.aclose()


async def test_an_in_memory_database_is_refused_with_a_clear_error() -> None:
    with pytest.raises(StoreError, match="in-memory"):
        await Store.open("sqlite://")


async def test_unreachable_postgres_is_unavailable() -> None:
    with pytest.raises(StoreUnavailable) as info:
        await Store.open("postgresql://postgres@127.0.0.1:1/test")
    assert info.value.retryable


async def test_closed_store_refuses_calls(store: Store) -> None:
    await store.aclose()
    await store.aclose()
    with pytest.raises(StoreClosed):
        await store.tree.create_session(agent_id="main")
    with pytest.raises(StoreClosed):
        await store.tree.get_session(new_id())


async def test_database_size_is_reported(store: Store) -> None:
    before = await store.database_size()
    assert before is not None and before > 0
    session = await store.tree.create_session(agent_id="main")
    await store.transcript.append(session.id, [msg("x" * 2000) for _ in range(200)])
    after = await store.database_size()
    assert after is not None and after > before
