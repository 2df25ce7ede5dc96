"""`Store.transcript.context_entries`: what a run's context is read from. It must give the same context as
the whole transcript (branches and compactions included) while reading nothing from before the
newest compaction, and its JSON-text payloads must parse to the same messages as decoded ones."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from agent_core import (
    AgentMessage,
    AssistantMessage,
    CustomMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from sessions.context import COMPACTION_ROLE, build_context
from sessions.errors import NotFound
from sessions.records import ContextEntry, EntryRecord
from sessions.schema import EntryKind
from sessions.store import NewEntry, Store


def user(text: str) -> NewEntry:
    return NewEntry(kind="message", payload=UserMessage(content=[TextContent(text=text)]).dump())


def assistant(text: str) -> NewEntry:
    message = AssistantMessage(content=[TextContent(text=text)], api="a", provider="p", model="m")
    return NewEntry(kind="message", payload=message.dump())


def compaction(summary: str, first_kept: str | None) -> NewEntry:
    payload: dict[str, Any] = {"summary": summary, "tokensBefore": 10}
    if first_kept is not None:
        payload["firstKeptEntryId"] = first_kept
    return NewEntry(kind="compaction", payload=payload)


def texts(messages: list[AgentMessage]) -> list[str]:
    out = []
    for message in messages:
        if message.role == COMPACTION_ROLE:
            out.append(f"summary:{getattr(message, 'summary', '')}")
        else:
            content = getattr(message, "content", [])
            out.append("".join(b.text for b in content if isinstance(b, TextContent)))
    return out


@dataclass
class Built:
    session_id: str
    expected: list[str]


async def _append(store: Store, session_id: str, *items: NewEntry) -> list[EntryRecord]:
    return await store.transcript.append(session_id, list(items))


async def _plain(store: Store) -> Built:
    s = await store.tree.create_session(agent_id="main")
    await _append(store, s.id, user("u1"), NewEntry(kind="label", payload={"label": "x"}), assistant("a1"))
    return Built(s.id, ["u1", "a1"])


async def _compacted_twice(store: Store) -> Built:
    # The second compaction keeps from an entry before the first one: the first compaction entry
    # lies inside the kept range and is skipped like any non-message entry.
    s = await store.tree.create_session(agent_id="main")
    _, a1, u2 = await _append(store, s.id, user("u1"), assistant("a1"), user("u2"))
    await _append(store, s.id, compaction("S1", a1.id), user("u3"), assistant("a3"))
    await _append(store, s.id, compaction("S2", u2.id), user("u4"))
    return Built(s.id, ["summary:S2", "u2", "u3", "a3", "u4"])


async def _unknown_first_kept(store: Store) -> Built:
    s = await store.tree.create_session(agent_id="main")
    await _append(store, s.id, user("u1"), compaction("S", "no-such-entry"), user("u2"))
    await _append(store, s.id, compaction("S3", None), user("after"))
    return Built(s.id, ["summary:S3", "after"])


async def _branch_of_compacted_parent(store: Store) -> Built:
    # The parent's compaction before the branch point counts; its later one does not.
    parent = await store.tree.create_session(agent_id="main")
    _, a1 = await _append(store, parent.id, user("u1"), assistant("a1"))
    _, _, a2 = await _append(store, parent.id, compaction("S", a1.id), user("u2"), assistant("a2"))
    child = await store.tree.branch(parent.id, at_entry_id=a2.id)
    await _append(store, parent.id, user("later on the parent"), compaction("S-later", None))
    await _append(store, child.id, user("u3"))
    return Built(child.id, ["summary:S", "a1", "u2", "a2", "u3"])


async def _child_compaction_keeping_parent_entries(store: Store) -> Built:
    parent = await store.tree.create_session(agent_id="main")
    _, _, u2, a2 = await _append(store, parent.id, user("u1"), assistant("a1"), user("u2"), assistant("a2"))
    child = await store.tree.branch(parent.id, at_entry_id=a2.id)
    await _append(store, child.id, user("u3"), assistant("a3"), compaction("S", u2.id), user("u4"))
    return Built(child.id, ["summary:S", "u2", "a2", "u3", "a3", "u4"])


async def _child_compaction_keeping_an_entry_past_the_branch_point(store: Store) -> Built:
    # The first kept entry is the parent's, after the branch point: not in the child's transcript,
    # so only what follows the compaction is kept.
    parent = await store.tree.create_session(agent_id="main")
    _, a1 = await _append(store, parent.id, user("u1"), assistant("a1"))
    child = await store.tree.branch(parent.id, at_entry_id=a1.id)
    (beyond,) = await _append(store, parent.id, user("parent only"))
    await _append(store, child.id, user("u2"), compaction("S", beyond.id), user("u3"))
    return Built(child.id, ["summary:S", "u3"])


async def _deep_chain(store: Store) -> Built:
    session = await store.tree.create_session(agent_id="main")
    expected = []
    for level in range(4):
        await _append(store, session.id, user(f"q{level}"), assistant(f"a{level}"))
        expected += [f"q{level}", f"a{level}"]
        session = await store.tree.branch(session.id)
    await _append(store, session.id, user("last"))
    return Built(session.id, [*expected, "last"])


SCENARIOS: dict[str, Callable[[Store], Awaitable[Built]]] = {
    "plain": _plain,
    "compacted twice": _compacted_twice,
    "unknown first kept entry": _unknown_first_kept,
    "branch of a compacted parent": _branch_of_compacted_parent,
    "child compaction keeping parent entries": _child_compaction_keeping_parent_entries,
    "child compaction keeping an entry past the branch point": (
        _child_compaction_keeping_an_entry_past_the_branch_point
    ),
    "deep chain": _deep_chain,
}


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_the_context_read_gives_the_context_of_the_whole_transcript(store: Store, name: str) -> None:
    built = await SCENARIOS[name](store)
    from_context = build_context(await store.transcript.context_entries(built.session_id))
    assert texts(from_context) == built.expected
    assert from_context == build_context(await store.transcript.read(built.session_id))


async def _compacted_session(store: Store, history: int) -> str:
    """`history` old messages, then a kept question and answer, a compaction keeping them, and a
    newer question."""
    session = await store.tree.create_session(agent_id="main")
    old = [user(f"old {i}") if i % 2 == 0 else assistant(f"old {i}") for i in range(history)]
    for start in range(0, len(old), 200):
        await _append(store, session.id, *old[start : start + 200])
    kept, _ = await _append(store, session.id, user("kept question"), assistant("kept answer"))
    await _append(store, session.id, compaction("S", kept.id), user("new question"))
    return session.id


async def test_the_entries_read_do_not_grow_with_the_history_before_the_newest_compaction(
    store: Store,
) -> None:
    short, long = await _compacted_session(store, 10), await _compacted_session(store, 1_000)
    short_entries = await store.transcript.context_entries(short)
    long_entries = await store.transcript.context_entries(long)
    assert [e.kind for e in long_entries] == ["message", "message", "compaction", "message"]
    assert len(short_entries) == len(long_entries)
    assert texts(build_context(long_entries)) == [
        "summary:S",
        "kept question",
        "kept answer",
        "new question",
    ]
    assert len(await store.transcript.read(long)) == 1_004


async def test_context_entries_of_an_unknown_session_raise_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.transcript.context_entries("no-such-session")


def _varied_messages() -> list[AgentMessage]:
    prompt = UserMessage(
        content=[TextContent(text="look"), ImageContent(data="aGVsbG8=", mime_type="image/png")],
        timestamp=7,
    )
    call = ToolCall(id="call-1", name="bash", arguments={"command": "echo hi", "n": [1, 2.5, None]})
    reply = AssistantMessage(
        content=[ThinkingContent(thinking="hmm"), TextContent(text="ok ✓"), call],
        api="anthropic-messages",
        provider="anthropic",
        model="claude",
        usage=Usage(input=10, output=5, cache_read=2, total_tokens=17),
        stop_reason="toolUse",
        timestamp=8,
    )
    result = ToolResultMessage(
        tool_call_id="call-1",
        tool_name="bash",
        content=[TextContent(text="hi\n")],
        details={"exitCode": 0},
        is_error=False,
        timestamp=9,
    )
    failed = AssistantMessage(
        content=[],
        api="faux",
        provider="faux",
        model="echo",
        stop_reason="error",
        error_message="boom",
        timestamp=10,
    )
    note = CustomMessage(role="notification", text="not for the model", level=3, timestamp=11)
    return [prompt, reply, result, failed, note]


def test_payloads_read_as_json_text_become_the_same_messages_as_decoded_ones() -> None:
    messages = _varied_messages()
    as_text = [ContextEntry(str(i), "message", json.dumps(m.dump())) for i, m in enumerate(messages)]
    as_dicts = [EntryRecord(str(i), "s", i, EntryKind.MESSAGE, m.dump(), 0) for i, m in enumerate(messages)]
    from_text = build_context(as_text)
    assert from_text == build_context(as_dicts) == messages
    assert [type(m) for m in from_text] == [type(m) for m in messages]
    # An input is stored with the keys it carries; read back for a context it is the user message.
    stored_input = {**messages[0].dump(), "idempotencyKey": "k-1", "mergedKeys": ["k-1", "k-2"]}
    assert build_context([ContextEntry("i", "message", json.dumps(stored_input))]) == [messages[0]]
