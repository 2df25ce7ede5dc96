"""`gateway.channel_inputs`: a chat message becomes a session input whose ledger record names its
binding and reply route, and that record is what finds a run's owner and a conversation again."""

from __future__ import annotations

from bindings import InboundMessage, ReplyRoute, Sender, SessionOrigin
from gateway.channel_inputs import ChannelInputs
from gateway.channel_replies import Owner, ReplyFeed
from tests.sessions.conftest import store_url
from tests.sessions.manager_support import HarnessFactory, harnesses

__all__ = ["harnesses", "store_url"]

BINDING = "discord:default"
KEY = "agent:main:discord:channel:500"
ROUTE = ReplyRoute(platform="discord", account_id="default", channel_id="500", reply_to="41")


def inbound(message_id: str = "41", text: str = "hello") -> InboundMessage:
    return InboundMessage(
        platform="discord",
        account_id="default",
        agent_id="main",
        session_key=KEY,
        text=text,
        sender=Sender(id="u1", name="ada"),
        chat_type="channel",
        channel_id="500",
        message_id=message_id,
        reply_route=ROUTE,
        guild_id="g1",
    )


async def test_a_chat_message_is_recorded_with_where_it_came_from(harnesses: HarnessFactory) -> None:
    h = await harnesses()
    inputs = ChannelInputs(h.manager, ReplyFeed())
    inputs.accepting = True
    message = inbound()

    result = await inputs.submit(BINDING, message)

    assert (result.status, result.run_id) == ("accepted", message.idempotency_key)
    record = await h.input(message.idempotency_key)
    assert record.source is not None
    assert (record.source["binding"], record.source["sessionKey"]) == (BINDING, KEY)
    assert record.source["replyRoute"] == ROUTE.as_dict()
    session = await h.manager.get(key=KEY)
    assert session.kind == "channel"
    assert session.origin is not None and session.origin["binding"] == BINDING
    assert session.origin["guildId"] == "g1"
    assert inputs.last_binding(KEY) == BINDING
    assert (await inputs.submit(BINDING, message)).status == "duplicate"
    await h.wait(message.idempotency_key)


async def test_the_ledger_record_finds_the_owner_and_the_conversation_again(
    harnesses: HarnessFactory,
) -> None:
    h = await harnesses()
    inputs = ChannelInputs(h.manager, ReplyFeed())
    inputs.accepting = True
    message = inbound()
    run_id = (await inputs.submit(BINDING, message)).run_id
    assert run_id is not None
    await h.wait(run_id)

    # A fresh process knows nothing in memory; the ledger still does.
    after = ChannelInputs(h.manager, ReplyFeed())
    assert await after.run_owners(run_id, {BINDING}) == [
        Owner(binding_id=BINDING, session_key=KEY, route=ROUTE)
    ]
    assert await after.run_owners(run_id, {"slack:default"}) == []
    assert await after.run_owners("no-such-run", {BINDING}) == []
    session = await h.manager.get(key=KEY)
    assert await after.restore_origin(BINDING, session.id) == SessionOrigin(route=ROUTE, last_message_id="41")
    assert await after.restore_origin("slack:default", session.id) is None
    assert after.last_binding(KEY) is None


async def test_a_run_started_by_an_operator_has_no_chat_owner(harnesses: HarnessFactory) -> None:
    h = await harnesses()
    session = await h.session(KEY)
    await h.send(session, "from the dashboard", "operator-1")
    await h.wait("operator-1")

    assert await ChannelInputs(h.manager, ReplyFeed()).run_owners("operator-1", {BINDING}) == []


async def test_nothing_is_submitted_while_not_accepting(harnesses: HarnessFactory) -> None:
    h = await harnesses()
    inputs = ChannelInputs(h.manager, ReplyFeed())
    message = inbound()

    result = await inputs.submit(BINDING, message)

    assert (result.status, result.reason) == ("rejected", "the gateway is stopping")
    assert await h.store.inputs.get(message.idempotency_key) is None
    assert inputs.last_binding(KEY) is None
