"""Compaction: the cut point (unit), and manual and automatic compaction in real runs."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from agent_core import (
    AgentMessage,
    AssistantMessage,
    AssistantMessageEventStream,
    Context,
    DoneEvent,
    Model,
    StreamOptions,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    text_of,
)
from sessions.compaction import (
    SUMMARY_SYSTEM_PROMPT,
    CompactionError,
    estimate_tokens,
    find_cut_point,
    plan,
    should_compact,
)
from sessions.context import SUMMARY_PREFIX
from sessions.records import EntryRecord
from tests.sessions.manager_support import (
    FAST,
    Directory,
    Harness,
    HarnessFactory,
    StreamLog,
    echo_tool,
    harnesses,
    tools_factory,
)

__all__ = ["harnesses"]


def u(text: str) -> UserMessage:
    return UserMessage(content=[TextContent(text=text)])


def a(text: str = "", *calls: str) -> AssistantMessage:
    content: list[Any] = [TextContent(text=text)] if text else []
    content += [ToolCall(id=c, name="echo", arguments={"text": c}) for c in calls]
    return AssistantMessage(content=content, api="x", provider="x", model="x")


def r(call_id: str, text: str = "result") -> ToolResultMessage:
    return ToolResultMessage(tool_call_id=call_id, tool_name="echo", content=[TextContent(text=text)])


def test_estimates_count_characters_over_four() -> None:
    assert estimate_tokens(u("x" * 40)) == 10
    assert estimate_tokens(a("abcd", "c1")) == 1 + (len("echo") + len('{"text": "c1"}') + 3) // 4
    assert should_compact(901, 1000, 100) and not should_compact(900, 1000, 100)
    assert not should_compact(10**6, 0, 0)  # a model without a known window never compacts


def test_the_cut_keeps_recent_tokens_and_never_starts_at_a_tool_result() -> None:
    messages: list[AgentMessage] = [
        u("a" * 400),
        a("b" * 400, "c1"),
        r("c1", "c" * 400),
        a("d" * 40),
        u("e" * 40),
    ]
    # Keeping 20 tokens reaches the last user message only.
    cut = find_cut_point(messages, 10)
    assert cut is not None and cut.first_kept_index == 4
    assert cut.tokens_before == sum(estimate_tokens(m) for m in messages[:4])
    # Keeping more lands on the tool result: the cut moves back to the call.
    cut = find_cut_point(messages, 120)
    assert cut is not None and cut.first_kept_index == 1
    # Everything fits: nothing to compact.
    assert find_cut_point(messages, 10_000) is None
    assert find_cut_point([u("x")], 0) is None


def test_random_histories_never_split_a_call_from_its_result() -> None:
    rng = random.Random(7)
    for _ in range(300):
        messages: list[AgentMessage] = []
        for turn in range(rng.randint(1, 8)):
            messages.append(u("q" * rng.randint(1, 200)))
            for step in range(rng.randint(0, 3)):
                calls = [f"c{turn}-{step}-{n}" for n in range(rng.randint(1, 3))]
                messages.append(a("t" * rng.randint(0, 100), *calls))
                messages.extend(r(c, "r" * rng.randint(1, 300)) for c in calls)
            messages.append(a("answer" * rng.randint(1, 30)))
        cut = find_cut_point(messages, rng.randint(1, 400))
        if cut is None:
            continue
        index = cut.first_kept_index
        assert 0 < index < len(messages)
        assert messages[index].role in ("user", "assistant")
        kept_calls = {
            b.id
            for m in messages[index:]
            if isinstance(m, AssistantMessage)
            for b in m.content
            if isinstance(b, ToolCall)
        }
        for m in messages[index:]:
            if isinstance(m, ToolResultMessage):
                assert m.tool_call_id in kept_calls


class Summarizer:
    """A stream function that answers summary requests with a structured summary (and records
    their prompts) and passes everything else to the faux provider (recording contexts)."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.log = StreamLog()

    def __call__(self, model: Model, context: Context, options: StreamOptions) -> Any:
        if context.system_prompt != SUMMARY_SYSTEM_PROMPT:
            return self.log(model, context, options)
        self.prompts.append(text_of(context.messages[0]))
        text = f"## Goal\nsummary {len(self.prompts)}\n## Next steps\ncarry on"
        message = AssistantMessage(
            content=[TextContent(text=text)], api=model.api, provider=model.provider, model=model.id
        )
        stream = AssistantMessageEventStream()
        stream.push(DoneEvent(reason="stop", message=message))
        stream.end(message)
        return stream


def _check_not_split(entries: list[EntryRecord], first_kept: str) -> None:
    ids = [e.id for e in entries if e.kind == "message"]
    index = ids.index(first_kept)
    messages = [e.payload for e in entries if e.kind == "message"]
    assert messages[index]["role"] in ("user", "assistant")
    kept_calls = {
        b["id"]
        for m in messages[index:]
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] == "toolCall"
    }
    for m in messages[index:]:
        if m["role"] == "toolResult":
            assert m["toolCallId"] in kept_calls


async def _history(h: Harness, session: Any, turns: int) -> None:
    for n in range(turns):
        text = (
            f'!tool echo {{"text": "tool text {n} {"x" * 80}"}}' if n % 2 == 0 else f"question {n} {'y' * 80}"
        )
        await h.send(session, text, f"hist-{session.id[-6:]}-{n}")
        assert (await h.wait(f"hist-{session.id[-6:]}-{n}"))["status"] == "ok"


async def test_manual_compaction_summarises_and_later_runs_start_from_the_summary(
    harnesses: HarnessFactory,
) -> None:
    summarizer = Summarizer()
    settings = msgspec.structs.replace(FAST, compaction_keep_recent_tokens=60)
    h = await harnesses(settings=settings, stream_fn=summarizer, tools=tools_factory(echo_tool()))
    session = await h.session()
    await _history(h, session, 4)

    result = await h.manager.compact(session.id)
    assert result.summary == "## Goal\nsummary 1\n## Next steps\ncarry on"
    assert result.tokens_before > 0
    entries = await h.transcript(session.id)
    compactions = [e for e in entries if e.kind == "compaction"]
    assert [c.payload for c in compactions] == [result.payload()]
    _check_not_split(entries, result.first_kept_entry_id)
    assert "Conversation:" in summarizer.prompts[0] and "question 1" in summarizer.prompts[0]
    assert "compaction" in {reason for sid, reason in h.recorder.changes if sid == session.id}

    await h.send(session, "after the compaction", "after-1")
    await h.wait("after-1")
    context = summarizer.log.contexts(session.id)[-1]
    assert context[0] == ("user", SUMMARY_PREFIX + result.summary + "\n</summary>")
    kept = [(m.payload["role"], text_of_payload(m.payload)) for m in entries if m.kind == "message"]
    first_kept = [e.id for e in entries if e.kind == "message"].index(result.first_kept_entry_id)
    assert context[1:] == [*kept[first_kept:], ("user", "after the compaction")]

    # A second compaction continues the first summary.
    await _history(h, session, 2)
    second = await h.manager.compact(session.id)
    assert "Earlier summary" in summarizer.prompts[1] and "summary 1" in summarizer.prompts[1]
    assert second.summary.endswith("carry on") and "summary 2" in second.summary
    _check_not_split(await h.transcript(session.id), second.first_kept_entry_id)


def text_of_payload(payload: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in payload.get("content", []) if b.get("type") == "text")


async def test_compacting_too_little_history_fails_cleanly(harnesses: HarnessFactory) -> None:
    h = await harnesses()
    session = await h.session()
    with pytest.raises(CompactionError):
        await h.manager.compact(session.id)
    await h.send(session, "short", "short-1")
    await h.wait("short-1")
    with pytest.raises(CompactionError):
        await h.manager.compact(session.id)
    assert [e.kind for e in await h.transcript(session.id)] == ["message", "message"]
    with pytest.raises(CompactionError):
        plan(await h.transcript(session.id), 10_000)


async def test_runs_compact_automatically_near_the_context_window(harnesses: HarnessFactory) -> None:
    summarizer = Summarizer()
    settings = msgspec.structs.replace(FAST, compaction_reserve_tokens=100, compaction_keep_recent_tokens=60)
    h = await harnesses(
        settings=settings, stream_fn=summarizer, directory=Directory(context_window=300, pace_ms=0)
    )
    session = await h.session()
    await h.send(session, "!long 20", "auto-1")
    await h.wait("auto-1")
    assert not [e for e in await h.transcript(session.id) if e.kind == "compaction"]
    await h.send(session, "!long 200", "auto-2")
    await h.wait("auto-2")
    assert not summarizer.prompts  # the context was small when auto-2 started
    await h.send(session, "next question", "auto-3")
    assert (await h.wait("auto-3"))["status"] == "ok"

    entries = await h.transcript(session.id)
    kinds = [(str(e.kind), e.payload.get("role")) for e in entries]
    compaction_at = kinds.index(("compaction", None))
    assert kinds[compaction_at + 1 :] == [
        ("message", "user"),
        ("message", "assistant"),
    ]  # before auto-3's prompt
    context = summarizer.log.contexts(session.id)[-1]
    assert context[0][1].startswith(SUMMARY_PREFIX)
    assert context[-1] == ("user", "next question")
    _check_not_split(entries, entries[compaction_at].payload["firstKeptEntryId"])
    await h.check_log(session.id)
