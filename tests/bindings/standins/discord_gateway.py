"""The Gateway half of the Discord stand-in: a WebSocket server on 127.0.0.1.

It sends HELLO, validates IDENTIFY (token, intents, properties) and RESUME (session id and seq),
answers READY with a session id and `resume_gateway_url`, acknowledges heartbeats, numbers
dispatches per session, and replays the missed ones on RESUME. Tests script it: `zombify()` makes
the current connection stop acknowledging and delivering (a dead link that still looks open),
`send_reconnect()`, `invalidate_session(resumable)`, `dispatch(name, data)`.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import websockets
from websockets.asyncio.server import ServerConnection

from tests.bindings.standins.server import StandInServers

REQUIRED_INTENTS = 1 | 512 | 4096 | 32768


@dataclass
class GatewayConnection:
    ws: ServerConnection
    path: str
    zombie: bool = False
    heartbeats: list[Any] = field(default_factory=list)
    close_code: int | None = None
    closed: bool = False


@dataclass
class GatewaySession:
    id: str
    seq: int = 0
    log: list[dict[str, Any]] = field(default_factory=list)
    conn: GatewayConnection | None = None
    valid: bool = True


class GatewayStandIn(StandInServers):
    def __init__(
        self, *, token: str, bot_user_id: str, application_id: str, heartbeat_interval_ms: int
    ) -> None:
        self.token = token
        self.bot_user_id = bot_user_id
        self.application_id = application_id
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.sessions: dict[str, GatewaySession] = {}
        self.current: GatewaySession | None = None
        self.connections: list[GatewayConnection] = []
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.invalid_sessions_sent = 0
        self.port = 0
        super().__init__()

    async def __aenter__(self) -> GatewayStandIn:
        self.port = await self._serve_ws(self._serve)
        return self

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    @property
    def resume_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/resume"

    # -- scripting ---------------------------------------------------------------------------

    async def dispatch(self, name: str, data: Any) -> None:
        """Send a dispatch on the current session (kept in its log even if undelivered)."""
        if self.current is not None:
            await self._dispatch(self.current, name, data)

    def zombify(self) -> None:
        """The current connection stops acknowledging heartbeats and delivering dispatches."""
        self._live().zombie = True

    async def send_reconnect(self) -> None:
        await self._live().ws.send(json.dumps({"op": 7, "d": None}))

    async def invalidate_session(self, resumable: bool) -> None:
        conn = self._live()
        assert self.current is not None
        if not resumable:
            self.current.valid = False
        self.invalid_sessions_sent += 1
        await conn.ws.send(json.dumps({"op": 9, "d": resumable}))

    async def close_connection(self, code: int, reason: str = "") -> None:
        await self._live().ws.close(code, reason)

    def _live(self) -> GatewayConnection:
        assert self.current is not None and self.current.conn is not None, "no live gateway connection"
        return self.current.conn

    # -- protocol ----------------------------------------------------------------------------

    async def _dispatch(self, session: GatewaySession, name: str, data: Any) -> None:
        session.seq += 1
        payload = {"op": 0, "t": name, "s": session.seq, "d": data}
        session.log.append(payload)
        conn = session.conn
        if conn is not None and not conn.zombie and not conn.closed:
            try:
                await conn.ws.send(json.dumps(payload))
            except websockets.ConnectionClosed:
                pass

    async def _serve(self, ws: ServerConnection) -> None:
        path = ws.request.path if ws.request is not None else ""
        conn = GatewayConnection(ws=ws, path=path)
        self.connections.append(conn)
        if "v=10" not in path or "encoding=json" not in path:
            await ws.close(4012, "invalid API version")
            return
        await ws.send(json.dumps({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}}))
        try:
            async for raw in ws:
                await self._on_frame(conn, json.loads(raw))
        except websockets.ConnectionClosed:
            pass
        finally:
            conn.closed = True
            conn.close_code = ws.close_code
            for session in self.sessions.values():
                if session.conn is conn:
                    session.conn = None

    async def _on_frame(self, conn: GatewayConnection, payload: dict[str, Any]) -> None:
        op = payload.get("op")
        data = payload.get("d")
        if op == 1:
            conn.heartbeats.append(data)
            if not conn.zombie:
                await conn.ws.send(json.dumps({"op": 11}))
        elif op in (2, 6) and not isinstance(data, dict):
            await conn.ws.close(4002, "Error while decoding payload.")
        elif op == 2 and isinstance(data, dict):
            await self._identify(conn, data)
        elif op == 6 and isinstance(data, dict):
            await self._resume(conn, data)
        else:
            await conn.ws.close(4001, "unknown opcode")

    async def _identify(self, conn: GatewayConnection, data: dict[str, Any]) -> None:
        self.identifies.append(data)
        if data.get("token") != self.token:
            await conn.ws.close(4004, "Authentication failed.")
            return
        if not isinstance(data.get("intents"), int) or data["intents"] & REQUIRED_INTENTS != REQUIRED_INTENTS:
            await conn.ws.close(4013, "Invalid intent(s).")
            return
        properties = data.get("properties") or {}
        if not all(isinstance(properties.get(k), str) for k in ("os", "browser", "device")):
            await conn.ws.close(4002, "Error while decoding payload.")
            return
        session = GatewaySession(id=uuid.uuid4().hex, conn=conn)
        self.sessions[session.id] = session
        self.current = session
        await self._dispatch(
            session,
            "READY",
            {
                "v": 10,
                "user": {"id": self.bot_user_id, "username": "bot", "bot": True},
                "guilds": [],
                "session_id": session.id,
                "resume_gateway_url": self.resume_url,
                "application": {"id": self.application_id},
            },
        )

    async def _resume(self, conn: GatewayConnection, data: dict[str, Any]) -> None:
        self.resumes.append(data)
        if data.get("token") != self.token:
            await conn.ws.close(4004, "Authentication failed.")
            return
        session = self.sessions.get(str(data.get("session_id")))
        if session is None or not session.valid or not isinstance(data.get("seq"), int):
            await conn.ws.send(json.dumps({"op": 9, "d": False}))
            return
        session.conn = conn
        self.current = session
        for payload in session.log:
            if payload["s"] > data["seq"]:
                await conn.ws.send(json.dumps(payload))
        await self._dispatch(session, "RESUMED", None)
