"""The cluster bus against the real Redis: two nodes exchange event batches and control messages;
connections killed, cut or silently dead are noticed and repaired, and what was published
meanwhile arrives."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.cluster.bus import Bus
from sessions import EventRecord
from tests.gateway.cluster.conftest import REDIS_URL, Proxy, eventually, kill_client, turn


class Node:
    """A bus and what its callbacks received."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.records: list[EventRecord] = []
        self.messages: list[tuple[str, dict[str, Any], str]] = []
        self.resubscribed: list[int] = []
        bus.on_events = self.records.extend
        bus.on_message = lambda kind, body, origin: self.messages.append((kind, body, origin))
        bus.on_resubscribed = self._resubscribed

    async def _resubscribed(self, since_ms: int) -> None:
        self.resubscribed.append(since_ms)

    def seqs(self, session_id: str = "s1") -> list[int]:
        return [r.seq for r in self.records if r.session_id == session_id]


@pytest.fixture
async def nodes(prefix: str) -> AsyncIterator[Callable[..., Any]]:
    started: list[Bus] = []

    async def start(node_id: str, *, url: str = REDIS_URL, max_queued: int = 10_000) -> Node:
        bus = Bus(url, prefix=prefix, node_id=node_id, max_queued=max_queued)
        node = Node(bus)
        started.append(bus)
        await bus.start()
        await eventually(lambda: bus.connected, what=f"{node_id} subscribed")
        return node

    yield start
    for bus in started:
        await bus.aclose()


async def test_batches_and_messages_reach_the_other_node_not_the_sender(nodes: Any) -> None:
    a, b = await nodes("a"), await nodes("b")
    sent = turn("s1", 1)
    a.bus.publish_events([sent, turn("s1", 2)])
    a.bus.send("wake", {"sessionId": "s1"}, node="b")
    a.bus.send("changed", {"sessionId": "s1", "reason": "x"})
    b.bus.send("settled", {"sessionId": "s1"}, node="a")
    b.bus.send("released", {"sessionId": "s2"})
    await eventually(lambda: len(b.records) == 2 and len(b.messages) == 2, what="b's deliveries")
    await eventually(lambda: len(a.messages) == 2, what="a's deliveries")

    first = b.records[0]
    assert (first.session_id, first.seq, first.run_id, first.type) == ("s1", 1, "r1", "turn.started")
    assert first.payload == sent.log_payload()
    assert first.created_at == sent.ts
    assert b.seqs() == [1, 2]
    assert b.messages == [
        ("wake", {"sessionId": "s1"}, "a"),
        ("changed", {"sessionId": "s1", "reason": "x"}, "a"),
    ]
    assert a.messages == [("settled", {"sessionId": "s1"}, "b"), ("released", {"sessionId": "s2"}, "b")]
    assert a.records == []  # its own batch came back on the channel and was skipped
    assert (a.bus.published, a.bus.received) == (3, 2)
    assert (b.bus.published, b.bus.received) == (2, 3)


async def test_a_message_for_another_node_is_not_delivered_here(nodes: Any) -> None:
    a, b, c = await nodes("a"), await nodes("b"), await nodes("c")
    a.bus.send("abort", {"runId": "r1"}, node="c")
    a.bus.send("wake", {}, node="b")
    await eventually(lambda: len(b.messages) == 1 and len(c.messages) == 1)
    assert b.messages == [("wake", {}, "a")]
    assert c.messages == [("abort", {"runId": "r1"}, "a")]


async def test_many_batches_arrive_in_order(nodes: Any) -> None:
    a, b = await nodes("a"), await nodes("b")
    seq = 0
    for size in [1, 2, 3] * 400:
        a.bus.publish_events([turn("s1", seq + i + 1) for i in range(size)])
        seq += size
    await eventually(lambda: len(b.records) == seq, timeout=30, what="every event")
    assert b.seqs() == list(range(1, seq + 1))
    assert b.bus.received == 1200
    assert b.resubscribed == [] and b.bus.reconnects == 0


async def test_a_killed_subscription_is_made_again_and_caught_up_from_when_it_was_lost(
    nodes: Any, redis: Redis
) -> None:
    a, b = await nodes("a"), await nodes("b")
    a.bus.publish_events([turn("s1", 1)])
    await eventually(lambda: b.seqs() == [1])
    before_kill = int(time.time() * 1000)

    assert await kill_client(redis, b.bus.sub_name) == 1
    await eventually(lambda: b.resubscribed != [], what="on_resubscribed")
    after = int(time.time() * 1000)
    assert b.bus.connected and b.bus.reconnects == 1
    # The last thing heard before the kill: no later than the kill, and recent (it pings when idle).
    assert before_kill - 3_000 <= b.resubscribed[0] <= before_kill <= after

    a.bus.publish_events([turn("s1", 2)])
    await eventually(lambda: b.seqs() == [1, 2])


async def test_a_killed_publisher_connection_sends_what_it_was_given(nodes: Any, redis: Redis) -> None:
    a, b = await nodes("a"), await nodes("b")
    a.bus.publish_events([turn("s1", 1)])
    await eventually(lambda: b.seqs() == [1])
    assert await kill_client(redis, a.bus.pub_name) == 1

    for seq in range(2, 52):
        a.bus.publish_events([turn("s1", seq)])
    await eventually(lambda: len(b.seqs()) >= 51, what="every event")
    assert b.seqs() == list(range(1, 52))


async def test_while_redis_is_away_publishes_wait_and_the_subscriber_catches_up(
    nodes: Any, proxy: Proxy
) -> None:
    a, b = await nodes("a", url=proxy.url), await nodes("b")
    a.bus.publish_events([turn("s1", 1)])
    await eventually(lambda: b.seqs() == [1])

    before_cut = int(time.time() * 1000)
    await proxy.cut()
    await eventually(lambda: not a.bus.connected, what="a noticing the cut")
    # What was already on its way may still be read (and heard) after the cut returns, on a busy
    # loop milliseconds later; nothing is heard once the subscription is known lost.
    noticed_at = int(time.time() * 1000)
    for seq in range(2, 6):
        a.bus.publish_events([turn("s1", seq)])
    a.bus.send("wake", {"n": 1}, node="b")
    await asyncio.sleep(0.5)
    assert b.seqs() == [1]
    assert a.bus.queued == 5

    await proxy.restore()
    await eventually(lambda: b.seqs() == [1, 2, 3, 4, 5] and len(b.messages) == 1, what="queued messages")
    await eventually(lambda: a.resubscribed != [], what="a's on_resubscribed")
    assert before_cut - 3_000 <= a.resubscribed[0] <= noticed_at
    assert a.bus.queued == 0 and a.bus.dropped == 0


async def test_a_full_queue_drops_the_oldest_and_counts_them(nodes: Any, proxy: Proxy) -> None:
    a, b = await nodes("a", url=proxy.url, max_queued=5), await nodes("b")
    await proxy.cut()
    await eventually(lambda: not a.bus.connected)
    for seq in range(1, 9):
        a.bus.publish_events([turn("s1", seq)])
    assert a.bus.queued == 5
    assert a.bus.dropped == 3

    await proxy.restore()
    await eventually(lambda: len(b.seqs()) == 5, what="what was kept")
    assert b.seqs() == [4, 5, 6, 7, 8]
    assert a.bus.dropped == 3


async def test_a_silently_dead_subscription_is_noticed_within_seconds(nodes: Any, proxy: Proxy) -> None:
    b = await nodes("b", url=proxy.url)
    await asyncio.sleep(2.5)  # idle, yet alive: its pings are answered
    assert b.bus.connected and b.bus.reconnects == 0
    proxy.freeze()
    frozen_at = time.monotonic()
    await eventually(lambda: not b.bus.connected, timeout=6, what="the dead connection noticed")
    assert time.monotonic() - frozen_at < 3.5

    await proxy.cut()
    proxy.thaw()
    await proxy.restore()
    await eventually(lambda: b.bus.connected and b.resubscribed != [], timeout=10, what="resubscribed")


async def test_a_bus_that_cannot_connect_at_start_catches_up_from_its_start(
    prefix: str, proxy: Proxy
) -> None:
    await proxy.cut()
    bus = Bus(proxy.url, prefix=prefix, node_id="late")
    node = Node(bus)
    started_ms = int(time.time() * 1000)
    async with bus:
        await asyncio.sleep(0.3)
        assert not bus.connected
        await proxy.restore()
        await eventually(lambda: node.resubscribed != [], what="on_resubscribed")
        assert started_ms <= node.resubscribed[0] <= started_ms + 1_000
    assert not bus.connected


async def test_close_is_idempotent_and_stops_publishing(prefix: str) -> None:
    bus = Bus(REDIS_URL, prefix=prefix, node_id="a")
    await bus.start()
    await bus.start()
    await eventually(lambda: bus.connected)
    assert await bus.flush(1.0)
    await bus.aclose()
    await bus.aclose()
    bus.publish_events([turn("s1", 1)])
    bus.send("wake", {})
    assert bus.queued == 0 and not bus.connected
