"""The running gateway's shared state: store, session manager, hub, auth, limits, snapshots.

Created by the app's lifespan, closed by it. Method handlers reach everything through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from gateway import __version__
from gateway.auth import FailureLimiter, check_origin
from gateway.bridge import Bridge
from gateway.hub import Hub, Outlet, encode_event
from gateway.loop_lag import LagProbe
from gateway.protocol import frames, handshake
from gateway.protocol.methods import EVENTS, METHODS
from gateway.rows import session_row

if TYPE_CHECKING:
    from gateway.directory import Directory
    from gateway.methods.base import ConnState
    from sessions.manager import SessionManager
    from sessions.store import Store

log = structlog.get_logger("gateway.state")


@dataclass(frozen=True, kw_only=True)
class Limits:
    max_payload: int = 25 * 1024 * 1024
    pre_auth_max_payload: int = 64 * 1024
    max_buffered_bytes: int = 50 * 1024 * 1024
    tick_interval_ms: int = 30_000
    handshake_timeout_s: float = 15.0
    requests_per_second: float = 200.0
    request_burst: int = 400
    max_inflight: int = 64
    auth_max_failures: int = 10
    auth_failure_window_s: float = 60.0
    auth_lockout_s: float = 300.0


@dataclass(eq=False)
class GatewayState:
    home: Path
    store: Store
    manager: SessionManager
    hub: Hub
    bridge: Bridge
    directory: Directory
    auth: Any
    limits: Limits
    allowed_origins: list[str] = field(default_factory=list)
    config_path: str | None = None
    config_view: dict[str, Any] = field(default_factory=dict)
    reload_hook: Any = None
    channels: Any = None
    ready: bool = False
    stopping: bool = False
    started_at: float = field(default_factory=time.time)
    boot_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    presence_version: int = 1
    health_version: int = 1
    _tasks: set[asyncio.Future[Any]] = field(default_factory=set)
    _presence: dict[str, dict[str, Any]] = field(default_factory=dict)
    _auth_limits: tuple[int, float, float] | None = field(default=None, init=False)
    loop_lag: LagProbe = field(default_factory=LagProbe)
    """Event-loop lag, started and closed by the app with the tick task."""

    def __post_init__(self) -> None:
        self.set_limits(self.limits)

    def set_limits(self, limits: Limits) -> None:
        """Apply limits (at start and on reload; connections read them when they start). Known
        failed authentications are kept when the auth limits do not change."""
        previous = self._auth_limits
        self.limits = limits
        self.parser = frames.FrameParser(
            max_payload=limits.max_payload, pre_auth_max_payload=limits.pre_auth_max_payload
        )
        auth = (limits.auth_max_failures, limits.auth_failure_window_s, limits.auth_lockout_s)
        if previous is None or previous != auth:
            self.auth_failures = FailureLimiter(
                max_failures=limits.auth_max_failures,
                window_s=limits.auth_failure_window_s,
                lockout_s=limits.auth_lockout_s,
            )
        self._auth_limits = auth

    # --- background work ----------------------------------------------------------------------

    def track(self, task: asyncio.Future[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def cancel_tasks(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def tick_loop(self) -> None:
        interval = self.limits.tick_interval_ms / 1000
        health_every = max(1, int(60 / interval)) if interval > 0 else 1
        count = 0
        while True:
            await asyncio.sleep(interval)
            self.hub.broadcast(encode_event("tick", {"ts": _now()}))
            count += 1
            if count % health_every == 0:
                await self.broadcast_health()

    async def broadcast_health(self) -> None:
        self.health_version += 1
        snapshot = await self.health_snapshot()
        self.hub.broadcast(encode_event("health", snapshot, state_version=self.state_version()))

    # --- handshake ----------------------------------------------------------------------------

    def origin_allowed(self, origin: str | None, host: str) -> bool:
        return check_origin(origin, host, self.allowed_origins)

    def hello_ok(self, conn: ConnState, accepted: Any) -> dict[str, Any]:
        return handshake.build_hello_ok(
            server_version=__version__,
            conn_id=conn.conn_id,
            methods=sorted(set(METHODS)),
            events=list(EVENTS),
            presence=self.presence_list(),
            health=self._health_sync(),
            state_version=self.state_version(),
            uptime_ms=int((time.time() - self.started_at) * 1000),
            role=getattr(accepted, "role", "operator"),
            scopes=list(accepted.scopes),
            max_payload=self.limits.max_payload,
            max_buffered_bytes=self.limits.max_buffered_bytes,
            tick_interval_ms=self.limits.tick_interval_ms,
            auth_method=getattr(accepted, "auth_method", "token"),
            boot_id=self.boot_id,
            default_agent_id=self.directory.default_agent_id,
            model_configured=self.directory.model_problem() is None,
            state_dir=str(self.home),
        )

    def on_connect(self, conn: ConnState) -> None:
        client = conn.client
        if client.get("mode") not in (None, "cli") or client.get("instanceId"):
            self._presence[conn.conn_id] = {
                "ts": _now(),
                "instanceId": client.get("instanceId") or conn.conn_id,
                "mode": client.get("mode"),
                "platform": client.get("platform"),
                "version": client.get("version"),
                "host": client.get("host"),
                "scopes": sorted(conn.scopes),
            }
            self.presence_version += 1
            self.hub.broadcast(
                encode_event(
                    "presence", {"presence": self.presence_list()}, state_version=self.state_version()
                ),
                scope="operator.read",
            )

    def on_disconnect(self, conn: ConnState) -> None:
        if self._presence.pop(conn.conn_id, None) is not None:
            self.presence_version += 1
            self.hub.broadcast(
                encode_event(
                    "presence", {"presence": self.presence_list()}, state_version=self.state_version()
                ),
                scope="operator.read",
            )

    def presence_list(self) -> list[dict[str, Any]]:
        return list(self._presence.values())

    def state_version(self) -> dict[str, int]:
        return {"presence": self.presence_version, "health": self.health_version}

    # --- snapshots ----------------------------------------------------------------------------

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
            "channels": channels,
            "channelOrder": list(channels),
            "channelLabels": labels,
            "defaultAgentId": default,
            "agents": [
                {"agentId": p.id, "isDefault": p.id == default, "model": p.model}
                for p in self.directory.profiles()
            ],
            "sessions": {
                "path": self._db_label(),
                "live": self.manager.live_count(),
                "running": self.manager.running_count(),
            },
        }

    async def health_snapshot(self) -> dict[str, Any]:
        started = time.perf_counter()
        snapshot = self._health_sync()
        records, total = await self.store.list_sessions(limit=5)
        now = _now()
        snapshot["sessions"]["count"] = total
        snapshot["sessions"]["recent"] = [
            {"key": (r.keys or [None])[0], "updatedAt": r.updated_at, "age": max(0, now - r.updated_at)}
            for r in records
        ]
        snapshot["durationMs"] = int((time.perf_counter() - started) * 1000)
        return snapshot

    async def status_snapshot(self) -> dict[str, Any]:
        records, total = await self.store.list_sessions(limit=5)
        lag = self.loop_lag.snapshot()  # `eventLoopLagMs`: p99 of the last minute
        return {
            "runtimeVersion": __version__,
            "version": __version__,
            "pid": os.getpid(),
            "platform": platform.platform(),
            "uptimeMs": int((time.time() - self.started_at) * 1000),
            "connections": len(self.hub),
            "slowConsumersClosed": self.hub.slow_consumers,
            "liveSessions": self.manager.live_count(),
            "runsInFlight": self.manager.running_count(),
            "eventLoopLagMs": lag["p99Ms"],
            "eventLoopLag": lag,
            "runSlots": {"active": self.manager.limiter.active, "waiting": self.manager.limiter.waiting},
            "queueDepths": self.manager.queue_depths(),
            "journalPending": self.manager.journal.pending,
            "channels": self.channels_status(),
            "database": {"url": self._db_label(), "sizeBytes": await self.store.database_size()},
            "model": self.directory.default_model_label(),
            "sessions": {
                "count": total,
                "recent": [session_row(r, self.manager) for r in records],
            },
        }

    def database_label(self) -> str:
        """Where sessions are stored, with any password masked (OpenClaw's `path`)."""
        return self._db_label()

    def _db_label(self) -> str:
        url = self.store.database.url.render_as_string(hide_password=True)
        if "@" in url:
            scheme, _, rest = url.partition("://")
            return f"{scheme}://***@{rest.split('@', 1)[1]}"
        return url

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
        result: dict[str, Any] = await self.reload_hook()
        return result

    async def pairing_list(self) -> list[dict[str, Any]]:
        if self.channels is None:
            return []
        return list(await self.channels.pairing_list())

    async def pairing_approve(
        self, code: str, *, channel: str | None = None, account_id: str | None = None
    ) -> dict[str, Any] | None:
        if self.channels is None:
            return None
        result: dict[str, Any] | None = await self.channels.pairing_approve(
            code, channel=channel, account_id=account_id
        )
        return result

    def announce_shutdown(self, reason: str, restart_expected_ms: int | None = None) -> None:
        """Tell every connected client the gateway is stopping (`shutdown`, once)."""
        from gateway.connection import shutdown_frame

        self.hub.broadcast(shutdown_frame(reason, restart_expected_ms))

    async def close_connections(self) -> None:
        """Close every connection with 1012 "service restart" after writing what it has queued."""
        outlets = list(self.hub.outlets.values())

        async def close(outlet: Outlet) -> None:
            with contextlib.suppress(Exception):
                await outlet.drain(timeout=1.0)
            with contextlib.suppress(Exception):
                await outlet.transport.close(1012, "service restart")

        # Concurrently: a client that does not read holds up only its own close.
        await asyncio.gather(*(close(outlet) for outlet in outlets))


def _now() -> int:
    return int(time.time() * 1000)
