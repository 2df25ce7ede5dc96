"""`gateway.channel_store`: the bindings' durable state, on SQLite and (when configured)
PostgreSQL, across a reopened store."""

from __future__ import annotations

import pytest

from bindings import DEDUPE_TTL_S, OutboxRecord, ReplyRoute
from bindings.access import PAIRING_MAX_PENDING, PAIRING_TTL_S
from gateway.channel_store import OUTBOX_KEEP_S, ChannelStore
from sessions.store import Store
from tests.sessions.conftest import store, store_url  # noqa: F401  (shared store fixtures)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms

    def advance(self, seconds: float) -> None:
        self.ms += int(seconds * 1000)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def channels(store: Store, clock: Clock) -> ChannelStore:  # noqa: F811
    return ChannelStore(store.database, clock=clock)


def record(key: str, *, run_id: str = "run-1", index: int = 0, text: str = "hi") -> OutboxRecord:
    return OutboxRecord(
        key=key,
        platform="discord",
        account_id="default",
        route=ReplyRoute(platform="discord", account_id="default", channel_id="500", reply_to="41"),
        run_id=run_id,
        chunk_index=index,
        text=text,
    )


async def test_a_remembered_event_is_seen_until_it_expires(channels: ChannelStore, clock: Clock) -> None:
    assert not await channels.dedupe_seen("slack", "default", "event:Ev1")
    await channels.dedupe_remember("slack", "default", "event:Ev1", DEDUPE_TTL_S)
    assert await channels.dedupe_seen("slack", "default", "event:Ev1")
    assert not await channels.dedupe_seen("slack", "other", "event:Ev1")  # per account
    assert not await channels.dedupe_seen("discord", "default", "event:Ev1")  # per platform
    clock.advance(DEDUPE_TTL_S - 1)
    assert await channels.dedupe_seen("slack", "default", "event:Ev1")
    clock.advance(1)
    assert not await channels.dedupe_seen("slack", "default", "event:Ev1")
    await channels.dedupe_remember("slack", "default", "event:Ev1", DEDUPE_TTL_S)  # an expired row renews
    assert await channels.dedupe_seen("slack", "default", "event:Ev1")


async def test_remembering_never_shortens_and_never_lasts_less_than_twenty_minutes(
    channels: ChannelStore, clock: Clock
) -> None:
    await channels.dedupe_remember("discord", "default", "msg:1:2", ttl_s=5)
    clock.advance(19 * 60)
    assert await channels.dedupe_seen("discord", "default", "msg:1:2")
    await channels.dedupe_remember("discord", "default", "msg:1:3", ttl_s=3600)
    await channels.dedupe_remember("discord", "default", "msg:1:3", ttl_s=5)
    clock.advance(30 * 60)
    assert await channels.dedupe_seen("discord", "default", "msg:1:3")


async def test_state_survives_reopening_the_store(store_url: str, clock: Clock) -> None:  # noqa: F811
    async with Store.open(store_url) as first:
        channels = ChannelStore(first.database, clock=clock)
        await channels.dedupe_remember("discord", "default", "msg:1:2", DEDUPE_TTL_S)
        await channels.outbox_put(record("k1"))
        await channels.outbox_update("k1", state="sent", platform_message_id="m1", text="hi there")
        await channels.set_channel_cursor("discord", "default", "500", "77")
        request = await channels.pairing_request("discord", "default", "u1", "mallory")
        assert request is not None
        await channels.pairing_approve(request.code)
    async with Store.open(store_url) as second:
        channels = ChannelStore(second.database, clock=clock)
        assert await channels.dedupe_seen("discord", "default", "msg:1:2")
        [pending] = await channels.outbox_pending("discord", "default")
        assert (pending.state, pending.platform_message_id, pending.text) == ("sent", "m1", "hi there")
        assert pending.route.reply_to == "41"
        assert await channels.channel_cursors("discord", "default") == {"500": "77"}
        assert await channels.pairing_is_approved("discord", "default", "u1")


async def test_outbox_pending_leaves_out_settled_records_and_add_never_overwrites(
    channels: ChannelStore,
) -> None:
    await channels.outbox_put(record("a", run_id="r1", index=0))
    await channels.outbox_put(record("b", run_id="r1", index=1))
    await channels.outbox_put(record("c", run_id="r2"))
    await channels.outbox_update("b", state="final")
    await channels.outbox_update("c", state="failed")
    assert [r.key for r in await channels.outbox_pending("discord", "default")] == ["a"]
    assert await channels.outbox_pending("slack", "default") == []

    assert not await channels.outbox_add(record("b", run_id="r1", index=1, text="again"))
    assert await channels.outbox_add(record("d", run_id="r1", index=2))
    assert [r.key for r in await channels.outbox_pending("discord", "default")] == ["a", "d"]


async def test_pairing_codes_are_limited_expire_and_approve_once(
    channels: ChannelStore, clock: Clock
) -> None:
    first = await channels.pairing_request("discord", "default", "u1", "one")
    assert first is not None and first.is_new and len(first.code) == 8
    again = await channels.pairing_request("discord", "default", "u1", "one")
    assert again is not None and not again.is_new and again.code == first.code
    for n in range(2, PAIRING_MAX_PENDING + 1):
        assert await channels.pairing_request("discord", "default", f"u{n}") is not None
    assert await channels.pairing_request("discord", "default", "u-extra") is None
    assert await channels.pairing_request("slack", "default", "u-extra") is not None  # per account
    assert [r.sender_id for r in await channels.pairing_list()][:2] == ["u1", "u2"]

    assert await channels.pairing_approve("nope") is None
    approved = await channels.pairing_approve(first.code.lower())
    assert approved is not None and approved.approved and approved.sender_id == "u1"
    assert await channels.pairing_approve(first.code) is None  # only once
    assert await channels.pairing_is_approved("discord", "default", "u1")
    assert not await channels.pairing_is_approved("discord", "default", "u2")

    clock.advance(PAIRING_TTL_S)
    assert await channels.pairing_list() == []
    late = await channels.pairing_request("discord", "default", "u2")
    assert late is not None and late.is_new  # the expired request gave way to a new code


async def test_sweep_removes_only_what_expired(channels: ChannelStore, clock: Clock) -> None:
    await channels.dedupe_remember("discord", "default", "old", DEDUPE_TTL_S)
    await channels.outbox_put(record("settled"))
    await channels.outbox_update("settled", state="final")
    await channels.outbox_put(record("open", run_id="r9"))
    request = await channels.pairing_request("discord", "default", "u1")
    assert request is not None
    clock.advance(max(DEDUPE_TTL_S, PAIRING_TTL_S))
    await channels.dedupe_remember("discord", "default", "fresh", DEDUPE_TTL_S)
    assert await channels.sweep() == 2  # the dedupe row and the pairing request
    assert await channels.dedupe_seen("discord", "default", "fresh")
    clock.advance(OUTBOX_KEEP_S)
    assert await channels.sweep() == 2  # the settled outbox row and the "fresh" dedupe row
    assert [r.key for r in await channels.outbox_pending("discord", "default")] == ["open"]


async def test_a_pairing_request_keeps_where_the_sender_wrote_and_approval_can_name_the_channel(
    channels: ChannelStore,
) -> None:
    route = ReplyRoute(platform="slack", account_id="work", channel_id="D1", thread_id=None, reply_to="1.5")
    request = await channels.pairing_request("slack", "work", "U9", "eve", reply_route=route)
    assert request is not None and request.reply_route == route
    assert [r.reply_route for r in await channels.pairing_list()] == [route]
    assert await channels.pairing_approve(request.code, platform="discord") is None
    assert await channels.pairing_approve(request.code, platform="slack", account_id="other") is None
    approved = await channels.pairing_approve(request.code, platform="slack", account_id="work")
    assert approved is not None and approved.reply_route == route
    assert await channels.pairing_is_approved("slack", "work", "U9")
