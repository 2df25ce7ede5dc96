"""`gateway.channel_replies`: session events -> reply events, only for the runs a binding owns."""

from __future__ import annotations

import asyncio
import itertools
from typing import Literal

from bindings import ReplyEvent, ReplyRoute
from gateway.channel_replies import Owner, ReplyFeed, ReplyText, reply_kind
from sessions import (
    AgentFinished,
    AgentStarted,
    EventPayload,
    MessageCompleted,
    MessageDelta,
    MessageStarted,
    SessionEvent,
)

KEY = "agent:main:discord:channel:500"
ROUTE = ReplyRoute(platform="discord", account_id="default", channel_id="500")
_seq = itertools.count(1)


def ev(data: EventPayload, run_id: str | None = "run-1") -> SessionEvent:
    return SessionEvent(session_id="s1", seq=next(_seq), data=data, run_id=run_id, session_key=KEY)


def delta(message_id: str, text: str, kind: Literal["text", "thinking"] = "text") -> MessageDelta:
    return MessageDelta(message_id=message_id, content_index=0, kind=kind, delta=text)


def assistant(text: str, message_id: str = "m1", run_id: str = "run-1") -> list[SessionEvent]:
    """A streamed assistant message: started, one delta per word, completed."""
    out = [ev(MessageStarted(message_id=message_id, role="assistant"), run_id)]
    out += [ev(delta(message_id, w), run_id) for w in text.split(" ")]
    message = {"role": "assistant", "content": [{"type": "text", "text": text.replace(" ", "")}]}
    out.append(ev(MessageCompleted(message_id=message_id, message=message), run_id))
    return out


def finished(reason: str = "no_tool_calls", run_id: str = "run-1") -> SessionEvent:
    data = AgentFinished(termination_reason=reason, total_turns=1, total_tokens=0, duration_ms=1)
    return ev(data, run_id=run_id)


class Sink:
    def __init__(self) -> None:
        self.events: list[ReplyEvent] = []

    def __call__(self, event: ReplyEvent) -> None:
        self.events.append(event)

    @property
    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


def test_reply_text_shows_only_assistant_text_and_joins_messages() -> None:
    text = ReplyText()
    text.apply(MessageStarted(message_id="u", role="user"))
    assert not text.apply(delta("u", "mine"))
    text.apply(MessageStarted(message_id="a", role="assistant"))
    assert not text.apply(delta("a", "hmm", kind="thinking"))
    assert text.apply(delta("a", "Looking.  "))
    text.apply(MessageStarted(message_id="b", role="assistant"))
    text.apply(delta("b", "Done"))
    assert text.text == "Looking.\n\nDone"
    message = {
        "role": "assistant",
        "content": [{"type": "toolCall", "id": "t"}, {"type": "text", "text": "Done!"}],
    }
    assert text.apply(MessageCompleted(message_id="b", message=message))
    assert text.text == "Looking.\n\nDone!"


def test_reply_kinds() -> None:
    assert reply_kind("no_tool_calls") == "final"
    assert reply_kind("error") == "error"
    for reason in ("aborted", "gateway_shutdown", "interrupted", "idle_timeout", "max_duration", None):
        assert reply_kind(reason) == "aborted"


async def test_only_the_owning_binding_gets_the_run_and_deltas_are_coalesced() -> None:
    feed = ReplyFeed()
    discord, slack = Sink(), Sink()
    feed.subscribe("discord:default", KEY, discord)
    feed.subscribe("slack:default", KEY, slack)  # the same session key, another platform
    feed.claim("run-1", Owner(binding_id="discord:default", session_key=KEY, route=ROUTE))
    feed.on_event(ev(AgentStarted()))
    for event in assistant("a b c"):
        feed.on_event(event)
    await asyncio.sleep(0)  # one loop pass: the deltas above become one reply event
    feed.on_event(finished())

    assert [(e.kind, e.text) for e in discord.events] == [("delta", "abc"), ("final", "abc")]
    assert slack.events == []
    assert feed.active_runs == 0
    assert feed.lookups.empty()


async def test_a_run_it_did_not_see_start_is_never_relayed() -> None:
    """A run cut off by a crash is closed by recovery; the outbox finishes that reply."""
    feed = ReplyFeed()
    sink = Sink()
    feed.subscribe("discord:default", KEY, sink)
    feed.claim("run-1", Owner(binding_id="discord:default", session_key=KEY))
    for event in assistant("partial"):
        feed.on_event(event)
    feed.on_event(finished("interrupted"))
    await asyncio.sleep(0)
    assert sink.events == []


async def test_an_unclaimed_run_waits_for_its_owner_from_the_ledger() -> None:
    fallen: list[tuple[Owner, ReplyEvent]] = []
    feed = ReplyFeed(fallback=lambda owner, event: fallen.append((owner, event)))
    feed.on_event(ev(AgentStarted(), run_id="run-2"))
    assert feed.lookups.get_nowait() == "run-2"
    for event in assistant("x y", message_id="m2", run_id="run-2"):
        feed.on_event(event)
    feed.on_event(finished(run_id="run-2"))
    await asyncio.sleep(0)
    assert fallen == [] and feed.active_runs == 1  # kept until the lookup answers

    owner = Owner(binding_id="discord:default", session_key=KEY, route=ROUTE)
    feed.resolve("run-2", [owner])
    assert [(o.binding_id, e.kind, e.text) for o, e in fallen] == [("discord:default", "final", "xy")]
    assert feed.active_runs == 0


async def test_a_run_nobody_owns_is_not_relayed_and_a_late_subscriber_catches_up() -> None:
    feed = ReplyFeed()
    feed.on_event(ev(AgentStarted(), run_id="op"))
    feed.resolve("op", [])  # an operator's chat.send
    sink = Sink()
    feed.subscribe("discord:default", KEY, sink)
    for event in assistant("hello", message_id="m3", run_id="op"):
        feed.on_event(event)
    await asyncio.sleep(0)
    assert sink.events == []

    # A chat message steered into that run makes its binding an owner: it gets the text so far.
    feed.claim("op", Owner(binding_id="discord:default", session_key=KEY))
    late = Sink()
    feed.subscribe("discord:default", KEY, late)
    feed.on_event(finished(run_id="op"))
    assert [(e.kind, e.text) for e in sink.events] == [("delta", "hello"), ("final", "hello")]
    assert [(e.kind, e.text) for e in late.events] == [("delta", "hello"), ("final", "hello")]


async def test_a_listener_that_raises_does_not_stop_the_others() -> None:
    feed = ReplyFeed()

    def broken(event: ReplyEvent) -> None:
        raise RuntimeError("boom")

    sink = Sink()
    feed.subscribe("discord:default", KEY, broken)
    unsubscribe = feed.subscribe("discord:default", KEY, sink)
    feed.claim("run-1", Owner(binding_id="discord:default", session_key=KEY))
    feed.on_event(ev(AgentStarted()))
    feed.on_event(finished("error"))
    assert sink.kinds == ["error"]
    unsubscribe()
    feed.on_event(ev(AgentStarted(), run_id="run-3"))
    feed.claim("run-3", Owner(binding_id="discord:default", session_key=KEY))
    feed.on_event(finished(run_id="run-3"))
    assert sink.kinds == ["error"]
