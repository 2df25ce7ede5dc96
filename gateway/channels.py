"""`Channels`: the daemon's chat bindings, from start to stop, and what the daemon asks of them.

Built by `Gateway.start()` when `[bindings]` is configured: `Channels(config, state, database=...)`
(the database the gateway opened for its store, shared by the durable `ChannelStore`) validates
`[bindings.discord.<account>]` / `[bindings.slack.<account>]` (a bad table or a missing secret is
one `ConfigError` naming the key and the file) and builds one binding per enabled account; the
gateway then starts the session manager (whose recovery events the reply feed must see) and calls
`start()`; `stop_inbound()` and `stop()` end it. `reload()` applies a re-read table.

The parts it puts together, each in its own module:

- each binding's host (`ChannelHost`), which records inbound messages as session inputs
  (`ChannelInputs`) and keeps dedupe, outbox, pairing and cursors durable (`ChannelStore`);
- the reply relay: the bridge feeds `ReplyFeed`, which hands each binding the replies of the runs
  it owns; runs nobody claimed are looked up in the input ledger by a task owned here, and a
  reply whose owner has no subscription goes straight to the owner's relay (`_fallback`);
- approval requests of chat sessions, posted with buttons and decided from the chat
  (`ChannelApprovals`);
- pairing approvals (`Pairing`), and the replies a previous process left in flight
  (`settle_outbox`, before the bindings start).

What the daemon asks: `status()` (`channels.status`), `tools_for()` (a session's channel tools),
`pairing_list()` / `pairing_approve()`, and `webhooks`, the endpoints served under
`/bindings/discord/<account>/interactions`, `/bindings/slack/<account>/events` and
`/bindings/slack/<account>/interactivity`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import httpx
import structlog
from starlette.routing import Route, Router

from agent_core import AgentTool
from bindings import (
    ApprovalDecider,
    ApprovalMessage,
    BindingConfigError,
    ConnectionState,
    DiscordAccountConfig,
    DiscordBinding,
    PairingRequest,
    ReplyEvent,
    ReplyRelay,
    ReplyRoute,
    SessionOrigin,
    SlackAccountConfig,
    SlackBinding,
)
from gateway.channel_approvals import ChannelApprovals
from gateway.channel_config import enabled_accounts, source_name, validate_bindings
from gateway.channel_inputs import ChannelInputs
from gateway.channel_pairing import Pairing
from gateway.channel_replies import Owner, ReplyFeed
from gateway.channel_resume import settle_outbox
from gateway.channel_store import ChannelStore
from gateway.config import GatewayConfig
from gateway.errors import ConfigError, ConfigProblem
from gateway.telemetry.channel_counts import CountedChannelHost, MessageTally
from sessions.db import Database
from sessions.errors import SessionsError
from sessions.records import SessionRecord

if TYPE_CHECKING:
    from gateway.state import GatewayState

log = structlog.get_logger("gateway.channels")

SWEEP_INTERVAL_S = 300.0
STOP_GRACE_S = 5.0
"""How long `stop()` lets the relays finish the replies of runs that just ended."""
HTTP_TIMEOUT = httpx.Timeout(30.0, connect=10.0)


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

    @property
    def approvers(self) -> frozenset[str]: ...

    def attach_approvals(self, decider: ApprovalDecider) -> None: ...

    def session_origin(self, session_key: str) -> SessionOrigin | None: ...

    async def post_approval(self, route: ReplyRoute, approval: dict[str, Any]) -> ApprovalMessage: ...

    async def show_approval(self, message: ApprovalMessage, approval: dict[str, Any]) -> None: ...


class Channels:
    """The configured bindings, their host, and what the daemon asks of them.

    Raises `ConfigError` for an invalid `[bindings]` table or a secret whose environment variable
    is not set. `env` holds the secrets (default: the process environment).
    """

    def __init__(
        self,
        config: GatewayConfig,
        state: GatewayState,
        *,
        database: Database,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._state = state
        self._settings = validate_bindings(config, env)
        self._source = source_name(config)
        self.store = ChannelStore(database)
        self.feed = ReplyFeed(fallback=self._fallback)
        self._inputs = ChannelInputs(state.manager, self.feed, state.commands)
        self._pairing = Pairing(self.store, self._announcer)
        self._reported: dict[str, tuple[str, float | None]] = {}
        self._http = httpx.AsyncClient(timeout=HTTP_TIMEOUT, follow_redirects=False)
        self._bindings: dict[str, _Binding] = {}
        self._chunk_limits: dict[str, int] = {}
        self._modes: dict[str, str] = {}
        self._configs: dict[str, DiscordAccountConfig | SlackAccountConfig] = {}
        self._env = env
        self.messages = MessageTally()
        """Messages in and out, counted by the metrics (`gateway.telemetry`)."""
        self._build(env)
        self.approvals = ChannelApprovals(state.approvals, self._bindings, self._inputs)
        """Approval requests of chat sessions, posted to the chat and decided there."""
        self.webhooks = self._webhook_router()
        self._remove_listener: Callable[[], None] | None = state.bridge.add_listener(self.feed.on_event)
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    # -- construction ------------------------------------------------------------------------

    def _build(self, env: Mapping[str, str] | None) -> None:
        for platform, account_id, cfg in enabled_accounts(self._settings):
            binding_id = f"{platform}:{account_id}"
            host = CountedChannelHost(
                binding_id,
                tally=self.messages,
                inputs=self._inputs,
                feed=self.feed,
                store=self.store,
                report_state=self.report_state,
            )
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
                path = f"/slack/{binding.account_id}/interactivity"
                routes.append(Route(path, endpoint=binding.interactivity_app()))
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
        self._inputs.accepting = True
        self.approvals.start()
        self._task = asyncio.create_task(self._background(), name="channels")
        for binding in self._bindings.values():
            await binding.start()

    def stop_inbound(self) -> None:
        """Take no more messages (the gateway is draining). Idempotent."""
        self._inputs.accepting = False

    async def stop(self) -> None:
        """Let the relays finish replies of runs that just ended (up to `STOP_GRACE_S`), then
        close every binding and the HTTP client. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._inputs.accepting = False
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and self._streaming():  # noqa: ASYNC110 - relays expose a count only
            await asyncio.sleep(0.05)
        await self.approvals.aclose()
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
        await self._pairing.aclose()
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
                owners = await self._inputs.run_owners(run_id, self._bindings)
            except Exception:  # one bad ledger row must not stop the lookups
                log.exception("owner lookup failed", run_id=run_id)
                owners = []
            self.feed.resolve(run_id, owners)

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
            preferred = self._inputs.last_binding(key)
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
            session.keys[0], partial(self._inputs.restore_origin, binding.binding_id, session.id)
        )

    async def pairing_list(self) -> list[dict[str, Any]]:
        return await self._pairing.requests()

    async def pairing_approve(
        self, code: str, *, channel: str | None = None, account_id: str | None = None
    ) -> dict[str, Any] | None:
        """Approve a pairing request (of `channel` and `account_id` when given) and tell the
        sender, in the background, where they wrote from. None when no live request matches."""
        return await self._pairing.approve(code, channel=channel, account_id=account_id)

    def _announcer(self, binding_id: str) -> _Binding | None:
        """The binding that tells a sender about their approval; none once stopping."""
        return None if self._closed else self._bindings.get(binding_id)


__all__ = ["Channels", "validate_bindings"]
