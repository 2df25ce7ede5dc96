"""`Channels`: the daemon's chat bindings and the host they run on.

Built by `Gateway.start()` when `[bindings]` is configured: `Channels(config, state)` validates
`[bindings.discord.<account>]` / `[bindings.slack.<account>]` (a bad table or a missing secret is
one `ConfigError` naming the key and the file) and builds one binding per enabled account; the
gateway then starts the session manager (whose recovery events the reply feed must see) and calls
`start()`; `stop_inbound()` and `stop()` end it.

Each binding gets its own view of the host (`_Host`, a `bindings.BindingHost`):

- `submit` ensures the routed session (kind `direct` / `group` / `channel`, origin = where the
  conversation lives) and submits the message to the session manager under the binding's
  idempotency key; the input ledger records it before `submit` returns, so before the platform is
  acknowledged. The binding then owns the run that answers (`ReplyFeed.claim`).
- `subscribe_replies` is fed by the bridge through `ReplyFeed`: only runs the binding owns.
- dedupe, outbox, pairing and cursors are durable (`ChannelStore`).
- `report_state` feeds `status()` (`channels.status`).

Webhook endpoints (Discord interactions, Slack Events API) are served under
`/bindings/discord/<account>/interactions` and `/bindings/slack/<account>/events` (`webhooks`).

While the gateway drains (`stop_inbound()`), the host takes no new messages and records nothing
for them (`submit` answers `rejected`; no dedupe row, no cursor move): Discord's catch-up picks
them up after the restart, and Slack, left unacknowledged, delivers them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import httpx
import structlog
from starlette.routing import Route, Router

from agent_core import AgentTool
from bindings import (
    BindingConfigError,
    ConnectionState,
    DiscordAccountConfig,
    DiscordBinding,
    InboundMessage,
    OutboxRecord,
    OutboxState,
    PairingRequest,
    ReplyEvent,
    ReplyListener,
    ReplyRelay,
    ReplyRoute,
    SessionOrigin,
    SlackAccountConfig,
    SlackBinding,
    SubmitResult,
)
from gateway.channel_config import enabled_accounts, source_name, validate_bindings
from gateway.channel_replies import Owner, ReplyFeed
from gateway.channel_resume import settle_outbox
from gateway.channel_store import ChannelStore
from gateway.config import GatewayConfig
from gateway.errors import ConfigError, ConfigProblem
from sessions.errors import SessionsError, StoreUnavailable
from sessions.records import SessionRecord

if TYPE_CHECKING:
    from gateway.state import GatewayState

log = structlog.get_logger("gateway.channels")

SWEEP_INTERVAL_S = 300.0
STOP_GRACE_S = 5.0
"""How long `stop()` lets the relays finish the replies of runs that just ended."""
SUBMIT_ATTEMPTS = 3
HTTP_TIMEOUT = httpx.Timeout(30.0, connect=10.0)
_MAX_KEYS = 10_000


class _Binding(Protocol):
    """What `Channels` uses of `DiscordBinding` and `SlackBinding`."""

    binding_id: str
    account_id: str
    relay: ReplyRelay

    @property
    def platform(self) -> str: ...

    @property
    def state(self) -> ConnectionState: ...

    @property
    def queue_size(self) -> int: ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    def tools_for(
        self, session_key: str, restore: Callable[[], Awaitable[SessionOrigin | None]] | None = None
    ) -> list[AgentTool]: ...

    async def announce_approval(self, request: PairingRequest) -> bool: ...

    def reconfigure(self, config: Any) -> None: ...


class Channels:
    """The configured bindings, their host, and what the daemon asks of them.

    Raises `ConfigError` for an invalid `[bindings]` table or a secret whose environment variable
    is not set. `env` holds the secrets (default: the process environment).
    """

    def __init__(
        self, config: GatewayConfig, state: GatewayState, *, env: Mapping[str, str] | None = None
    ) -> None:
        self._state = state
        self._settings = validate_bindings(config, env)
        self._source = source_name(config)
        self.store = ChannelStore(state.store.database)
        self.feed = ReplyFeed(fallback=self._fallback)
        self._reported: dict[str, tuple[str, float | None]] = {}
        self._last_binding: OrderedDict[str, str] = OrderedDict()
        self._accepting = False
        self._http = httpx.AsyncClient(timeout=HTTP_TIMEOUT, follow_redirects=False)
        self._bindings: dict[str, _Binding] = {}
        self._chunk_limits: dict[str, int] = {}
        self._modes: dict[str, str] = {}
        self._configs: dict[str, DiscordAccountConfig | SlackAccountConfig] = {}
        self._env = env
        self._build(env)
        self.webhooks = self._webhook_router()
        self._remove_listener: Callable[[], None] | None = state.bridge.add_listener(self.feed.on_event)
        self._task: asyncio.Task[None] | None = None
        self._announcements: set[asyncio.Task[None]] = set()
        self._closed = False

    # -- construction ------------------------------------------------------------------------

    def _build(self, env: Mapping[str, str] | None) -> None:
        for platform, account_id, cfg in enabled_accounts(self._settings):
            binding_id = f"{platform}:{account_id}"
            host = _Host(self, binding_id)
            try:
                binding: _Binding
                if isinstance(cfg, DiscordAccountConfig):
                    binding = DiscordBinding(cfg, host, self._http, account_id=account_id, env=env)
                else:
                    binding = SlackBinding(cfg, host, self._http, account_id=account_id, env=env)
            except BindingConfigError as exc:
                where = f"bindings.{platform}.{account_id}"
                raise ConfigError([ConfigProblem(self._source, where, str(exc))]) from None
            self._bindings[binding_id] = binding
            self._configs[binding_id] = cfg
            self._chunk_limits[binding_id] = cfg.chunk_limit
            self._modes[binding_id] = cfg.mode

    def _webhook_router(self) -> Router:
        routes: list[Route] = []
        for binding in self._bindings.values():
            mode = self._modes[binding.binding_id]
            if isinstance(binding, DiscordBinding) and mode == "interactions":
                path = f"/discord/{binding.account_id}/interactions"
                routes.append(Route(path, endpoint=binding.interactions_app()))
            elif isinstance(binding, SlackBinding) and mode == "events":
                routes.append(Route(f"/slack/{binding.account_id}/events", endpoint=binding.events_app()))
        return Router(routes=routes, redirect_slashes=False)

    @property
    def bindings(self) -> dict[str, _Binding]:
        return dict(self._bindings)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Finish the replies a previous process left in flight, then start every binding
        (they connect in the background). Call after the session manager started."""
        if self._task is not None or self._closed:
            return
        for binding_id, binding in self._bindings.items():
            try:
                await settle_outbox(
                    self.store,
                    self._state.store,
                    platform=binding.platform,
                    account_id=binding.account_id,
                    chunk_limit=self._chunk_limits[binding_id],
                )
            except SessionsError:
                log.exception("could not settle the outbox", binding=binding_id)
        self._accepting = True
        self._task = asyncio.create_task(self._background(), name="channels")
        for binding in self._bindings.values():
            await binding.start()

    def stop_inbound(self) -> None:
        """Take no more messages (the gateway is draining). Idempotent."""
        self._accepting = False

    async def stop(self) -> None:
        """Let the relays finish replies of runs that just ended (up to `STOP_GRACE_S`), then
        close every binding and the HTTP client. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._accepting = False
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and self._streaming():  # noqa: ASYNC110 - relays expose a count only
            await asyncio.sleep(0.05)
        for binding in self._bindings.values():
            try:
                await binding.aclose()
            except Exception:
                log.exception("binding did not close cleanly", binding=binding.binding_id)
        if self._remove_listener is not None:
            self._remove_listener()
            self._remove_listener = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for announcement in list(self._announcements):
            announcement.cancel()
        await asyncio.gather(*self._announcements, return_exceptions=True)
        self.feed.close()
        await self._http.aclose()

    def _streaming(self) -> bool:
        return any(b.relay.active_streams for b in self._bindings.values())

    async def _background(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._resolve_owners())
            tg.create_task(self._sweep())

    async def _sweep(self) -> None:
        while True:
            try:
                removed = await self.store.sweep()
            except Exception:  # the next sweep tries again
                log.exception("channel sweep failed")
            else:
                if removed:
                    log.debug("channel rows swept", removed=removed)
            await asyncio.sleep(SWEEP_INTERVAL_S)

    async def _resolve_owners(self) -> None:
        """Owners of runs nobody claimed, from the input that started each run."""
        while True:
            run_id = await self.feed.lookups.get()
            try:
                owners = await self._owners_from_ledger(run_id)
            except Exception:  # one bad ledger row must not stop the lookups
                log.exception("owner lookup failed", run_id=run_id)
                owners = []
            self.feed.resolve(run_id, owners)

    async def _owners_from_ledger(self, run_id: str) -> list[Owner]:
        for attempt in range(SUBMIT_ATTEMPTS):
            try:
                record = await self._state.store.get_input(run_id)
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
        if binding_id not in self._bindings or not isinstance(key, str):
            return []
        return [
            Owner(
                binding_id=str(binding_id),
                session_key=key,
                route=ReplyRoute.from_dict(route) if isinstance(route, dict) else None,
            )
        ]

    def _fallback(self, owner: Owner, event: ReplyEvent) -> None:
        """A run's owner has no subscription for its session (the run was resumed after a
        restart, or the subscription was evicted): hand the event to its relay directly."""
        binding = self._bindings.get(owner.binding_id)
        if binding is None:
            return
        if owner.route is not None:
            binding.relay.bind(owner.session_key, owner.route, event.run_id)
        binding.relay.on_event(owner.session_key, event)

    def reload(self, config: GatewayConfig) -> list[str]:
        """Apply a re-read `[bindings]` to the running bindings and return the dotted keys that
        need a restart: accounts added, removed or disabled, and changed `RESTART_KEYS` (the
        connection, secrets and reply relay settings, which keep their old values meanwhile).
        Everything else (access, routing, queueing, threads) applies from the next message.
        Raises `ConfigError`, before changing anything, for an invalid table or a missing
        secret."""
        settings = validate_bindings(config, self._env)
        fresh = {f"{platform}:{account}": cfg for platform, account, cfg in enabled_accounts(settings)}
        restart = [f"bindings.{bid.replace(':', '.', 1)}" for bid in sorted(set(fresh) ^ set(self._bindings))]
        for binding_id, binding in self._bindings.items():
            cfg, old = fresh.get(binding_id), self._configs[binding_id]
            if cfg is None or cfg == old:
                continue
            kept = old.restart_changes(cfg)
            restart += [f"bindings.{binding_id.replace(':', '.', 1)}.{key}" for key in kept]
            merged = cfg.model_copy(update={key: getattr(old, key) for key in kept})
            binding.reconfigure(merged)
            self._configs[binding_id] = merged
            log.info("binding reconfigured", binding=binding_id, needs_restart=kept)
        return restart

    # -- inbound -----------------------------------------------------------------------------

    @property
    def accepting(self) -> bool:
        return self._accepting

    async def submit(self, binding_id: str, inbound: InboundMessage) -> SubmitResult:
        """The host's `submit` for `binding_id` (see the module docstring). A busy database or
        a full session lane is retried a few times; then, and for anything the session manager
        refuses, the answer is `rejected` with the reason."""
        for attempt in range(1, SUBMIT_ATTEMPTS + 1):
            if not self._accepting:
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
        manager = self._state.manager
        key = inbound.idempotency_key
        existing = await manager.store.get_input(key)
        if existing is not None:
            return SubmitResult(status="duplicate", run_id=existing.run_id)
        session = await manager.ensure_session(
            inbound.session_key,
            agent_id=inbound.agent_id,
            kind=_session_kind(inbound),
            origin=_origin(binding_id, inbound),
        )
        result = await manager.submit(
            session=session,
            message=inbound.text,
            idempotency_key=key,
            queue_mode=inbound.queue_mode,
            source=_source(binding_id, inbound),
        )
        if result.status != "started":
            return SubmitResult(status="duplicate", run_id=result.run_id)
        self._remember_binding(inbound.session_key, binding_id)
        run_id = self._answering_run(result.disposition, key, result.session.id)
        if run_id is not None:
            owner = Owner(binding_id=binding_id, session_key=inbound.session_key, route=inbound.reply_route)
            self.feed.claim(run_id, owner)
        return SubmitResult(status="accepted", run_id=run_id)

    def _answering_run(self, disposition: str, key: str, session_id: str) -> str | None:
        """The run that will answer an input: its own for a new run, else the active one it
        joined (steer, follow-up, collect). None when no run is known yet."""
        if disposition == "queued":
            return key
        active = self._state.manager.active_run_ids(session_id)
        return active[0] if active else None

    def _remember_binding(self, session_key: str, binding_id: str) -> None:
        self._last_binding[session_key] = binding_id
        self._last_binding.move_to_end(session_key)
        while len(self._last_binding) > _MAX_KEYS:
            self._last_binding.popitem(last=False)

    def report_state(self, binding_id: str, state: str, last_inbound_at: float | None) -> None:
        self._reported[binding_id] = (state, last_inbound_at)

    # -- what the daemon asks ----------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """One row per binding: `state` (connecting | ready | resuming | closed), `lastInboundAt`
        (Unix ms of the last frame received, null before the first) and
        `secondsSinceLastInbound`."""
        now = time.time()
        rows = []
        for binding_id, binding in self._bindings.items():
            state, last = self._reported.get(binding_id, (binding.state.value, None))
            rows.append(
                {
                    "id": binding_id,
                    "channel": binding.platform,
                    "accountId": binding.account_id,
                    "mode": self._modes[binding_id],
                    "state": state,
                    "connected": state == ConnectionState.READY.value,
                    "lastInboundAt": int(last * 1000) if last is not None else None,
                    "secondsSinceLastInbound": round(max(0.0, now - last), 3) if last is not None else None,
                    "inboundQueue": binding.queue_size,
                    "replyStreams": binding.relay.active_streams,
                }
            )
        return rows

    def tools_for(self, session: SessionRecord) -> list[AgentTool]:
        """The channel tools of the binding a session's conversation comes from: the binding
        that last relayed a message of it, else (after a restart) the binding its `origin`
        names, which finds the conversation in the input ledger when a tool runs. None for a
        session that did not come from a chat."""
        for key in session.keys:
            preferred = self._last_binding.get(key)
            order = [preferred] if preferred in self._bindings else []
            order += [bid for bid in self._bindings if bid != preferred]
            for binding_id in order:
                assert binding_id is not None
                tools = self._bindings[binding_id].tools_for(key)
                if tools:
                    return tools
        origin = session.origin or {}
        binding = self._bindings.get(str(origin.get("binding")))
        if binding is None or not session.keys:
            return []
        return binding.tools_for(
            session.keys[0], partial(self._restore_origin, binding.binding_id, session.id)
        )

    async def _restore_origin(self, binding_id: str, session_id: str) -> SessionOrigin | None:
        sources = await self._state.store.input_sources(session_id)
        source = next((found for found in sources if found.get("binding") == binding_id), {})
        route, message_id = source.get("replyRoute"), source.get("messageId")
        if not isinstance(route, dict) or message_id is None:
            return None
        return SessionOrigin(route=ReplyRoute.from_dict(route), last_message_id=str(message_id))

    async def pairing_list(self) -> list[dict[str, Any]]:
        return [_pairing_row(request) for request in await self.store.pairing_list()]

    async def pairing_approve(
        self, code: str, *, channel: str | None = None, account_id: str | None = None
    ) -> dict[str, Any] | None:
        """Approve a pairing request (of `channel` and `account_id` when given) and tell the
        sender, in the background, where they wrote from. None when no live request matches."""
        request = await self.store.pairing_approve(code, platform=channel, account_id=account_id)
        if request is None:
            return None
        log.info(
            "pairing approved", channel=request.platform, account=request.account_id, sender=request.sender_id
        )
        binding = self._bindings.get(f"{request.platform}:{request.account_id}")
        if binding is not None and not self._closed:
            task = asyncio.create_task(self._announce(binding, request), name=f"pairing:{request.code}")
            self._announcements.add(task)
            task.add_done_callback(self._announcements.discard)
        return _pairing_row(request)

    async def _announce(self, binding: _Binding, request: PairingRequest) -> None:
        try:
            await binding.announce_approval(request)
        except Exception as exc:  # the approval stands; only the courtesy message is lost
            log.warning(
                "could not tell the sender about the approval", binding=binding.binding_id, error=repr(exc)
            )


class _Host:
    """One binding's view of the host: the `bindings.BindingHost` it is given."""

    def __init__(self, channels: Channels, binding_id: str) -> None:
        self._channels = channels
        self._store = channels.store
        self._binding_id = binding_id

    async def submit(self, inbound: InboundMessage) -> SubmitResult:
        return await self._channels.submit(self._binding_id, inbound)

    def subscribe_replies(self, session_key: str, listener: ReplyListener) -> Callable[[], None]:
        return self._channels.feed.subscribe(self._binding_id, session_key, listener)

    async def dedupe_seen(self, platform: str, account_id: str, event_id: str) -> bool:
        return await self._store.dedupe_seen(platform, account_id, event_id)

    async def dedupe_remember(self, platform: str, account_id: str, event_id: str, ttl_s: float) -> None:
        if self._channels.accepting:  # while draining nothing is recorded (see the module docstring)
            await self._store.dedupe_remember(platform, account_id, event_id, ttl_s)

    async def outbox_put(self, record: OutboxRecord) -> None:
        await self._store.outbox_put(record)

    async def outbox_update(
        self,
        key: str,
        *,
        state: OutboxState,
        text: str | None = None,
        platform_message_id: str | None = None,
    ) -> None:
        await self._store.outbox_update(key, state=state, text=text, platform_message_id=platform_message_id)

    async def outbox_pending(self, platform: str, account_id: str) -> list[OutboxRecord]:
        return await self._store.outbox_pending(platform, account_id)

    async def channel_cursors(self, platform: str, account_id: str) -> dict[str, str]:
        return await self._store.channel_cursors(platform, account_id)

    async def set_channel_cursor(
        self, platform: str, account_id: str, channel_id: str, message_id: str
    ) -> None:
        if self._channels.accepting:
            await self._store.set_channel_cursor(platform, account_id, channel_id, message_id)

    async def pairing_request(
        self,
        platform: str,
        account_id: str,
        sender_id: str,
        sender_name: str = "",
        reply_route: ReplyRoute | None = None,
    ) -> PairingRequest | None:
        return await self._store.pairing_request(platform, account_id, sender_id, sender_name, reply_route)

    async def pairing_is_approved(self, platform: str, account_id: str, sender_id: str) -> bool:
        return await self._store.pairing_is_approved(platform, account_id, sender_id)

    async def pairing_list(self) -> list[PairingRequest]:
        return await self._store.pairing_list()

    async def pairing_approve(
        self, code: str, *, platform: str | None = None, account_id: str | None = None
    ) -> PairingRequest | None:
        return await self._store.pairing_approve(code, platform=platform, account_id=account_id)

    def report_state(self, binding_id: str, state: str, last_inbound_at: float | None) -> None:
        self._channels.report_state(binding_id, state, last_inbound_at)


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


def _pairing_row(request: PairingRequest) -> dict[str, Any]:
    return {
        "code": request.code,
        "channel": request.platform,
        "accountId": request.account_id,
        "senderId": request.sender_id,
        "senderName": request.sender_name,
        "createdAt": request.created_at_ms,
        "approved": request.approved,
    }


__all__ = ["Channels", "validate_bindings"]
