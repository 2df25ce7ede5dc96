"""The hub's routing: who gets which event, the follower index kept in step with subscriptions,
subscriptions by key bound when the key's session publishes, and removal."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from gateway.hub import Hub, Takers, encode_event
from gateway.outlet import Outlet

READ = frozenset({"operator.read"})


class Socket:
    """The network edge: records what was written."""

    direct = False

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send_text(self, data: str) -> None:
        self.sent.append(data)

    def write_now(self, texts: Sequence[str]) -> bool:
        return False

    async def close(self, code: int, reason: str) -> None:
        return None

    def events(self) -> list[tuple[str, Any]]:
        return [(f["event"], f.get("payload")) for f in map(json.loads, self.sent)]


def connect(hub: Hub, name: str, *, caps: frozenset[str] = frozenset(), scopes: frozenset[str] = READ) -> Any:
    socket = Socket()
    outlet = Outlet(name, socket, 1 << 20)
    outlet.grant(scopes, caps)
    outlet.start()
    hub.register(outlet)
    return outlet, socket


async def flush(*outlets: Outlet) -> None:
    for outlet in outlets:
        await outlet.drain()
    await asyncio.sleep(0)


async def test_native_events_go_to_followers_only_and_stop_when_they_unfollow() -> None:
    hub = Hub()
    a, sock_a = connect(hub, "a")
    b, sock_b = connect(hub, "b")
    a.follow_events("s1", 0)
    hub.session_native("s1", 1, encode_event("session.x", {"n": 1}))
    hub.session_native("s2", 1, encode_event("session.x", {"n": 2}))
    a.unfollow_events("s1")
    hub.session_native("s1", 2, encode_event("session.x", {"n": 3}))
    await flush(a, b)
    assert sock_a.events() == [("session.x", {"n": 1})] and sock_b.events() == []
    assert hub.delivered == 1
    await a.aclose()
    await b.aclose()


async def test_openclaw_frames_reach_every_reader_but_session_scoped_ones_only_when_subscribed() -> None:
    hub = Hub()
    everyone, sock_all = connect(hub, "all")
    scoped, sock_scoped = connect(hub, "scoped", caps=frozenset({"session-scoped-events"}))
    native_only, sock_native = connect(hub, "native", caps=frozenset({"native-events-only"}))
    no_read, sock_none = connect(hub, "none", scopes=frozenset())
    hub.openclaw_stream("s1", encode_event("chat", {"n": 1}))
    scoped.follow_messages("s1")
    hub.openclaw_stream("s1", encode_event("chat", {"n": 2}))
    hub.openclaw_stream("s1", encode_event("agent", {"n": 3}), tool=True)  # needs `tool-events`
    await flush(everyone, scoped, native_only, no_read)
    assert [p["n"] for _, p in sock_all.events()] == [1, 2]
    assert [p["n"] for _, p in sock_scoped.events()] == [2]
    assert sock_native.events() == [] and sock_none.events() == []
    for outlet in (everyone, scoped, native_only, no_read):
        await outlet.aclose()


async def test_a_key_subscription_is_bound_when_the_key_s_session_publishes() -> None:
    hub = Hub()
    outlet, socket = connect(hub, "a")
    outlet.wait_for_key("agent:main:fresh", events_after=0, messages=True)
    hub.session_named("agent:main:other", "s0")
    hub.session_native("s1", 1, encode_event("session.x", {"n": 0}))
    hub.session_named("agent:main:fresh", "s1")  # the session's first event is published next
    hub.session_native("s1", 1, encode_event("session.x", {"n": 1}))
    hub.session_message("s1", encode_event("session.message", {"n": 2}))
    await flush(outlet)
    assert socket.events() == [("session.x", {"n": 1}), ("session.message", {"n": 2})]
    await outlet.aclose()


async def test_a_key_being_looked_up_holds_its_session_s_events_for_the_call_s_resume() -> None:
    hub = Hub()
    outlet, socket = connect(hub, "a")
    lookup = outlet.begin_key_lookup("agent:main:fresh")
    assert lookup is not None
    hub.session_named("agent:main:fresh", "s1")  # the session publishes during the look-up
    hub.session_native("s1", 1, encode_event("session.x", {"n": 1}))
    await flush(outlet)
    assert socket.events() == [] and hub._key_waiters == {}
    assert outlet.end_key_lookup(lookup) == "s1"
    hold = outlet.hold("s1", 0)  # the resume: seq 1 comes from the log
    outlet.send_event(encode_event("session.x", {"n": 1}))
    outlet.release(hold, 1)
    hub.session_native("s1", 2, encode_event("session.x", {"n": 2}))
    await flush(outlet)
    assert socket.events() == [("session.x", {"n": 1}), ("session.x", {"n": 2})]
    await outlet.aclose()


async def test_a_removed_connection_leaves_no_trace_in_the_indexes() -> None:
    hub = Hub()
    outlet, socket = connect(hub, "a")
    outlet.follow_events("s1", 0)
    outlet.wait_for_key("agent:main:later", messages=True)
    outlet.begin_key_lookup("agent:main:looked-up")
    hub.remove("a")
    hub.session_native("s1", 1, encode_event("session.x", {"n": 1}))
    hub.session_named("agent:main:later", "s2")
    hub.session_message("s2", encode_event("session.message", {"n": 2}))
    await flush(outlet)
    assert socket.events() == [] and len(hub) == 0
    assert hub.takers("s1") == Takers(native=False, messages=False, compat=False)
    assert hub._key_waiters == {}
    await outlet.aclose()


async def test_sessions_changed_goes_to_list_subscribers() -> None:
    hub = Hub()
    watching, sock_watching = connect(hub, "w")
    other, sock_other = connect(hub, "o")
    watching.sessions_list = True
    hub.sessions_changed(encode_event("sessions.changed", {"n": 1}, droppable=True))
    await flush(watching, other)
    assert sock_watching.events() == [("sessions.changed", {"n": 1})] and sock_other.events() == []
    await watching.aclose()
    await other.aclose()


async def test_the_list_readers_index_follows_subscribe_unsubscribe_scope_and_leave() -> None:
    hub = Hub()
    assert not hub.takes_sessions_changed()
    early = Outlet("early", Socket(), 1 << 20)
    early.grant(READ, frozenset())
    early.sessions_list = True  # subscribed before it is registered: counted once it is
    assert not hub.takes_sessions_changed()
    early.start()
    hub.register(early)
    assert hub.takes_sessions_changed()
    early.sessions_list = False
    assert not hub.takes_sessions_changed()
    unscoped, sock_unscoped = connect(hub, "u", scopes=frozenset({"operator.write"}))
    unscoped.sessions_list = True  # without read scope it gets no sessions.changed
    assert not hub.takes_sessions_changed()
    watching, sock_watching = connect(hub, "w")
    watching.sessions_list = True
    assert hub.takes_sessions_changed()
    hub.sessions_changed(encode_event("sessions.changed", {"n": 1}, droppable=True))
    await flush(watching, unscoped)
    assert sock_watching.events() == [("sessions.changed", {"n": 1})] and sock_unscoped.events() == []
    hub.remove("w")
    assert not hub.takes_sessions_changed()
    watching.sessions_list = True  # after it left: the hub no longer hears of it
    assert not hub.takes_sessions_changed()
    for outlet in (early, unscoped, watching):
        await outlet.aclose()


async def test_takers_count_each_shape_as_connections_subscribe_unsubscribe_and_leave() -> None:
    hub = Hub()
    nobody = Takers(native=False, messages=False, compat=False)
    assert hub.takers("s1") == nobody
    native_only = frozenset({"session-scoped-events", "native-events-only"})
    follower, _ = connect(hub, "f", caps=native_only)
    follower.follow_events("s1", 0)
    assert hub.takers("s1") == Takers(native=True, messages=False, compat=False)
    assert hub.takers("s2") == nobody
    scoped, _ = connect(hub, "s", caps=frozenset({"session-scoped-events"}))
    scoped.follow_messages("s1")
    assert hub.takers("s1") == Takers(native=True, messages=True, compat=True)
    assert hub.takers("s2") == nobody and not hub.takes_tool_stream("s1")
    follower.unfollow_events("s1")
    scoped.unfollow_messages("s1")
    assert hub.takers("s1") == nobody
    # A reader of every session's streams takes OpenClaw frames of every session; one without
    # read scope takes nothing.
    reader, _ = connect(hub, "r", caps=frozenset({"tool-events"}))
    connect(hub, "w", scopes=frozenset({"operator.write"}))
    assert hub.takers("s9") == Takers(native=False, messages=False, compat=True)
    assert hub.takes_tool_stream("s9")
    hub.remove("r")
    assert hub.takers("s9") == nobody
    for outlet in [*hub.outlets.values(), reader]:
        await outlet.aclose()
