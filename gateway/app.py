"""The ASGI app: WebSocket at `/` and `/ws`, `/health`, `/readyz`, the dashboard under `/ui/`.

Every request, HTTP or WebSocket, must name an allowed host in its `Host` header (the loopback
names, the listening address, `gateway.allowed_hosts`): a page on another name that resolves to
this machine (DNS rebinding) is answered 400 and its upgrade refused. HTTP responses carry the
security headers of `gateway.security_headers`.

`Gateway` owns the running pieces (store, session manager, hub, bindings) from start-up to
shutdown; the Starlette lifespan starts and stops it. The pieces are built in dependency order
(store, hub, bridge, manager, state, bindings); the one dependency that points back, the run's
tools reaching the gateway state (sub-agents, branches, channel tools), is looked up when a run
builds its tools, through the running `Gateway`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route, Router, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from gateway import __version__
from gateway.auth import AuthConfig, allowed_host_names
from gateway.bridge import Bridge
from gateway.config import GatewayConfig, load_config, redacted
from gateway.connection import serve_connection
from gateway.directory import Directory
from gateway.door import Door, DoorSettings
from gateway.hub import Hub
from gateway.models import ModelRouter
from gateway.protocol.delta_pacing import DeltaPacing
from gateway.publisher import Publisher
from gateway.rows import session_row
from gateway.security_headers import SecurityHeaders
from gateway.state import GatewayState, Limits
from gateway.telemetry.endpoint import metrics_endpoint
from gateway.telemetry.telemetry import Telemetry
from gateway.tools.factory import ToolsFactory, make_tools_factory
from gateway.uvicorn_socket import ExposeServerSocket
from sessions import NotFound, SessionManager, Store, open_database
from sessions.profiles import RunSettings

if TYPE_CHECKING:
    from gateway.automation import Automation
    from gateway.channels import Channels
    from gateway.cluster.node import ClusterNode
    from gateway.extensions.runtime import Extensions
    from gateway.tokens import NamedToken
    from sessions.db import Database

log = structlog.get_logger("gateway.app")
UI_DIR = Path(__file__).parent / "ui"


async def _agent_of(manager: SessionManager, session_id: str) -> str | None:
    """The agent of a session (for its model's fallbacks), or None when it is gone."""
    try:
        return (await manager.get(session_id=session_id)).agent_id
    except NotFound:
        return None


def run_settings(config: GatewayConfig) -> RunSettings:
    runs = config.runs
    return RunSettings(
        max_concurrent_runs=runs.max_concurrent,
        max_duration_s=runs.max_duration_s,
        idle_timeout_s=runs.idle_timeout_s,
        lane_depth=runs.lane_depth,
        live_cap=runs.max_live_sessions,
        live_idle_ttl_s=runs.live_session_idle_ttl_s,
        collect_window_s=runs.collect_window_ms / 1000,
        compaction_enabled=config.compaction.enabled,
        compaction_reserve_tokens=config.compaction.reserve_tokens,
        compaction_keep_recent_tokens=config.compaction.keep_recent_tokens,
        shutdown_grace_s=config.gateway.shutdown_grace_s,
        context_cache_bytes=runs.context_cache_bytes,
    )


RESTART_PREFIXES = (
    "gateway.host",
    "gateway.port",
    "gateway.home",
    "gateway.token",
    "gateway.password",
    "gateway.preauth_max_frames",
    "gateway.preauth_max_bytes",
    "gateway.max_unauthenticated_per_address",
    "gateway.allowed_hosts",
    "gateway.memory_trim_s",
    "gateway.collector_young_threshold",
    "logging.",
    "database.",
    "sandbox.",
    "cron.enabled",
    "metrics.",
)
"""Config keys a reload reports but cannot apply to the running daemon."""


def limits(config: GatewayConfig) -> Limits:
    g = config.gateway
    return Limits(
        max_payload=g.max_payload,
        pre_auth_max_payload=g.preauth_max_payload,
        max_buffered_bytes=g.max_buffered_bytes,
        tick_interval_ms=g.tick_interval_ms,
        handshake_timeout_s=g.handshake_timeout_s,
        requests_per_second=g.request_rate_per_s,
        request_burst=g.request_burst,
        auth_failure_delay_s=g.auth_failure_delay_s,
        auth_failure_max_delay_s=g.auth_failure_max_delay_s,
        auth_failure_window_s=g.auth_failure_window_s,
        memory_trim_s=g.memory_trim_s,
    )


def delta_pacing(config: GatewayConfig) -> DeltaPacing:
    """How OpenClaw text deltas are paced (applied live on reload)."""
    return DeltaPacing(interval_s=config.gateway.compat_delta_interval_ms / 1000)


def door_settings(config: GatewayConfig) -> DoorSettings:
    """The front door's limits (applied when the server starts; a reload reports them)."""
    g = config.gateway
    return DoorSettings(
        handshake_timeout_s=g.handshake_timeout_s,
        preauth_max_bytes=g.preauth_max_bytes,
        max_per_address=g.max_unauthenticated_per_address,
    )


class Gateway:
    """The daemon's running parts. `start()` then `stop()`; `state` is set while running."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        token: str | None,
        password: str | None = None,
        env: Mapping[str, str] | None = None,
        door: Door | None = None,
    ) -> None:
        self.config = config
        self.door = door
        """The server's front door, when the server has one (reported by `status`)."""
        # The environment the config was loaded with (command-line flags folded in), so that a
        # reload keeps them.
        self.env = dict(env) if env is not None else None
        self.auth = AuthConfig(token=token, password=password)
        self.state: GatewayState | None = None
        self._tick: asyncio.Task[None] | None = None
        self._stopping = False
        self.channels: Channels | None = None
        self.automation: Automation | None = None
        """Cron jobs and webhooks, from `start()` on."""
        self.tools: ToolsFactory | None = None
        """Builds each run's tools; owns the sandbox machine (probed when the gateway starts)."""
        self.extensions: Extensions | None = None
        """MCP servers and Python extensions, from `start()` on."""
        self.telemetry: Telemetry | None = None
        """Metrics and traces (`gateway.telemetry`), from `start()` on."""
        self.cluster: ClusterNode | None = None
        """This daemon as a node of a cluster (`gateway.cluster`); None on one node."""
        self.start_error: Exception | None = None
        """Why `start` failed (for the command line to report)."""

    def running_state(self) -> GatewayState:
        """The state of the started gateway. Raises RuntimeError before `start()`."""
        if self.state is None:
            raise RuntimeError("the gateway has not started")
        return self.state

    async def start(self) -> GatewayState:
        config = self.config
        home = config.home
        home.mkdir(parents=True, exist_ok=True)
        # One database, shared by the sessions' store and the bindings' channel store.
        database = await open_database(
            config.database_url,
            busy_timeout_ms=config.database.busy_timeout_ms,
            # A node paused inside a commit must not hold its row locks (and so its sessions)
            # past half its lease: PostgreSQL ends such a connection.
            idle_transaction_timeout_ms=int(config.cluster.lease_ttl_s * 500) if config.clustered else None,
        )
        store = Store(database)
        hub = Hub()
        bridge = Bridge(hub, pacing=delta_pacing(config))
        directory = Directory(config)
        self.tools = make_tools_factory(config, self.running_state)
        router = ModelRouter()
        publisher = Publisher(hub, bridge)
        manager = SessionManager(
            store,
            directory=directory,
            publisher=publisher,
            settings=run_settings(config),
            tools_factory=self.tools,
            stream_fn=router.stream,
        )
        if config.clustered:
            from gateway.cluster.node import ClusterNode

            self.cluster = ClusterNode(config, manager, local=publisher.local(), bridge=bridge)
            publisher.cluster = self.cluster
        router.bind(lambda: self.running_state().directory, lambda session_id: _agent_of(manager, session_id))
        bridge.list_sessions_with(store.tree.get_session, lambda record: session_row(record, manager))
        state = GatewayState(
            home=home,
            store=store,
            manager=manager,
            hub=hub,
            bridge=bridge,
            directory=directory,
            auth=self.auth,
            limits=limits(config),
            allowed_origins=list(config.gateway.allowed_origins),
            config_path=str(config.source_path) if config.source_path else None,
            config_view=redacted(config),
            reload_hook=self.reload,
            node_id=config.node_id,
        )
        if self.cluster is not None:
            self.cluster.attach_approvals(state.approvals)
        state.sandbox_status = self.tools.sandbox_status
        state.door = self.door
        self.state = state
        # Built before the manager starts, so their reply feed sees the runs it resumes.
        self._build_channels(state, database)
        self._build_automation(state)
        await self._start_extensions(state, database)
        self.telemetry = Telemetry(config.metrics, self.env if self.env is not None else os.environ)
        await self.telemetry.start(state, self.channels)
        await state.approvals.start()  # requests left pending by a previous process end here
        if self.cluster is not None:
            await self.cluster.start()
            state.cluster = self.cluster.membership
        await manager.start()
        if self.channels is not None:
            await self.channels.start()
        if self.automation is not None:
            self.automation.start()  # fires only once the manager takes inputs
        state.ready = True
        self._tick = state.background.spawn(state.tick_loop(), name="tick")
        state.loop_lag.start()
        if state.memory.interval_s > 0:
            state.background.spawn(state.memory.run(), name="memory trim")
        return state

    def _build_channels(self, state: GatewayState, database: Database) -> None:
        """The chat bindings of `[bindings]` (none when the table is empty). Raises ConfigError
        for an invalid table or a missing secret."""
        if not self.config.bindings:
            return
        from gateway.channels import Channels

        leases = None
        if self.config.clustered:
            from gateway.cluster.leases import Leases

            leases = Leases(database, node_id=self.config.node_id)  # one node per account
        self.channels = Channels(self.config, state, database=database, env=self.env, leases=leases)
        state.attach_channels(self.channels)

    def _build_automation(self, state: GatewayState) -> None:
        """Cron jobs and webhooks. Raises ConfigError for a webhook whose secret is not set."""
        from gateway.automation import Automation

        env = self.env if self.env is not None else os.environ
        self.automation = Automation(state=state, config=self.config, env=env, channels=self.channels)
        state.automation = self.automation

    async def _start_extensions(self, state: GatewayState, database: Database) -> None:
        """MCP servers and Python extensions (`gateway.extensions.runtime`, imported here: it
        imports what it needs only once something is configured or installed)."""
        from gateway.extensions.runtime import Extensions

        if self.tools is None:
            raise RuntimeError("the tools factory is built first")
        self.extensions = Extensions(
            self.config,
            database=database,
            bridge=state.bridge,
            machine=self.tools.machine,
            env=self.env if self.env is not None else os.environ,
        )
        await self.extensions.start()
        self.tools.extensions = self.extensions
        state.extensions = self.extensions

    async def reload(self) -> dict[str, Any]:
        """Re-read the config file (with the start-up environment and flags). Applied live:
        agents and models, run settings, allowed origins, connection limits for connections made
        from now on, the bindings' access, routing and queueing settings, the webhooks and the
        scheduler's settings. The rest (listening
        address, state directory, auth, allowed hosts and the front door's limits, database,
        logging, sandbox, bindings' connections and accounts) needs a restart. Returns
        `{"changed": [dotted keys], "restartRequired": [dotted keys]}`; raises ConfigError for an
        invalid file (nothing is applied then)."""
        state = self.state
        if state is None:
            return {"changed": [], "restartRequired": []}
        fresh = load_config(self.config.source_path, self.env)
        before = redacted(self.config)
        restart: list[str] = []
        # Checked (webhook secrets) before anything is applied, applied after the bindings.
        apply_automation = self.automation.prepare_reload(fresh) if self.automation is not None else None
        if self.channels is not None:
            restart = self.channels.reload(fresh)  # validates before it applies anything
        elif fresh.bindings:
            from gateway.channel_config import validate_bindings

            validate_bindings(fresh, self.env)
            restart = ["bindings"]
        if apply_automation is not None:
            apply_automation()
        self.config = fresh
        state.directory = Directory(fresh)
        state.manager.directory = state.directory
        state.manager.apply_settings(run_settings(fresh))
        state.set_limits(limits(fresh))
        state.bridge.pacing = delta_pacing(fresh)
        state.config_view = redacted(fresh)
        state.allowed_origins = list(fresh.gateway.allowed_origins)
        if self.extensions is not None:
            await self.extensions.reload(fresh)  # `[[mcp_servers]]` live
        changed = _changed_keys(before, state.config_view)
        restart += [key for key in changed if key.startswith(RESTART_PREFIXES)]
        log.info("configuration reloaded", changed=changed, restart_required=restart)
        return {"changed": changed, "restartRequired": restart}

    async def drain(self, *, reason: str = "gateway stopping") -> None:
        """Graceful stop of everything in front of the database: refuse new connections, tell
        clients, give runs their grace period, abort the rest (`gateway_shutdown`), flush the
        event log, close connections with 1012."""
        if self._stopping or self.state is None:
            return
        self._stopping = True
        state = self.state
        state.ready = False
        state.stopping = True
        state.announce_shutdown(reason)
        log.info("stopping", grace_s=self.config.gateway.shutdown_grace_s, runs=state.manager.running_count())
        try:
            if self.automation is not None:
                await self.automation.aclose()  # nothing new fires while runs wind down
            if self.channels is not None:
                self.channels.stop_inbound()
            if self.cluster is not None:
                await self.cluster.drain()  # takes no more sessions; releases them after the runs
            await state.commands.aclose()
            await state.manager.aclose()
            if self.channels is not None:
                with contextlib.suppress(Exception):
                    await self.channels.stop()
        finally:
            await state.close_connections()

    async def stop(self) -> None:
        await self.drain()
        if self.extensions is not None:
            await self.extensions.aclose()  # MCP servers stop with the daemon
        if self._tick is not None:
            self._tick.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tick
        if self.telemetry is not None:
            await self.telemetry.aclose()  # after the drain: the runs' last events are counted
        if self.cluster is not None:
            await self.cluster.aclose()
        if self.state is not None:
            await self.state.loop_lag.aclose()
            await self.state.bridge.aclose()
            await self.state.cancel_tasks()
            await self.state.store.aclose()
        if self.tools is not None:
            self.tools.close()


def _changed_keys(before: Any, after: Any, prefix: str = "") -> list[str]:
    """Dotted paths whose values differ between two JSON-like trees (tables are walked, other
    values compared whole)."""
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[str] = []
        for key in sorted(set(before) | set(after)):
            out += _changed_keys(before.get(key), after.get(key), f"{prefix}{key}.")
        return out
    return [] if before == after else [prefix.rstrip(".")]


def create_app(gateway: Gateway) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        started = time.perf_counter()
        try:
            await gateway.start()
        except Exception as exc:
            gateway.start_error = exc
            raise
        log.info("gateway ready", startup_ms=int((time.perf_counter() - started) * 1000))
        try:
            yield
        finally:
            await gateway.stop()

    async def websocket(ws: WebSocket) -> None:
        state = gateway.state
        if state is None:
            await ws.close(1013, "gateway starting")
            return
        await serve_connection(ws, state)

    async def health(request: Request) -> Response:
        state = gateway.state
        ok = state is not None and state.ready
        return JSONResponse(
            {
                "ok": ok,
                "version": __version__,
                "uptimeMs": int((time.time() - state.started_at) * 1000) if state else 0,
            },
            status_code=200 if ok else 503,
        )

    async def readyz(request: Request) -> Response:
        state = gateway.state
        if state is None or not state.ready:
            return JSONResponse({"ready": False}, status_code=503)
        try:
            await state.store.tree.list_sessions(limit=1)
        except Exception as exc:
            return JSONResponse({"ready": False, "error": type(exc).__name__}, status_code=503)
        return JSONResponse({"ready": True})

    async def root(request: Request) -> Response:
        return RedirectResponse("/ui/")

    no_webhooks = Router()

    async def bindings(scope: Scope, receive: Receive, send: Send) -> None:
        """Binding webhooks (`/bindings/...`), served by the running `Channels` (404 without)."""
        channels = gateway.channels
        webhooks: ASGIApp = channels.webhooks if channels is not None else no_webhooks
        await webhooks(scope, receive, send)

    async def named_token(secret: str) -> NamedToken | None:
        state = gateway.state
        return None if state is None else await state.tokens.store.find(secret)

    async def hooks(scope: Scope, receive: Receive, send: Send) -> None:
        """Webhooks (`/hooks/<name>`), served by the running `Automation` (404 before)."""
        automation = gateway.automation
        endpoint: ASGIApp = automation.webhooks if automation is not None else no_webhooks
        await endpoint(scope, receive, send)

    routes: list[Any] = [
        WebSocketRoute("/", websocket),
        WebSocketRoute("/ws", websocket),
        Route("/health", health),
        Route("/healthz", health),
        Route("/readyz", readyz),
        Route("/metrics", metrics_endpoint(lambda: gateway.telemetry, lambda: gateway.auth, named_token)),
        Route("/", root),
        Mount("/bindings", app=bindings),
        Mount("/hooks", app=hooks),
    ]
    if UI_DIR.is_dir():
        routes.append(Mount("/ui", app=StaticFiles(directory=UI_DIR, html=True), name="ui"))
    hosts = allowed_host_names(gateway.config.gateway.host, gateway.config.gateway.allowed_hosts)
    middleware = [
        # Outermost first. ExposeServerSocket must see the server's own `send`: the host check
        # passes it through for allowed hosts, the headers only wrap it for HTTP.
        Middleware(TrustedHostMiddleware, allowed_hosts=hosts, www_redirect=False),
        Middleware(SecurityHeaders),
        Middleware(ExposeServerSocket),
    ]
    return Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
