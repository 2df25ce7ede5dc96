"""`gateway.bridge`: committed session events reach connections in every wire shape, replays of
stored events match what went out live, and `sessions.changed` rows come from the lookup the
bridge was given."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import structlog

import gateway.bridge
from gateway.bridge import Bridge
from gateway.hub import Hub
from gateway.outlet import Outlet
from gateway.protocol.delta_pacing import DeltaPacing
from gateway.publisher import Publisher
from sessions import (
    AgentFinished,
    AgentStarted,
    EventPayload,
    EventRecord,
    MessageCompleted,
    MessageDelta,
    MessageStarted,
    SessionEvent,
    SessionRecord,
    StatusChanged,
    ToolStarted,
)
from sessions.schema import SessionKind, SessionStatus
from sessions.termination import TerminationReason

SESSION = "s1"
KEY = "agent:main:main"
REPLY = {"role": "assistant", "content": [{"type": "text", "text": "pong"}]}


class Clock:
    """The time the bridge paces by, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Wire:
    """The far end of a WebSocket: keeps every frame the connection was sent (and, with a clock,
    when it was written)."""

    direct = False

    def __init__(self, clock: Clock | None = None) -> None:
        self.frames: list[dict[str, Any]] = []
        self.written_at: list[float] = []
        self._clock = clock

    async def send_text(self, data: str) -> None:
        self.frames.append(json.loads(data))
        self.written_at.append(self._clock() if self._clock is not None else 0.0)

    def write_now(self, texts: Sequence[str]) -> bool:
        return False

    async def close(self, code: int, reason: str) -> None:
        return None


async def connect(
    hub: Hub, caps: frozenset[str] = frozenset(), *, clock: Clock | None = None, follow: bool = True
) -> tuple[Outlet, Wire]:
    """A reader connection following SESSION natively and its committed messages (unless
    `follow` is False)."""
    wire = Wire(clock)
    outlet = Outlet(f"c{len(hub)}", wire, 1 << 20)
    outlet.grant(frozenset({"operator.read"}), caps)
    outlet.start()
    hub.register(outlet)
    if follow:
        outlet.follow_events(SESSION, 0)
        outlet.follow_messages(SESSION)
    return outlet, wire


async def settle(outlet: Outlet) -> None:
    await outlet.drain()


def run_events() -> list[SessionEvent]:
    payloads: list[EventPayload] = [
        StatusChanged(SessionStatus.RUNNING),
        AgentStarted(),
        MessageStarted(message_id="m1", role="assistant"),
        MessageDelta(message_id="m1", content_index=0, kind="text", delta="pong"),
        ToolStarted(tool_call_id="t1", tool_name="ls", args={}),
        MessageCompleted(message_id="m1", message=REPLY),
        AgentFinished(
            termination_reason=TerminationReason.NO_TOOL_CALLS,
            total_turns=1,
            total_tokens=3,
            duration_ms=4,
            stop_reason="stop",
        ),
        StatusChanged(SessionStatus.IDLE),
    ]
    return [
        SessionEvent(SESSION, seq, data, run_id="r1", session_key=KEY, ts=1000 + seq)
        for seq, data in enumerate(payloads, start=1)
    ]


async def test_a_run_reaches_a_reader_in_every_shape_in_order() -> None:
    hub = Hub()
    bridge = Bridge(hub)
    outlet, wire = await connect(hub)
    seen: list[str] = []
    bridge.add_listener(lambda event: seen.append(event.name))
    for event in run_events():
        bridge.publish(event)
    await settle(outlet)
    shapes = [
        (
            f["event"],
            f["payload"].get("sessionSeq") or f["payload"].get("stream") or f["payload"].get("state"),
        )
        for f in wire.frames
    ]
    assert shapes == [
        ("session.status.changed", 1),
        ("session.agent.started", 2),
        ("agent", "lifecycle"),
        ("session.message.started", 3),
        ("session.message.delta", 4),
        ("agent", "assistant"),
        ("chat", "delta"),
        ("session.tool.started", 5),  # no `tool-events` cap: no tool stream frame
        ("session.message.completed", 6),
        ("session.message", None),
        ("session.agent.finished", 7),
        ("agent", "lifecycle"),
        ("chat", "final"),
        ("session.status.changed", 8),
    ]
    assert [f["seq"] for f in wire.frames] == list(range(1, len(wire.frames) + 1))
    assert wire.frames[4]["payload"] == {
        "sessionId": SESSION,
        "sessionKey": KEY,
        "sessionSeq": 4,
        "runId": "r1",
        "ts": 1004,
        "messageId": "m1",
        "contentIndex": 0,
        "kind": "text",
        "delta": "pong",
    }
    assert wire.frames[9]["payload"] == {
        "sessionKey": KEY,
        "sessionId": SESSION,
        "messageId": "m1",
        "messageSeq": 6,
        "message": REPLY,
    }
    assert wire.frames[12]["payload"]["message"]["content"] == [{"type": "text", "text": "pong"}]
    assert seen == [e.name for e in run_events()]
    assert bridge.published == 8
    await outlet.aclose()


async def test_events_of_other_nodes_reach_clients_and_only_the_listeners_that_hear_remote_events() -> None:
    hub = Hub()
    bridge = Bridge(hub)
    outlet, wire = await connect(hub)
    per_run: list[str] = []  # metrics, traces, hooks: once per run, where it runs
    relaying: list[str] = []  # chat replies, automation: wherever the run happens
    bridge.add_listener(lambda event: per_run.append(event.name))
    remove = bridge.add_listener(lambda event: relaying.append(event.name), remote=True)
    events = run_events()
    Publisher(hub, bridge).local().publish(events[0])  # committed by another node
    Publisher(hub, bridge).publish(events[1])  # committed here
    await settle(outlet)
    assert [f["event"] for f in wire.frames if f["event"].startswith("session.")] == [
        "session.status.changed",
        "session.agent.started",
    ]
    assert per_run == ["agent.started"]
    assert relaying == ["status.changed", "agent.started"]
    assert bridge.published == 1  # what this node committed
    remove()
    Publisher(hub, bridge).local().publish(events[2])
    assert relaying == ["status.changed", "agent.started"]


async def test_tool_frames_go_only_to_connections_that_asked_for_them() -> None:
    hub = Hub()
    bridge = Bridge(hub)
    outlet, wire = await connect(hub, caps=frozenset({"tool-events"}))
    for event in run_events()[:5]:
        bridge.publish(event)
    await settle(outlet)
    tool = [f["payload"] for f in wire.frames if f["event"] == "agent" and f["payload"]["stream"] == "tool"]
    assert [p["data"] for p in tool] == [{"phase": "start", "name": "ls", "toolCallId": "t1", "args": {}}]
    await outlet.aclose()


def session_record(keys: Sequence[str] = (KEY,)) -> SessionRecord:
    return SessionRecord(
        id=SESSION,
        agent_id="main",
        parent_id=None,
        root_id=SESSION,
        branch_point=None,
        kind=SessionKind.MAIN,
        label=None,
        status=SessionStatus.IDLE,
        model=None,
        thinking_level=None,
        queue_mode="followup",
        input_tokens=0,
        output_tokens=0,
        total_tokens=0,
        cost=0.0,
        entry_count=0,
        last_seq=0,
        pruned_seq=0,
        origin=None,
        created_at=0,
        updated_at=0,
        keys=tuple(keys),
    )


async def test_a_replayed_event_is_the_frame_that_went_out_live() -> None:
    hub = Hub()
    bridge = Bridge(hub)
    outlet, wire = await connect(hub)
    events = run_events()
    for event in events:
        bridge.publish(event)
    await settle(outlet)
    live = [f for f in wire.frames if f["event"].startswith("session.") and f["event"] != "session.message"]
    records = [
        EventRecord(e.session_id, e.seq, e.run_id, e.name, json.loads(json.dumps(e.log_payload())), 0)
        for e in events
    ]
    replayed = [json.loads(bridge.native_frame_from_record(session_record(), r).with_seq(0)) for r in records]
    assert [{**f, "seq": 0} for f in live] == replayed
    # An event stored without its key is shown under the session's current key.
    keyless = [EventRecord(SESSION, 9, None, "status.changed", {"status": "idle", "ts": 5}, 0)]
    frame = bridge.native_frame_from_record(session_record(keys=["agent:main:other"]), keyless[0])
    assert json.loads(frame.with_seq(1))["payload"]["sessionKey"] == "agent:main:other"
    await outlet.aclose()


async def test_session_list_changes_use_the_lookup_given_to_the_bridge() -> None:
    hub = Hub()
    bridge = Bridge(hub)
    outlet, wire = await connect(hub)
    outlet.sessions_list = True
    bridge.session_changed(SESSION, "create")  # before it knows how to show a session: nothing
    await bridge.join()

    looked_up: list[str] = []

    async def lookup(session_id: str) -> SessionRecord | None:
        looked_up.append(session_id)
        return session_record() if session_id == SESSION else None

    def row_of(record: SessionRecord) -> dict[str, Any]:
        return {"key": record.keys[0], "sessionId": record.id, "status": str(record.status)}

    bridge.list_sessions_with(lookup, row_of)
    bridge.session_changed(SESSION, "patch")
    bridge.session_changed("gone", "patch")
    bridge.session_changed(SESSION, "delete", deleted=session_record())
    await bridge.join()
    await settle(outlet)
    assert looked_up == [SESSION, "gone"]
    changed = [f["payload"] for f in wire.frames if f["event"] == "sessions.changed"]
    assert [(c["reason"], c.get("deleted")) for c in changed] == [("patch", None), ("delete", True)]
    assert changed[0]["session"] == {"key": KEY, "sessionId": SESSION, "status": "idle"}
    assert changed[0]["status"] == "idle" and changed[0]["agentId"] == "main"
    await outlet.aclose()


async def test_a_failing_lookup_is_logged_and_sends_nothing() -> None:
    hub = Hub()
    bridge = Bridge(hub)
    outlet, wire = await connect(hub)
    outlet.sessions_list = True

    async def lookup(session_id: str) -> SessionRecord | None:
        raise RuntimeError("database gone")

    bridge.list_sessions_with(lookup, lambda record: {})
    with structlog.testing.capture_logs() as logs:
        bridge.session_changed(SESSION, "patch")
        await bridge.join()
    await settle(outlet)
    assert not [f for f in wire.frames if f["event"] == "sessions.changed"]
    assert [(e["event"], e["session_id"]) for e in logs] == [("could not load a changed session", SESSION)]
    await bridge.aclose()
    await outlet.aclose()


# --- rendering only what is taken, once ---------------------------------------------------------


class Encodings:
    """Counts the frames the bridge serialises, by event name."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        for name in ("encode_event", "encode_event_json"):
            monkeypatch.setattr(gateway.bridge, name, self._counting(getattr(gateway.bridge, name)))

    def _counting(self, encode: Callable[..., Any]) -> Callable[..., Any]:
        def counted(event: str, *args: Any, **kwargs: Any) -> Any:
            self.names.append(event)
            return encode(event, *args, **kwargs)

        return counted


async def test_each_shape_is_serialised_once_and_only_when_some_connection_takes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    encodings = Encodings(monkeypatch)
    hub = Hub()
    bridge = Bridge(hub)
    events = iter(run_events())
    bridge.publish(next(events))  # nobody connected: nothing rendered
    assert encodings.names == []

    native_only = frozenset({"session-scoped-events", "native-events-only"})
    followers = [await connect(hub, native_only) for _ in range(3)]
    for event in itertools.islice(events, 3):  # agent started, message started, a delta
        bridge.publish(event)
    assert encodings.names == ["session.agent.started", "session.message.started", "session.message.delta"]

    encodings.names.clear()
    readers = [await connect(hub, follow=False) for _ in range(3)]  # OpenClaw clients, every session
    bridge.publish(next(events))  # a tool started: no reader takes the tool stream
    bridge.publish(next(events))  # the message completed
    assert encodings.names == ["session.tool.started", "session.message.completed", "session.message"]
    encodings.names.clear()
    bridge.publish(next(events))  # the run finished
    assert encodings.names == ["session.agent.finished", "agent", "chat"]
    for outlet, _ in [*followers, *readers]:
        await settle(outlet)
    assert all(wire.frames == followers[0][1].frames for _, wire in followers)
    assert all(wire.frames == readers[0][1].frames for _, wire in readers)
    assert [f["event"] for f in readers[0][1].frames] == ["agent", "chat"]
    for outlet, _ in [*followers, *readers]:
        await outlet.aclose()


# --- OpenClaw deltas, paced -----------------------------------------------------------------------


def a_long_reply(words: int) -> list[SessionEvent]:
    payloads: list[EventPayload] = [AgentStarted(), MessageStarted(message_id="m1", role="assistant")]
    payloads += [
        MessageDelta(message_id="m1", content_index=0, kind="text", delta=f"w{n} ")
        for n in range(1, words + 1)
    ]
    return [
        SessionEvent(SESSION, seq, data, run_id="r1", session_key=KEY, ts=1000 + seq)
        for seq, data in enumerate(payloads, start=1)
    ]


def the_end(seq: int, text: str) -> list[SessionEvent]:
    reply = {"role": "assistant", "content": [{"type": "text", "text": text}]}
    finished = AgentFinished(
        termination_reason=TerminationReason.NO_TOOL_CALLS,
        total_turns=1,
        total_tokens=3,
        duration_ms=4,
        stop_reason="stop",
    )
    return [
        SessionEvent(
            SESSION, seq, MessageCompleted(message_id="m1", message=reply), run_id="r1", session_key=KEY
        ),
        SessionEvent(SESSION, seq + 1, finished, run_id="r1", session_key=KEY),
    ]


async def test_openclaw_deltas_are_spaced_by_the_interval_in_order_and_the_final_has_the_whole_text() -> None:
    clock = Clock()
    hub = Hub()
    bridge = Bridge(hub, pacing=DeltaPacing(interval_s=0.075, stretch=0.0), clock=clock)
    native_follower, native_wire = await connect(
        hub, frozenset({"session-scoped-events", "native-events-only"}), clock=clock
    )
    reader, wire = await connect(hub, clock=clock, follow=False)
    events = a_long_reply(31)
    for event in events:  # a word every 10 ms
        bridge.publish(event)
        await settle(reader)
        clock.now += 0.01
    # The stream pauses with words held: the timer sends them once they are due.
    clock.now = 1.0
    async with asyncio.timeout(5):
        while "w31 " not in [
            f["payload"]["data"].get("delta", "")[-4:] for f in wire.frames if f["event"] == "agent"
        ]:
            await asyncio.sleep(0.01)
    text = "".join(f"w{n} " for n in range(1, 32))
    for event in the_end(len(events) + 1, text):
        bridge.publish(event)
    await settle(reader)
    await settle(native_follower)

    assistant = [
        (at, f["payload"])
        for at, f in zip(wire.written_at, wire.frames, strict=True)
        if f["event"] == "agent"
    ]
    deltas = [(at, p) for at, p in assistant if p["stream"] == "assistant"]
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(deltas)]
    assert len(deltas) < 31 and all(gap >= 0.075 - 1e-9 for gap in gaps), gaps
    assert "".join(p["data"]["delta"] for _, p in deltas) == text
    assert all(b[1]["data"]["text"].startswith(a[1]["data"]["text"]) for a, b in itertools.pairwise(deltas))
    assert [p["seq"] for _, p in assistant] == list(range(1, len(assistant) + 1))
    assert [f["seq"] for f in wire.frames] == list(range(1, len(wire.frames) + 1))
    chats = [f["payload"] for f in wire.frames if f["event"] == "chat"]
    assert [c["state"] for c in chats] == ["delta"] * len(deltas) + ["final"]
    assert chats[-1]["message"]["content"] == [{"type": "text", "text": text}]
    # The native stream still carries every delta.
    native_deltas = [f for f in native_wire.frames if f["event"] == "session.message.delta"]
    assert [f["payload"]["delta"] for f in native_deltas] == [f"w{n} " for n in range(1, 32)]
    await bridge.aclose()
    await reader.aclose()
    await native_follower.aclose()
