"""Building a run's context: from entries (unit), and what the model sees in real runs
(branches, compaction summaries)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent_core import AssistantMessage, CustomMessage, TextContent, ToolResultMessage, UserMessage
from sessions.context import (
    COMPACTION_ROLE,
    SUMMARY_PREFIX,
    SUMMARY_SUFFIX,
    build_context,
    convert_to_llm,
    view_of,
)
from sessions.store import NewEntry
from tests.sessions.manager_support import HarnessFactory, StreamLog, harnesses

__all__ = ["harnesses"]


@dataclass
class Entry:
    id: str
    kind: str
    payload: dict[str, Any]


def user(entry_id: str, text: str) -> Entry:
    return Entry(entry_id, "message", UserMessage(content=[TextContent(text=text)]).dump())


def assistant(entry_id: str, text: str) -> Entry:
    message = AssistantMessage(content=[TextContent(text=text)], api="a", provider="p", model="m")
    return Entry(entry_id, "message", message.dump())


def texts(messages: list[Any]) -> list[tuple[str, str]]:
    out = []
    for m in messages:
        if m.role == COMPACTION_ROLE:
            out.append((m.role, m.summary))
        else:
            out.append((m.role, "".join(b.text for b in m.content if isinstance(b, TextContent))))
    return out


def test_without_compaction_the_context_is_every_message_in_order() -> None:
    entries = [
        user("1", "hi"),
        Entry("2", "label", {"label": "x"}),
        assistant("3", "hello"),
        Entry("4", "model_change", {"model": "a/b"}),
        Entry("5", "custom", {"anything": True}),
        user("6", "bye"),
    ]
    assert texts(build_context(entries)) == [("user", "hi"), ("assistant", "hello"), ("user", "bye")]
    assert view_of(entries).compaction is None
    assert [i for i, _ in view_of(entries).messages] == ["1", "3", "6"]


def test_a_compaction_replaces_what_came_before_its_first_kept_entry() -> None:
    entries = [
        user("1", "old question"),
        assistant("2", "old answer"),
        user("3", "kept question"),
        assistant("4", "kept answer"),
        Entry("5", "compaction", {"summary": "S1", "firstKeptEntryId": "3", "tokensBefore": 99}),
        user("6", "new question"),
    ]
    context = build_context(entries)
    assert texts(context) == [
        (COMPACTION_ROLE, "S1"),
        ("user", "kept question"),
        ("assistant", "kept answer"),
        ("user", "new question"),
    ]
    assert isinstance(context[0], CustomMessage)
    # Only the newest compaction counts.
    entries += [
        assistant("7", "new answer"),
        Entry("8", "compaction", {"summary": "S2", "firstKeptEntryId": "6", "tokensBefore": 50}),
    ]
    assert texts(build_context(entries)) == [
        (COMPACTION_ROLE, "S2"),
        ("user", "new question"),
        ("assistant", "new answer"),
    ]
    # Without a first kept entry, only what follows the compaction entry is kept.
    entries.append(Entry("9", "compaction", {"summary": "S3"}))
    entries.append(user("10", "after"))
    assert texts(build_context(entries)) == [(COMPACTION_ROLE, "S3"), ("user", "after")]


def test_the_model_sees_the_summary_as_a_user_message() -> None:
    summary = CustomMessage(role=COMPACTION_ROLE, summary="what happened", timestamp=5)
    result = ToolResultMessage(tool_call_id="c", tool_name="t", content=[TextContent(text="r")])
    other = CustomMessage(role="notification", text="not for the model")
    converted = convert_to_llm([summary, UserMessage(content="q"), result, other])
    assert [m.role for m in converted] == ["user", "user", "toolResult"]
    first = converted[0]
    assert isinstance(first, UserMessage) and first.timestamp == 5
    assert first.content == [TextContent(text=SUMMARY_PREFIX + "what happened" + SUMMARY_SUFFIX)]


async def test_each_run_starts_from_the_stored_transcript(harnesses: HarnessFactory) -> None:
    log = StreamLog()
    h = await harnesses(stream_fn=log)
    session = await h.session()
    await h.send(session, "first", "c-1")
    await h.wait("c-1")
    await h.store.transcript.append(session.id, [NewEntry(kind="label", payload={"label": "ignored"})])
    await h.send(session, "second", "c-2")
    await h.wait("c-2")
    assert log.contexts(session.id)[-1] == [
        ("user", "first"),
        ("assistant", "echo: first"),
        ("user", "second"),
    ]
    assert {system for _, _, system in log.calls} == {"You are a test agent."}


async def test_a_branch_sees_the_parent_up_to_the_branch_point_then_its_own(
    harnesses: HarnessFactory,
) -> None:
    log = StreamLog()
    h = await harnesses(stream_fn=log)
    main = await h.session()
    await h.send(main, "one", "b-1")
    await h.wait("b-1")
    point = (await h.transcript(main.id))[-1]  # "echo: one"
    await h.send(main, "two on main", "b-2")
    await h.wait("b-2")

    branch = await h.store.tree.branch(main.id, at_entry_id=point.id, key="agent:main:main:branch:1")
    await h.send(branch, "two on the branch", "b-3")
    await h.wait("b-3")
    assert log.contexts(branch.id)[-1] == [
        ("user", "one"),
        ("assistant", "echo: one"),
        ("user", "two on the branch"),
    ]
    # The branch's own entries are its own; the parent is untouched.
    assert [t for _, t in await h.texts(main.id)] == ["one", "echo: one", "two on main", "echo: two on main"]
    assert [t for _, t in await h.texts(branch.id)] == [
        "one",
        "echo: one",
        "two on the branch",
        "echo: two on the branch",
    ]
    assert [e.session_id for e in await h.transcript(branch.id)][-2:] == [branch.id, branch.id]
    await h.check_log(branch.id)

    # A branch of the branch sees both prefixes.
    twig = await h.store.tree.branch(branch.id, key="agent:main:main:branch:2")
    await h.send(twig, "three", "b-4")
    await h.wait("b-4")
    assert [t for _, t in log.contexts(twig.id)[-1]] == [
        "one",
        "echo: one",
        "two on the branch",
        "echo: two on the branch",
        "three",
    ]
