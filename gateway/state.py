"""The running gateway's shared state: store, session manager, hub, auth, limits, snapshots.

Created by the app's `Gateway.start()` once the pieces exist, closed by `Gateway.stop()`. Method
handlers reach everything through it. Its background tasks (the tick, `agent`'s final answers,
tool-started aborts) belong to `background`: their failures are logged, `cancel_tasks()` ends
them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
import structlog

from gateway import __version__
from gateway.allocator import MemoryTrimmer
from gateway.approvals import Approvals, ApprovalStore
from gateway.auth import AuthConfig, FailureDelays, check_origin
from gateway.background import Background
from gateway.bridge import Bridge
from gateway.commands import InboundCommands, RegisteredExtensionCommands
from gateway.health import SessionsSummary
from gateway.hub import Hub, encode_event
from gateway.loop_lag import LagProbe
from gateway.outlet import Outlet
from gateway.presence import PresenceChanges, PresenceFeed, presence_entry
from gateway.protocol import frames, handshake
from gateway.protocol.methods import EVENTS, METHODS
from gateway.rows import session_row
from gateway.tokens import Tokens
from sessions import SessionEvent, StatusChanged

if TYPE_CHECKING:
    from agent_core import AgentTool
    from gateway.automation import Automation
    from gateway.cluster.membership import Membership
    from gateway.directory import Directory
    from gateway.door import Door
    from gateway.extensions.runtime import Extensions
    from gateway.methods.base import ConnState
    from sessions import SessionManager, Store
    from sessions.records import SessionRecord

log = structlog.get_logger("gateway.state")

_METHOD_NAMES = sorted(set(METHODS))
"""The methods `hello-ok` lists (the same for every connection)."""

ReloadHook = Callable[[], Awaitable[dict[str, Any]]]
"""Re-read the configuration and apply it: `{"changed": [...], "restartRequired": [...]}`;
raises ConfigError for an invalid file (nothing applied then)."""


class ChannelsView(Protocol):
    """What the state needs of the running chat bindings (`gateway.channels.Channels`)."""

    def status(self) -> list[dict[str, Any]]:
        """One row per binding (`channels.status`)."""
        ...

    async def pairing_list(self) -> list[dict[str, Any]]: ...

    def tools_for(self, session: SessionRecord) -> list[AgentTool]:
        """The channel tools of the chat a session came from (none for other sessions)."""
        ...

    async def pairing_approve(
        self, code: str, *, channel: str | None = None, account_id: str | None = None
    ) -> dict[str, Any] | None:
        """The approved request, or None when no pending request has that code."""
        ...


class Limits(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    max_payload: int = 25 * 1024 * 1024
    pre_auth_max_payload: int = 64 * 1024
    max_buffered_bytes: int = 50 * 1024 * 1024
    tick_interval_ms: int = 30_000
    handshake_timeout_s: float = 10.0
    requests_per_second: float = 200.0
    request_burst: int = 400
    max_inflight: int = 64
    auth_failure_delay_s: float = 0.25
    auth_failure_max_delay_s: float = 5.0
    auth_failure_window_s: float = 300.0
    memory_trim_s: float = 30.0


class GatewayState:
    """The running gateway as handlers and connections see it."""

    def __init__(
        self,
        *,
        home: Path,
        store: Store,
        manager: SessionManager,
        hub: Hub,
        bridge: Bridge,
        directory: Directory,
        auth: AuthConfig,
        limits: Limits,
        allowed_origins: list[str] | None = None,
        config_path: str | None = None,
        config_view: dict[str, Any] | None = None,
        reload_hook: ReloadHook | None = None,
        node_id: str | None = None,
    ) -> None:
        self.home = home
        self._node_id = node_id or f"{socket.gethostname()}-{os.getpid()}"
        self.cluster: Membership | None = None
        """This node's cluster membership (`gateway.cluster.membership`); None on a single node."""
        self.store = store
        self.manager = manager
        self.hub = hub
        self.bridge = bridge
        self.directory = directory
        self.auth = auth
        self.allowed_origins: list[str] = list(allowed_origins or [])
        self.config_path = config_path
        self.config_view: dict[str, Any] = dict(config_view or {})
        self.reload_hook = reload_hook
        self.channels: ChannelsView | None = None
        """The chat bindings, when `[bindings]` configures any (`attach_channels`)."""
        self._database_label: str | None = None
        self.ready = False
        self.stopping = False
        self.started_at = time.time()
        self.boot_id = str(uuid.uuid4())
        self.health_version = 1
        self.background = Background("gateway")
        self.loop_lag = LagProbe()
        """Event-loop lag, started and closed by the app with the tick task."""
        self.memory = MemoryTrimmer(limits.memory_trim_s)
        """The allocator's trims, run by the app beside the tick (when `memory_trim_s` > 0)."""
        self.sandbox_status: Callable[[], dict[str, Any]] | None = None
        """The `sandbox` object of health and status: mode, runner, confined (set by the app)."""
        self.presence = PresenceFeed(self._send_presence)
        """Connected clients' presence entries; changes go out coalesced (`gateway.presence`)."""
        self.sessions_summary = SessionsSummary(lambda limit: store.tree.list_sessions(limit=limit))
        """What `health` reports of the sessions, from memory (`gateway.health`)."""
        bridge.add_change_listener(lambda session_id, reason: self.sessions_summary.stale())
        bridge.add_listener(self._session_event, remote=True)
        self.limits = limits
        self.parser = _parser(limits)
        self.auth_failures = _failure_delays(limits)
        self.tokens = Tokens(store.database)
        """Named, scoped tokens and the connections that use them."""
        self.door: Door | None = None
        """The front door of the server, when it has one (set by the app)."""
        self.extensions: Extensions | None = None
        """MCP servers and Python extensions (`mcp.*`, `extensions.*`), set by the app."""
        self.automation: Automation | None = None
        """Cron jobs and webhooks (`gateway.automation`), set by the app once they are built."""
        self.commands = InboundCommands(
            manager=manager,
            directory=lambda: self.directory,
            notify=bridge.session_changed,
            extensions=RegisteredExtensionCommands(),
        )
        """Chat commands, skills and prompt templates in messages on their way to the agent."""
        self.approvals = Approvals(ApprovalStore(store.database), self._publish_approval)
        """Tool calls waiting for a person's decision (`gateway.approvals`)."""

    def set_limits(self, limits: Limits) -> None:
        """Apply limits on reload (connections read them when they start). Known failed
        authentications are kept when the auth limits do not change."""
        if _auth_limits(limits) != _auth_limits(self.limits):
            self.auth_failures = _failure_delays(limits)
        self.limits = limits
        self.parser = _parser(limits)

    def attach_channels(self, channels: ChannelsView) -> None:
        """The chat bindings, built once the state exists (they use it)."""
        self.channels = channels

    # --- background work ----------------------------------------------------------------------

    def track(self, task: asyncio.Future[Any]) -> None:
        """Own a task started elsewhere: its failure is logged, `cancel_tasks` ends it."""
        self.background.adopt(task)

    async def cancel_tasks(self) -> None:
        self.presence.close()
        await self.sessions_summary.aclose()
        await self.background.aclose()

    def _session_event(self, event: SessionEvent) -> None:
        if isinstance(event.data, StatusChanged):  # a run started or ended: `updatedAt` moved
            self.sessions_summary.stale()

    async def tick_loop(self) -> None:
        """`tick` every `tickIntervalMs` and `health` about every minute, until cancelled. A
        failed health snapshot is logged and the ticks go on (clients close a silent socket)."""
        interval = self.limits.tick_interval_ms / 1000
        health_every = max(1, int(60 / interval)) if interval > 0 else 1
        count = 0
        while True:
            await asyncio.sleep(interval)
            self.hub.broadcast(encode_event("tick", {"ts": _now()}))
            count += 1
            if count % health_every == 0:
                try:
                    await self.broadcast_health()
                except Exception:
                    log.exception("could not broadcast health")

    async def broadcast_health(self) -> None:
        self.health_version += 1
        snapshot = await self.health_snapshot()
        self.hub.broadcast(encode_event("health", snapshot, state_version=self.state_version()))
        self.sessions_summary.stale()  # the next minute's broadcast shows what changed meanwhile

    # --- handshake ----------------------------------------------------------------------------

    def origin_allowed(self, origin: str | None, host: str) -> bool:
        return check_origin(origin, host, self.allowed_origins)

    def hello_ok(self, conn: ConnState, accepted: handshake.ConnectAccepted) -> dict[str, Any]:
        presence, presence_version = self.presence.snapshot()
        return handshake.build_hello_ok(
            server_version=__version__,
            conn_id=conn.conn_id,
            methods=list(_METHOD_NAMES),
            events=list(EVENTS),
            presence=presence,
            health=self._health_sync(),
            state_version={"presence": presence_version, "health": self.health_version},
            uptime_ms=int((time.time() - self.started_at) * 1000),
            role=accepted.role,
            scopes=list(accepted.scopes),
            max_payload=self.limits.max_payload,
            max_buffered_bytes=self.limits.max_buffered_bytes,
            tick_interval_ms=self.limits.tick_interval_ms,
            auth_method=accepted.auth_method,
            boot_id=self.boot_id,
            default_agent_id=self.directory.default_agent_id,
            model_configured=self.directory.model_problem() is None,
            state_dir=str(self.home),
        )

    def on_connect(self, conn: ConnState) -> None:
        entry = presence_entry(conn.conn_id, conn.client, conn.scopes, _now())
        if entry is not None:
            self.presence.connect(conn.conn_id, entry)

    def on_disconnect(self, conn: ConnState) -> None:
        self.presence.disconnect(conn.conn_id)

    def _publish_approval(self, event: str, payload: dict[str, Any]) -> None:
        self.hub.broadcast(encode_event(event, payload), scope="operator.approvals")

    def _send_presence(self, changes: PresenceChanges) -> None:
        state_version = {"presence": changes.version, "health": self.health_version}
        self.hub.broadcast(
            encode_event("presence", changes.payload(), state_version=state_version), scope="operator.read"
        )

    def state_version(self) -> dict[str, int]:
        return {"presence": self.presence.version, "health": self.health_version}

    # --- snapshots ----------------------------------------------------------------------------

    @property
    def node_id(self) -> str:
        """This node's name: its cluster node id, else the configured one (`GatewayConfig.node_id`)."""
        return self.cluster.node_id if self.cluster is not None else self._node_id

    def cluster_summary(self) -> dict[str, Any]:
        """The `cluster` object of `health`, from memory: whether this node is in a cluster and
        how many nodes were alive at its last heartbeat (1 on a single node)."""
        if self.cluster is None:
            return {"clustered": False, "nodes": 1}
        return {"clustered": True, "nodes": self.cluster.alive_count()}

    async def cluster_count(self) -> dict[str, Any]:
        """The `cluster` object of `status`: as in `health`, the nodes counted in the database."""
        if self.cluster is None:
            return self.cluster_summary()
        nodes = await self.cluster.nodes()
        return {"clustered": True, "nodes": sum(1 for node in nodes if node.alive)}

    def _health_sync(self) -> dict[str, Any]:
        """The health object, shaped like OpenClaw's (`channels` keyed by channel id, in
        `channelOrder`); `sessions.count`/`recent` are filled in by `health_snapshot`."""
        default = self.directory.default_agent_id
        channels: dict[str, Any] = {}
        labels: dict[str, str] = {}
        for index, entry in enumerate(self.channels_status()):
            channel_id = str(entry.get("id") or entry.get("channel") or index)
            channels[channel_id] = entry
            labels[channel_id] = str(entry.get("label") or channel_id)
        return {
            "ok": True,
            "ts": _now(),
            "durationMs": 0,
            "node": self.node_id,
            "cluster": self.cluster_summary(),
            "channels": channels,
            "channelOrder": list(channels),
            "channelLabels": labels,
            "defaultAgentId": default,
            "agents": [
                {"agentId": p.id, "isDefault": p.id == default, "model": p.model}
                for p in self.directory.profiles()
            ],
            "sessions": {
                "path": self.database_label(),
                "live": self.manager.live_count(),
                "running": self.manager.running_count(),
            },
            "sandbox": self.sandbox_status() if self.sandbox_status is not None else None,
        }

    async def health_snapshot(self) -> dict[str, Any]:
        """The `health` object; the sessions part comes from memory (`sessions_summary`)."""
        started = time.perf_counter()
        snapshot = self._health_sync()
        summary = await self.sessions_summary.current()
        now = _now()
        snapshot["sessions"]["count"] = summary.count
        snapshot["sessions"]["recent"] = [
            {"key": (r.keys or [None])[0], "updatedAt": r.updated_at, "age": max(0, now - r.updated_at)}
            for r in summary.recent
        ]
        snapshot["durationMs"] = int((time.perf_counter() - started) * 1000)
        return snapshot

    async def status_snapshot(self) -> dict[str, Any]:
        records, total = await self.store.tree.list_sessions(limit=5)
        lag = self.loop_lag.snapshot()  # `eventLoopLagMs`: p99 of the last minute
        direct_frames, sent_frames = self.hub.frames_written()
        buffered, held = self.hub.queued_bytes()
        return {
            "runtimeVersion": __version__,
            "version": __version__,
            "node": self.node_id,
            "cluster": await self.cluster_count(),
            "pid": os.getpid(),
            "platform": platform.platform(),
            "uptimeMs": int((time.time() - self.started_at) * 1000),
            "connections": len(self.hub),
            "slowConsumersClosed": self.hub.slow_consumers,
            "frontDoor": self.door.snapshot() if self.door is not None else None,
            # How frames reach the open connections' sockets: the direct writer (uvicorn's
            # internals recognised) or one ASGI send per frame.
            "fanOut": {
                "directWriteConnections": self.hub.direct_writers(),
                "framesWrittenDirect": direct_frames,
                "framesWrittenBySend": sent_frames,
                "bufferedBytes": buffered,
                "heldBytes": held,
            },
            "liveSessions": self.manager.live_count(),
            # The live sessions' parsed contexts, within `[runs] context_cache_bytes`.
            "contextCache": {
                "sessions": len(self.manager.contexts),
                "chargedBytes": self.manager.contexts.size,
                "budgetBytes": self.manager.settings.context_cache_bytes,
            },
            "runsInFlight": self.manager.running_count(),
            "eventLoopLagMs": lag["p99Ms"],
            "eventLoopLag": lag,
            "memory": self.memory.snapshot(),
            "runSlots": {"active": self.manager.limiter.active, "waiting": self.manager.limiter.waiting},
            "queueDepths": self.manager.queue_depths(),
            "journalPending": self.manager.journal.pending,
            "channels": self.channels_status(),
            "database": {"url": self.database_label(), "sizeBytes": await self.store.database_size()},
            "model": self.directory.default_model_label(),
            "sandbox": self.sandbox_status() if self.sandbox_status is not None else None,
            "sessions": {
                "count": total,
                "recent": [session_row(r, self.manager) for r in records],
            },
        }

    def database_label(self) -> str:
        """Where sessions are stored, with any password masked (OpenClaw's `path`): rendered once,
        since the store's URL does not change (every `hello-ok` and `health` carries it)."""
        if self._database_label is None:
            url = self.store.database.url.render_as_string(hide_password=True)
            if "@" in url:
                scheme, _, rest = url.partition("://")
                url = f"{scheme}://***@{rest.split('@', 1)[1]}"
            self._database_label = url
        return self._database_label

    def channels_status(self) -> list[dict[str, Any]]:
        if self.channels is None:
            return []
        try:
            return list(self.channels.status())
        except Exception:
            log.exception("channel status failed")
            return []

    def redacted_config(self) -> dict[str, Any]:
        return self.config_view

    async def reload_config(self) -> dict[str, Any]:
        if self.reload_hook is None:
            return {}
        return await self.reload_hook()

    async def pairing_list(self) -> list[dict[str, Any]]:
        if self.channels is None:
            return []
        return list(await self.channels.pairing_list())

    async def pairing_approve(
        self, code: str, *, channel: str | None = None, account_id: str | None = None
    ) -> dict[str, Any] | None:
        if self.channels is None:
            return None
        return await self.channels.pairing_approve(code, channel=channel, account_id=account_id)

    def announce_shutdown(self, reason: str, restart_expected_ms: int | None = None) -> None:
        """Tell every connected client the gateway is stopping (`shutdown`, once)."""
        payload: dict[str, Any] = {"reason": reason}
        if restart_expected_ms is not None:
            payload["restartExpectedMs"] = restart_expected_ms
        self.hub.broadcast(encode_event("shutdown", payload))

    async def close_connections(self) -> None:
        """Close every connection with 1012 "service restart" after writing what it has queued."""

        async def close(outlet: Outlet) -> None:
            with contextlib.suppress(Exception):
                await outlet.drain(timeout=1.0)
            with contextlib.suppress(Exception):
                await outlet.transport.close(1012, "service restart")

        # Concurrently: a client that does not read holds up only its own close.
        await asyncio.gather(*(close(outlet) for outlet in list(self.hub.outlets.values())))


def _auth_limits(limits: Limits) -> tuple[float, ...]:
    return (
        limits.auth_failure_delay_s,
        limits.auth_failure_max_delay_s,
        limits.auth_failure_window_s,
        limits.handshake_timeout_s,
    )


def _failure_delays(limits: Limits) -> FailureDelays:
    return FailureDelays(
        first_s=limits.auth_failure_delay_s,
        # The refusal must go out before the connection's handshake deadline closes it.
        max_s=min(limits.auth_failure_max_delay_s, limits.handshake_timeout_s / 2),
        window_s=limits.auth_failure_window_s,
    )


def _parser(limits: Limits) -> frames.FrameParser:
    return frames.FrameParser(
        max_payload=limits.max_payload, pre_auth_max_payload=limits.pre_auth_max_payload
    )


def _now() -> int:
    return int(time.time() * 1000)
