"""Chat messages as session inputs, and what the input ledger keeps of where they came from.

`ChannelInputs.submit` is what a binding's `submit` does (`bindings.InboundSink`): it ensures the
routed session (kind `direct` / `group` / `channel`, origin = where the conversation lives) and
submits the message to the session manager under the binding's idempotency key; the input
ledger records it, with its source (binding, session key, sender, reply route), before `submit`
returns, so before the platform is acknowledged. The binding then owns the run that answers
(`ReplyFeed.claim`).

The same record is read back here when nothing in memory knows the answer:

- `run_owners`: who relays a run nobody claimed (one resumed after a restart, or started by a
  collect window): the binding and reply route of the input that started it;
- `restore_origin`: where a session's conversation lives, for a channel tool that first runs
  after a restart.

`accepting` is false until the bindings start and again once the gateway drains; meanwhile
`submit` answers `rejected` and submits nothing. The binding that last submitted a message for a
session key is remembered (`last_binding`, at most `MAX_KEYS` keys, the least recent dropped).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Container
from typing import Any

import structlog

from bindings import InboundMessage, ReplyRoute, SessionOrigin, SubmitResult
from gateway.channel_replies import Owner, ReplyFeed
from gateway.commands import InboundCommands
from sessions import SessionManager
from sessions.errors import SessionsError, StoreUnavailable

log = structlog.get_logger("gateway.channels")

SUBMIT_ATTEMPTS = 3
"""Tries of a submit (and of an owner lookup) while the database is busy."""
MAX_KEYS = 10_000
"""Session keys whose last binding is remembered."""


class ChannelInputs:
    """Submits chat messages to `manager` and reads their ledger records back. Runs that an
    input starts or joins are claimed on `feed` for the binding that submitted it."""

    def __init__(
        self, manager: SessionManager, feed: ReplyFeed, commands: InboundCommands | None = None
    ) -> None:
        self._manager = manager
        self._feed = feed
        self._commands = commands
        """Chat commands, templates and skills (`gateway.commands`); without it messages go to
        the session manager as they are."""
        self._last_binding: OrderedDict[str, str] = OrderedDict()
        self.accepting = False
        """Whether messages are taken (from `Channels.start()` until the gateway drains)."""

    async def submit(self, binding_id: str, inbound: InboundMessage) -> SubmitResult:
        """Submit one message of `binding_id` (see the module docstring). A busy database or a
        full session lane is retried a few times; then, and for anything the session manager
        refuses, the answer is `rejected` with the reason."""
        for attempt in range(1, SUBMIT_ATTEMPTS + 1):
            if not self.accepting:
                break
            try:
                return await self._submit_once(binding_id, inbound)
            except StoreUnavailable as exc:
                if attempt == SUBMIT_ATTEMPTS:
                    return SubmitResult(status="rejected", reason=str(exc))
                await asyncio.sleep((exc.retry_after_ms or 500) / 1000)
            except SessionsError as exc:
                return SubmitResult(status="rejected", reason=str(exc))
        return SubmitResult(status="rejected", reason="the gateway is stopping")

    async def _submit_once(self, binding_id: str, inbound: InboundMessage) -> SubmitResult:
        manager = self._manager
        key = inbound.idempotency_key
        existing = await manager.store.inputs.get(key)
        if existing is not None:
            return SubmitResult(status="duplicate", run_id=existing.run_id)
        session = await manager.ensure_session(
            inbound.session_key,
            agent_id=inbound.agent_id,
            kind=_session_kind(inbound),
            origin=_origin(binding_id, inbound),
        )
        source = _source(binding_id, inbound)
        if self._commands is not None:
            # Only a sender the binding let through gets here: its access rules cover commands.
            result = await self._commands.submit(
                key=inbound.session_key,
                session=session,
                message=inbound.text,
                idempotency_key=key,
                queue_mode=inbound.queue_mode,
                source=source,
            )
        else:
            result = await manager.submit(
                session=session,
                message=inbound.text,
                idempotency_key=key,
                queue_mode=inbound.queue_mode,
                source=source,
            )
        if result.status != "started":
            return SubmitResult(status="duplicate", run_id=result.run_id)
        self._remember_binding(inbound.session_key, binding_id)
        run_id = self._answering_run(result.disposition, key, result.session.id)
        if run_id is not None:
            owner = Owner(binding_id=binding_id, session_key=inbound.session_key, route=inbound.reply_route)
            self._feed.claim(run_id, owner)
        return SubmitResult(status="accepted", run_id=run_id)

    def _answering_run(self, disposition: str, key: str, session_id: str) -> str | None:
        """The run that will answer an input: its own for a new run, else the active one it
        joined (steer, follow-up, collect). None when no run is known yet."""
        if disposition == "queued":
            return key
        active = self._manager.active_run_ids(session_id)
        return active[0] if active else None

    def _remember_binding(self, session_key: str, binding_id: str) -> None:
        self._last_binding[session_key] = binding_id
        self._last_binding.move_to_end(session_key)
        while len(self._last_binding) > MAX_KEYS:
            self._last_binding.popitem(last=False)

    def last_binding(self, session_key: str) -> str | None:
        """The binding that last submitted a message for `session_key` in this process."""
        return self._last_binding.get(session_key)

    # -- reading the ledger back -------------------------------------------------------------

    async def run_owners(self, run_id: str, bindings: Container[str]) -> list[Owner]:
        """The owner of a run nobody claimed, from the input that started it: none when that
        input did not come from one of `bindings`, or when the ledger stays busy (logged)."""
        for attempt in range(SUBMIT_ATTEMPTS):
            try:
                record = await self._manager.store.inputs.get(run_id)
                break
            except StoreUnavailable as exc:
                await asyncio.sleep((exc.retry_after_ms or 500) / 1000 * (attempt + 1))
            except SessionsError:
                log.exception("owner lookup failed", run_id=run_id)
                return []
        else:
            log.warning("owner lookup gave up; the run's reply is not relayed", run_id=run_id)
            return []
        source = record.source if record is not None else None
        if not isinstance(source, dict):
            return []
        binding_id = source.get("binding")
        key = source.get("sessionKey")
        route = source.get("replyRoute")
        if binding_id not in bindings or not isinstance(key, str):
            return []
        return [
            Owner(
                binding_id=str(binding_id),
                session_key=key,
                route=ReplyRoute.from_dict(route) if isinstance(route, dict) else None,
            )
        ]

    async def restore_origin(self, binding_id: str, session_id: str) -> SessionOrigin | None:
        """Where the session's conversation on `binding_id` lives, from its newest input that
        came through that binding; None when there is none."""
        sources = await self._manager.store.inputs.sources(session_id)
        source = next((found for found in sources if found.get("binding") == binding_id), {})
        route, message_id = source.get("replyRoute"), source.get("messageId")
        if not isinstance(route, dict) or message_id is None:
            return None
        return SessionOrigin(route=ReplyRoute.from_dict(route), last_message_id=str(message_id))


def _session_kind(inbound: InboundMessage) -> str | None:
    """The kind of a session a chat creates; None lets the key decide (a DM routed to the
    agent's main session stays `main`)."""
    parts = inbound.session_key.split(":")
    if len(parts) == 3 and parts[0] == "agent":
        return None
    return inbound.chat_type


def _origin(binding_id: str, inbound: InboundMessage) -> dict[str, Any]:
    origin: dict[str, Any] = {
        "binding": binding_id,
        "channel": inbound.platform,
        "accountId": inbound.account_id,
        "chatType": inbound.chat_type,
        "channelId": inbound.channel_id,
    }
    for name, value in (
        ("threadId", inbound.thread_id),
        ("parentChannelId", inbound.parent_channel_id),
        ("guildId", inbound.guild_id),
        ("teamId", inbound.team_id),
    ):
        if value is not None:
            origin[name] = value
    if inbound.chat_type == "direct":
        origin["peerId"] = inbound.sender.id
    return origin


def _source(binding_id: str, inbound: InboundMessage) -> dict[str, Any]:
    """The input ledger's record of where a message came from; the reply route in it lets a run
    resumed after a restart find its way back."""
    return {
        **_origin(binding_id, inbound),
        "messageId": inbound.message_id,
        "sessionKey": inbound.session_key,
        "sender": {"id": inbound.sender.id, "name": inbound.sender.name, "isBot": inbound.sender.is_bot},
        "replyRoute": inbound.reply_route.as_dict(),
        "receivedAt": inbound.received_at_ms,
    }
