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

In a cluster (`leases` given) each account runs on the one node that holds its lease
(`ChannelLeasing`): the others keep it on standby, and whoever takes the lease settles the
account's outbox and connects. A binding stopped because its lease was lost is replaced by a
fresh, unstarted one (a binding starts once), ready for the next time this node takes the lease.
The webhook endpoints are mounted on every node, whoever holds the lease: a request is
deduplicated and recorded in the input ledger in the shared database, so it runs at most once
whichever node a load balancer sends it to (a Slack Events API account on standby answers 503
until it has connected once here: its token check runs at start).
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
from starlette.types import ASGIApp, Receive, Scope, Send

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
from gateway.channel_leasing import ChannelLeasing
from gateway.channel_pairing import Pairing
from gateway.channel_replies import Owner, ReplyFeed
from gateway.channel_resume import runs_in_flight, settle_outbox
from gateway.channel_store import ChannelStore
from gateway.config import GatewayConfig
from gateway.errors import ConfigError, ConfigProblem
from gateway.telemetry.channel_counts import CountedChannelHost, MessageTally
from sessions.db import Database
from sessions.errors import SessionsError
from sessions.records import SessionRecord

if TYPE_CHECKING:
    from gateway.cluster.leases import Leases
    from gateway.state import GatewayState

log = structlog.get_logger("gateway.channels")

SWEEP_INTERVAL_S = 300.0
STOP_GRACE_S = 5.0
TAKEOVER_GRACE_S = 5.0
"""Past a lease, how long a node that takes an account waits for its cut-off runs to close."""
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


class _Endpoint:
    """A webhook endpoint of whichever binding object serves its account now (in a cluster, a
    binding stopped when its lease was lost is replaced by a fresh one)."""

    def __init__(self, apps: Mapping[str, ASGIApp], path: str) -> None:
        self._apps = apps
        self._path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._apps[self._path](scope, receive, send)


class Channels:
    """The configured bindings, their host, and what the daemon asks of them.

    Raises `ConfigError` for an invalid `[bindings]` table or a secret whose environment variable
    is not set. `env` holds the secrets (default: the process environment). `leases`: this
    node's leases in a cluster (each account then runs only where its lease is held); None for
    one node, where every account runs here.
    """

    def __init__(
        self,
        config: GatewayConfig,
        state: GatewayState,
        *,
        database: Database,
        env: Mapping[str, str] | None = None,
        leases: Leases | None = None,
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
        self._endpoints: dict[str, ASGIApp] = {}
        self._env = env
        self.messages = MessageTally()
        """Messages in and out, counted by the metrics (`gateway.telemetry`)."""
        self._build(env)
        self.approvals = ChannelApprovals(state.approvals, self._bindings, self._inputs)
        """Approval requests of chat sessions, posted to the chat and decided there."""
        self.webhooks = self._webhook_router()
        self._remove_listener: Callable[[], None] | None = state.bridge.add_listener(
            self.feed.on_event, remote=True
        )
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._leasing: ChannelLeasing | None = None
        self._lease_ttl_s = config.cluster.lease_ttl_s
        if leases is not None:
            self._leasing = ChannelLeasing(
                leases,
                list(self._bindings),
                start=self._start_binding,
                stop=self._stop_binding,
                ttl_s=config.cluster.lease_ttl_s,
            )

    # -- construction ------------------------------------------------------------------------

    def _build(self, env: Mapping[str, str] | None) -> None:
        for platform, account_id, cfg in enabled_accounts(self._settings):
            binding_id = f"{platform}:{account_id}"
            try:
                binding = self._make_binding(account_id, cfg, env)
            except BindingConfigError as exc:
                where = f"bindings.{platform}.{account_id}"
                raise ConfigError([ConfigProblem(self._source, where, str(exc))]) from None
            self._bindings[binding_id] = binding
            self._configs[binding_id] = cfg
            self._chunk_limits[binding_id] = cfg.chunk_limit
            self._modes[binding_id] = cfg.mode
            self._endpoints.update(self._webhook_apps(binding))

    def _make_binding(
        self, account_id: str, cfg: DiscordAccountConfig | SlackAccountConfig, env: Mapping[str, str] | None
    ) -> _Binding:
        """A new, unstarted binding of one account. Raises BindingConfigError."""
        platform = "discord" if isinstance(cfg, DiscordAccountConfig) else "slack"
        host = CountedChannelHost(
            f"{platform}:{account_id}",
            tally=self.messages,
            inputs=self._inputs,
            feed=self.feed,
            store=self.store,
            report_state=self.report_state,
        )
        if isinstance(cfg, DiscordAccountConfig):
            return DiscordBinding(cfg, host, self._http, account_id=account_id, env=env)
        return SlackBinding(cfg, host, self._http, account_id=account_id, env=env)

    def _webhook_apps(self, binding: _Binding) -> dict[str, ASGIApp]:
        """The webhook endpoints of a binding, by path, for its account's mode."""
        mode = self._modes[binding.binding_id]
        if isinstance(binding, DiscordBinding) and mode == "interactions":
            return {f"/discord/{binding.account_id}/interactions": binding.interactions_app()}
        if isinstance(binding, SlackBinding) and mode == "events":
            return {
                f"/slack/{binding.account_id}/events": binding.events_app(),
                f"/slack/{binding.account_id}/interactivity": binding.interactivity_app(),
            }
        return {}

    def _webhook_router(self) -> Router:
        routes = [Route(path, endpoint=_Endpoint(self._endpoints, path)) for path in self._endpoints]
        return Router(routes=routes, redirect_slashes=False)

    @property
    def bindings(self) -> dict[str, _Binding]:
        return dict(self._bindings)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Finish the replies a previous process left in flight, then start every binding
        (they connect in the background); in a cluster, begin taking the leases of the accounts
        instead, each started once its lease is held here. Call after the session manager
        started."""
        if self._task is not None or self._closed:
            return
        if self._leasing is None:
            for binding_id in self._bindings:
                await self._settle(binding_id)
        self._inputs.accepting = True
        self.approvals.start()
        self._task = asyncio.create_task(self._background(), name="channels")
        if self._leasing is not None:
            self._leasing.start()
            return
        for binding in self._bindings.values():
            await binding.start()

    async def _settle(self, binding_id: str) -> None:
        binding = self._bindings[binding_id]
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

    async def _start_binding(self, binding_id: str) -> None:
        """This node took the account's lease: finish the replies left in flight, connect."""
        if self._closed:
            return  # stopping: `stop()` gives the lease back
        await self._await_cut_off_runs(binding_id)
        await self._settle(binding_id)
        await self._bindings[binding_id].start()

    async def _await_cut_off_runs(self, binding_id: str) -> None:
        """The account's replies left in flight by the node that held it are finished by
        editing once their runs are closed: wait (at most a lease and a few seconds) for the node
        that takes each session over to close its cut-off run."""
        binding = self._bindings[binding_id]
        deadline = time.monotonic() + self._lease_ttl_s + TAKEOVER_GRACE_S
        while time.monotonic() < deadline:
            try:
                running = await runs_in_flight(
                    self.store, self._state.store, platform=binding.platform, account_id=binding.account_id
                )
            except SessionsError:
                log.exception("could not read the runs left in flight", binding=binding_id)
                return
            if not running:
                return
            await asyncio.sleep(0.1)
        log.warning("starting with replies whose runs are still open", binding=binding_id)

    async def _stop_binding(self, binding_id: str) -> None:
        """This node lost (or gives up) the account's lease: disconnect, and keep a fresh binding
        on standby for the next time the lease is taken here. Raises BindingConfigError when the
        account's settings no longer build a binding (the standby object stays the closed one)."""
        await self._bindings[binding_id].aclose()
        if self._closed:
            return
        old = self._bindings[binding_id]
        fresh = self._make_binding(old.account_id, self._configs[binding_id], self._env)
        fresh.attach_approvals(self.approvals)
        self._bindings[binding_id] = fresh
        self._endpoints.update(self._webhook_apps(fresh))

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
        if self._leasing is not None:
            await self._leasing.aclose()  # disconnects, then lets another node connect at once
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
        """One row per binding: `state` (connecting | ready | resuming | closed; in a cluster
        `standby` while another node, or none yet, holds the account), `lastInboundAt` (Unix ms
        of the last frame received, null before the first) and `secondsSinceLastInbound`. In a
        cluster, `holder`: the node holding the account's lease (null: none known)."""
        now = time.time()
        rows = []
        for binding_id, binding in self._bindings.items():
            state, last = self._reported.get(binding_id, (binding.state.value, None))
            if self._leasing is not None and not self._leasing.running(binding_id):
                state = "standby"
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
            if self._leasing is not None:
                rows[-1]["holder"] = self._leasing.holder(binding_id)
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
