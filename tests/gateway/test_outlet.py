"""The outlet: seq numbering, the send buffer's overflow policy, the writer (direct and through
send, and its failures), holds during a resume replay and their bound, key subscriptions."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest
from structlog.testing import capture_logs

from gateway.errors import TransportClosed
from gateway.hub import Frame, encode_event
from gateway.key_subscriptions import KEY_WAIT_LIMIT
from gateway.outlet import Outlet


class Socket:
    """The network edge: what was written, in order. `paused` makes `send_text` wait (a client
    that does not read); `fail` makes the next write raise; `direct` offers the direct writer."""

    def __init__(self, *, direct: bool = False) -> None:
        self.direct = direct
        self.sent: list[str] = []
        self.readable = asyncio.Event()
        self.readable.set()
        self.fail: BaseException | None = None
        self.closed: tuple[int, str] | None = None
        self.direct_writes = 0

    @property
    def paused(self) -> bool:
        return not self.readable.is_set()

    def pause(self) -> None:
        self.readable.clear()

    def resume(self) -> None:
        self.readable.set()

    async def send_text(self, data: str) -> None:
        await self.readable.wait()
        if self.fail is not None:
            raise self.fail
        self.sent.append(data)

    def write_now(self, texts: Sequence[str]) -> bool:
        if not self.direct or self.paused or self.fail is not None:
            return False
        self.sent.extend(texts)
        self.direct_writes += 1
        return True

    async def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)

    def frames(self) -> list[dict[str, Any]]:
        return [json.loads(text) for text in self.sent]


def event(n: int, *, droppable: bool = False, size: int = 0) -> Frame:
    return encode_event("session.test", {"n": n, "pad": "x" * size}, droppable=droppable)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


@pytest.fixture
async def outlet_and_socket() -> Any:
    socket = Socket()
    closes: list[tuple[int, str]] = []

    async def on_close(code: int, reason: str) -> None:
        closes.append((code, reason))
        await socket.close(code, reason)

    outlet = Outlet("c1", socket, 4096, on_close=on_close)
    outlet.start()
    yield outlet, socket, closes
    await outlet.aclose()


async def test_events_are_numbered_in_send_order_and_responses_carry_no_seq(outlet_and_socket: Any) -> None:
    outlet, socket, _ = outlet_and_socket
    outlet.send_event(event(1))
    outlet.send_response('{"type":"res","id":"r1","ok":true}')
    outlet.send_event(event(2))
    await outlet.drain()
    frames = socket.frames()
    assert [f.get("seq") for f in frames] == [1, None, 2]
    assert [f.get("payload", {}).get("n") for f in frames] == [1, None, 2]


async def test_a_droppable_event_that_does_not_fit_is_dropped_and_its_seq_is_a_gap(
    outlet_and_socket: Any,
) -> None:
    outlet, socket, closes = outlet_and_socket
    socket.pause()
    outlet.send_event(event(1, size=1000))  # taken by the writer, which now waits
    await settle()
    outlet.send_event(event(2, size=2500))
    outlet.send_event(event(3, droppable=True, size=2500))  # over 4096 with the queued one
    outlet.send_event(event(4, size=10))
    socket.resume()
    await outlet.drain()
    assert [f["seq"] for f in socket.frames()] == [1, 2, 4]
    assert outlet.dropped == 1 and closes == [] and not outlet.closed


async def test_anything_else_that_does_not_fit_closes_the_connection_as_a_slow_consumer(
    outlet_and_socket: Any,
) -> None:
    outlet, socket, closes = outlet_and_socket
    socket.pause()
    outlet.send_event(event(1, size=1000))
    await settle()
    outlet.send_event(event(2, size=2500))
    with capture_logs() as logs:
        outlet.send_event(event(3, size=2500))
    await settle()
    assert outlet.closed and outlet.close_code == 1008
    assert closes == [(1008, "slow consumer")]
    assert [r["event"] for r in logs] == ["closing a slow consumer"]


async def test_a_failing_write_is_logged_and_closes_the_connection(outlet_and_socket: Any) -> None:
    outlet, socket, closes = outlet_and_socket
    socket.fail = RuntimeError("the socket object is in a bad state")
    with capture_logs() as logs:
        outlet.send_event(event(1))
        await outlet.drain()
        await settle()
    failed = [r for r in logs if r["event"] == "writing to a connection failed; closing it"]
    assert failed and failed[0]["log_level"] == "error" and failed[0]["conn_id"] == "c1"
    assert failed[0]["exc_info"] is True
    assert outlet.closed and closes == [(1011, "internal error")]


async def test_a_client_that_went_away_mid_write_is_logged_and_not_closed_again(
    outlet_and_socket: Any,
) -> None:
    outlet, socket, closes = outlet_and_socket
    socket.fail = TransportClosed("gone")
    with capture_logs() as logs:
        outlet.send_event(event(1))
        await outlet.drain()
        await settle()
    assert [(r["event"], r["log_level"]) for r in logs] == [("connection went away while writing", "info")]
    assert outlet.closed and closes == []


async def test_the_direct_writer_takes_every_queued_frame_in_one_write() -> None:
    socket = Socket(direct=True)
    outlet = Outlet("c2", socket, 1 << 20)
    for n in range(1, 6):
        outlet.send_event(event(n))
    outlet.start()  # five frames queued before the writer runs: one direct write
    try:
        await outlet.drain()
        assert [f["seq"] for f in socket.frames()] == [1, 2, 3, 4, 5]
        assert socket.direct_writes == 1 and outlet.written_direct == 5 and outlet.written_by_send == 0
        assert outlet.direct_writes
        socket.pause()  # the socket cannot take data now: frames wait for `send_text`
        outlet.send_event(event(6))
        await settle()
        socket.resume()
        await outlet.drain()
        assert [f["seq"] for f in socket.frames()][-1] == 6 and outlet.written_by_send == 1
    finally:
        await outlet.aclose()


async def test_live_events_are_held_during_a_replay_and_released_after_it(outlet_and_socket: Any) -> None:
    outlet, socket, _ = outlet_and_socket
    hold = outlet.hold("s1", 0)
    # Live events 3..5 arrive while the replay of 1..4 is being read.
    for seq in (3, 4, 5):
        assert outlet.offer_native("s1", seq, event(seq)) is False
    for seq in (1, 2, 3, 4):
        outlet.send_event(event(seq))
    outlet.release(hold, 4)
    outlet.offer_native("s1", 5, event(5))  # a duplicate of a held one: not sent twice
    outlet.offer_native("s1", 6, event(6))
    await outlet.drain()
    assert [f["payload"]["n"] for f in socket.frames()] == [1, 2, 3, 4, 5, 6]
    assert [f["seq"] for f in socket.frames()] == [1, 2, 3, 4, 5, 6]


async def test_held_events_past_the_bound_drop_droppable_ones_with_a_visible_gap(
    outlet_and_socket: Any,
) -> None:
    outlet, socket, closes = outlet_and_socket
    hold = outlet.hold("s1", 0)
    outlet.offer_native("s1", 1, event(1, size=3000))
    outlet.offer_native("s1", 2, event(2, droppable=True, size=3000))  # does not fit: dropped
    outlet.offer_native("s1", 3, event(3, size=10))
    assert outlet.held_bytes() < 4096
    outlet.release(hold, 0)
    await outlet.drain()
    frames = socket.frames()
    assert [f["payload"]["n"] for f in frames] == [1, 3]
    assert [f["seq"] for f in frames] == [1, 3], "the dropped event's seq is a gap"
    assert closes == []


async def test_held_events_past_the_bound_close_the_connection_when_not_droppable(
    outlet_and_socket: Any,
) -> None:
    outlet, _socket, closes = outlet_and_socket
    outlet.hold("s1", 0)
    outlet.offer_native("s1", 1, event(1, size=3000))
    outlet.offer_native("s1", 2, event(2, size=3000))
    await settle()
    assert outlet.closed and closes == [(1008, "slow consumer")]


class Pages:
    """A stored event log: `after(seq)` returns up to `page` events."""

    def __init__(self, count: int, *, size: int = 0, page: int = 3, fail_after: int | None = None) -> None:
        self.frames = {n: event(n, size=size) for n in range(1, count + 1)}
        self.page = page
        self.fail_after = fail_after
        self.reads = 0

    async def after(self, seq: int) -> list[tuple[int, Frame]]:
        self.reads += 1
        if self.fail_after is not None and seq >= self.fail_after:
            raise RuntimeError("the event log cannot be read")
        return [(n, self.frames[n]) for n in range(seq + 1, seq + 1 + self.page) if n in self.frames]


async def test_a_replay_larger_than_the_buffer_is_paced_by_the_reader_and_arrives_whole(
    outlet_and_socket: Any,
) -> None:
    outlet, socket, closes = outlet_and_socket
    socket.pause()
    hold = outlet.hold("s1", 0)
    outlet.replay(hold, Pages(20, size=1000), after=0, until=20)  # ~20 KB through a 4 KB buffer
    await settle()
    outlet.offer_native("s1", 21, event(21))  # live, while replaying
    assert outlet.buffered <= 4096
    socket.resume()
    for _ in range(200):
        if len(socket.sent) == 21:
            break
        await asyncio.sleep(0.005)
    assert [f["payload"]["n"] for f in socket.frames()] == list(range(1, 22))
    assert outlet.dropped == 0 and closes == []


async def test_a_newer_subscription_stops_the_replay_it_replaces(outlet_and_socket: Any) -> None:
    outlet, socket, _ = outlet_and_socket
    socket.pause()
    old = outlet.hold("s1", 0)
    outlet.replay(old, Pages(20, size=1000), after=0, until=20)
    await settle()
    outlet.follow_events("s1", 20)  # replaced: live from 20 on
    socket.resume()
    await outlet.drain()
    await settle()
    sent = len(socket.sent)
    outlet.offer_native("s1", 21, event(21))
    await outlet.drain()
    assert len(socket.sent) == sent + 1 and sent < 20
    outlet.release(old, 20)  # a late release of the replaced hold does nothing
    await outlet.drain()
    assert len(socket.sent) == sent + 1


async def test_a_replay_that_cannot_read_the_log_is_logged_and_asks_the_client_to_resume(
    outlet_and_socket: Any,
) -> None:
    outlet, _socket, closes = outlet_and_socket
    hold = outlet.hold("s1", 0)
    with capture_logs() as logs:
        outlet.replay(hold, Pages(9, fail_after=3), after=0, until=9)
        for _ in range(50):
            await asyncio.sleep(0)
    assert [r["event"] for r in logs if r["log_level"] == "error"] == [
        "resume replay failed; closing so the client resumes"
    ]
    assert closes == [(1013, "replay failed; resume again")]


async def test_a_key_subscription_follows_the_session_the_key_comes_to_name(outlet_and_socket: Any) -> None:
    outlet, socket, _ = outlet_and_socket
    outlet.wait_for_key("agent:main:new", events_after=0, messages=True)
    assert outlet.waits_for("agent:main:new") and not outlet.follows("s9")
    outlet.bind_key("agent:main:new", "s9")
    assert not outlet.waits_for("agent:main:new")
    assert outlet.follows("s9") and outlet.wants_messages("s9")
    assert outlet.offer_native("s9", 1, event(1))
    await outlet.drain()
    assert [f["payload"]["n"] for f in socket.frames()] == [1]
    assert outlet.stop_waiting("agent:main:new", events=True) is False


async def test_waiting_on_unused_keys_is_bounded_per_connection(outlet_and_socket: Any) -> None:
    outlet, _socket, _ = outlet_and_socket
    for n in range(KEY_WAIT_LIMIT):
        assert outlet.wait_for_key(f"agent:main:k{n}", messages=True)
    assert not outlet.wait_for_key("agent:main:one-more", messages=True)
    assert outlet.wait_for_key("agent:main:k0", events_after=0), "a key already waited on is not new"
    assert outlet.stop_waiting("agent:main:k1", messages=True)
    assert outlet.wait_for_key("agent:main:one-more", messages=True)


async def test_a_session_the_key_comes_to_name_during_a_look_up_is_held_for_the_resume(
    outlet_and_socket: Any,
) -> None:
    outlet, socket, _ = outlet_and_socket
    lookup = outlet.begin_key_lookup("agent:main:new")
    assert lookup is not None and outlet.waits_for("agent:main:new")
    outlet.bind_key("agent:main:new", "s9")  # the session's first run starts during the look-up
    assert not outlet.waits_for("agent:main:new")
    assert outlet.offer_native("s9", 1, event(1)) is False, "held: the call has not answered yet"
    await outlet.drain()
    assert socket.sent == []
    assert outlet.end_key_lookup(lookup) == "s9"
    # The call resumes from the log, which already holds seq 1; seq 2 is published meanwhile.
    hold = outlet.hold("s9", 0)
    outlet.replay(hold, Pages(1), after=0, until=1)
    outlet.offer_native("s9", 2, event(2))
    for _ in range(50):
        await outlet.drain()
        if len(socket.sent) >= 2:
            break
        await asyncio.sleep(0.005)
    outlet.offer_native("s9", 3, event(3))
    await outlet.drain()
    assert [f["payload"]["n"] for f in socket.frames()] == [1, 2, 3]


async def test_a_look_up_that_ends_before_the_key_names_a_session_leaves_nothing_behind(
    outlet_and_socket: Any,
) -> None:
    outlet, socket, _ = outlet_and_socket
    lookup = outlet.begin_key_lookup("agent:main:new")
    assert lookup is not None
    assert outlet.end_key_lookup(lookup) is None
    assert not outlet.waits_for("agent:main:new")
    outlet.bind_key("agent:main:new", "s9")
    assert not outlet.follows("s9") and outlet.held_bytes() == 0
    assert outlet.offer_native("s9", 1, event(1)) is False
    await outlet.drain()
    assert socket.sent == []


async def test_a_look_up_counts_against_the_limit_on_unused_keys(outlet_and_socket: Any) -> None:
    outlet, _socket, _ = outlet_and_socket
    lookup = outlet.begin_key_lookup("agent:main:looked-up")
    for n in range(KEY_WAIT_LIMIT - 1):
        assert outlet.wait_for_key(f"agent:main:k{n}", messages=True)
    assert not outlet.wait_for_key("agent:main:one-more", messages=True)
    assert outlet.begin_key_lookup("agent:main:one-more") is None
    assert outlet.begin_key_lookup("agent:main:looked-up") is not None, "a key already looked up is not new"
    assert lookup is not None
    outlet.end_key_lookup(lookup)
    assert outlet.begin_key_lookup("agent:main:one-more") is None, "another look-up of the key goes on"


async def test_a_resubscribe_on_the_same_connection_replaces_the_subscription(outlet_and_socket: Any) -> None:
    outlet, socket, _ = outlet_and_socket
    outlet.follow_events("s1", 0)
    outlet.offer_native("s1", 1, event(1))
    hold = outlet.hold("s1", 1)  # the client resumes after 1 on the same connection
    outlet.offer_native("s1", 2, event(2))
    outlet.release(hold, 1)
    outlet.offer_native("s1", 2, event(2))
    outlet.offer_native("s1", 3, event(3))
    await outlet.drain()
    assert [f["payload"]["n"] for f in socket.frames()] == [1, 2, 3]
