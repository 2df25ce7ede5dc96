"""Helpers for end-to-end tests: raw WebSocket connections, captured real frames, shape checks.

`Raw` is a bare WebSocket speaking JSON frames (for handshake, limit and back-pressure tests);
`gateway.client.GatewayClient` is used for everything a normal client does.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from gateway.client import GatewayClient
from tests.daemon import Daemon, start_daemon

DATA = Path(__file__).parent / "data"
MAIN = "agent:main:main"
ALL_SCOPES = ("operator.read", "operator.write", "operator.admin")


def load_capture(name: str = "real-cli.jsonl") -> list[dict[str, Any]]:
    """Captured frames of a real OpenClaw exchange (`{conn, dir, frame}` per line)."""
    out = []
    for line in (DATA / name).read_text().splitlines():
        record = json.loads(line)
        if isinstance(record.get("frame"), dict):
            out.append(record)
    return out


def load_json(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def shape_problems(
    ours: Mapping[str, Any], theirs: Mapping[str, Any], keys: list[str], where: str
) -> list[str]:
    """Differences in presence and JSON type of `keys` between our object and the captured one
    (a null on either side matches any type: OpenClaw sends null for unset optional fields)."""
    problems = []
    for key in keys:
        if key not in theirs:
            problems.append(f"{where}.{key}: not in the captured frame (bad test data)")
        elif key not in ours:
            problems.append(f"{where}.{key}: missing (captured: {json_type(theirs[key])})")
        else:
            a, b = json_type(ours[key]), json_type(theirs[key])
            if a != b and "null" not in (a, b):
                problems.append(f"{where}.{key}: {a}, captured {b}")
    return problems


def connect_params(
    token: str | None,
    *,
    scopes: tuple[str, ...] = ALL_SCOPES,
    caps: tuple[str, ...] = (),
    min_protocol: int = 4,
    max_protocol: int = 4,
    client_id: str = "cli",
    mode: str = "cli",
) -> dict[str, Any]:
    return {
        "minProtocol": min_protocol,
        "maxProtocol": max_protocol,
        "client": {"id": client_id, "version": "1.0.0", "platform": "linux", "mode": mode},
        "role": "operator",
        "scopes": list(scopes),
        "caps": list(caps),
        "auth": {"token": token} if token is not None else {},
    }


class Raw:
    """A bare WebSocket connection to the gateway, one JSON frame per message. Connections a
    test leaves open are dropped after it (`drop_leftovers`, an autouse fixture)."""

    opened: ClassVar[set[Raw]] = set()

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self._ids = 0
        Raw.opened.add(self)

    @classmethod
    def drop_leftovers(cls) -> None:
        for raw in cls.opened:
            raw.ws.transport.abort()
        cls.opened.clear()

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        origin: str | None = None,
        max_size: int | None = 64 * 1024 * 1024,
        sock: socket.socket | None = None,
        max_queue: int | None = 16,
    ) -> Raw:
        ws = await websockets.connect(
            url,
            origin=origin,  # type: ignore[arg-type]
            max_size=max_size,
            compression=None,
            sock=sock,
            open_timeout=10,
            max_queue=max_queue,
            ping_interval=None,
        )
        return cls(ws)

    async def send(self, frame: Mapping[str, Any] | str | bytes) -> None:
        await self.ws.send(frame if isinstance(frame, str | bytes) else json.dumps(frame))

    async def recv(self, timeout: float = 10.0) -> dict[str, Any]:
        raw = await asyncio.wait_for(self.ws.recv(), timeout)
        frame: dict[str, Any] = json.loads(raw)
        return frame

    async def request(self, method: str, params: Any = None, *, timeout: float = 10.0) -> dict[str, Any]:
        """Send a request and return its response (events that arrive first are skipped)."""
        self._ids += 1
        rid = f"raw-{self._ids}"
        frame: dict[str, Any] = {"type": "req", "id": rid, "method": method}
        if params is not None:
            frame["params"] = params
        await self.send(frame)
        deadline = time.monotonic() + timeout
        while True:
            answer = await self.recv(max(0.01, deadline - time.monotonic()))
            if answer.get("type") == "res" and answer.get("id") == rid:
                return answer

    async def handshake(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Wait for the challenge, send `connect`, return the response frame."""
        challenge = await self.recv()
        assert challenge["event"] == "connect.challenge", challenge
        await self.send({"type": "req", "id": "c1", "method": "connect", "params": dict(params)})
        return await self.recv()

    async def closed(self, timeout: float = 10.0) -> tuple[int | None, str]:
        """Read until the server closes; the close code and reason it sent."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    await self.ws.recv()
        except websockets.exceptions.ConnectionClosed as exc:
            if exc.rcvd is None:
                return None, ""
            return exc.rcvd.code, exc.rcvd.reason
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        Raw.opened.discard(self)
        await self.ws.close()


async def open_raw(daemon: Daemon, **kwargs: Any) -> Raw:
    raw = await Raw.open(daemon.url, **kwargs)
    answer = await raw.handshake(connect_params(daemon.token))
    assert answer["ok"], answer
    return raw


async def wait_for(
    client: GatewayClient,
    predicate: Callable[[dict[str, Any]], bool],
    *,
    timeout: float = 15.0,
    into: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The next event matching `predicate` (events passed over are appended to `into`)."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no matching event within {timeout}s")
        event = await client.next_event(timeout=remaining)
        if event is None:
            raise AssertionError(f"connection closed ({client.close_code}) before a matching event")
        if into is not None:
            into.append(event)
        if predicate(event):
            return event


def is_run_end(run_id: str) -> Callable[[dict[str, Any]], bool]:
    """The native `session.agent.finished` event of a run."""

    def check(event: dict[str, Any]) -> bool:
        payload = event.get("payload") or {}
        return event.get("event") == "session.agent.finished" and payload.get("runId") == run_id

    return check


async def eventually(check: Callable[[], Awaitable[bool]], *, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


@contextmanager
def module_daemon(tmp_path_factory: pytest.TempPathFactory, name: str, **kwargs: Any) -> Iterator[Daemon]:
    """A daemon shared by a module's tests, with its own temporary home (and HOME)."""
    home = tmp_path_factory.mktemp(name)
    env = {"HOME": str(home / "user"), **kwargs.pop("env", {})}
    with pytest.MonkeyPatch.context() as patch:
        for variable in ("GATEWAY_CONFIG", "GATEWAY_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
            patch.delenv(variable, raising=False)
        daemon = start_daemon(home / "state", env=env, **kwargs)
    try:
        yield daemon
    finally:
        daemon.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
