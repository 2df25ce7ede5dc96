"""The one place that knows uvicorn's internals: it recognises only the pinned version's
WebSocket protocol object, and when it does not recognise the server, the gateway still works
through plain ASGI `send` (served here by a real uvicorn whose `send` is wrapped, as any
send-wrapping middleware would)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.types import Message, Receive, Scope, Send

from gateway.app import Gateway, create_app
from gateway.client import GatewayClient
from gateway.config import load_config
from gateway.uvicorn_socket import KNOWN_UVICORN, known_version, recognise

TOKEN = "uvicorn-socket-test-token-0123456789"


def test_only_the_pinned_minor_version_is_known() -> None:
    major, minor = KNOWN_UVICORN
    assert known_version(uvicorn.__version__), "the installed uvicorn is not the one this code reads"
    assert known_version(f"{major}.{minor}.7")
    assert not known_version(f"{major}.{minor + 1}.0")
    assert not known_version("garbage")


def test_a_send_that_is_not_uvicorn_s_protocol_is_not_recognised() -> None:
    async def send(message: Message) -> None:
        return None

    assert recognise(send) is None
    assert recognise(object()) is None


@contextlib.asynccontextmanager
async def served_behind_a_wrapped_send(home: Path) -> AsyncIterator[str]:
    """The real app under a real uvicorn, with `send` wrapped before the app sees it."""
    config = load_config(None, {"GATEWAY_HOME": str(home), "GATEWAY_MODEL": "faux/echo"})
    gateway = Gateway(config, token=TOKEN)
    app = create_app(gateway)

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        async def send_through(message: Message) -> None:
            await send(message)

        await app(scope, receive, send_through)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(wrapped, ws="websockets-sansio", lifespan="on", log_config=None, access_log=False)
    )
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            assert not serving.done(), "the server did not start"
            await asyncio.sleep(0.01)
        yield f"ws://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        await serving
        sock.close()


async def test_frames_go_through_plain_asgi_send_when_the_server_is_not_recognised(
    gateway_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEWAY_FAUX_PACE_MS", "0")
    key = "agent:main:fallback"
    async with (
        served_behind_a_wrapped_send(gateway_home) as url,
        GatewayClient(url, token=TOKEN) as client,
    ):
        await client.call("sessions.events.subscribe", {"key": key, "afterSeq": 0})
        await client.call("chat.send", {"sessionKey": key, "message": "!long 50", "idempotencyKey": "f1"})
        events: list[dict[str, Any]] = []
        while not events or events[-1]["event"] != "session.agent.finished":
            got = await client.next_event(timeout=15)
            assert got is not None, "the connection closed"
            events.append(got)
        seqs = [e["payload"]["sessionSeq"] for e in events if e["event"].startswith("session.")]
        assert seqs == list(range(1, len(seqs) + 1))
        text = "".join(e["payload"]["delta"] for e in events if e["event"] == "session.message.delta")
        assert text == " ".join(f"w{n}" for n in range(1, 51))
        fan_out = (await client.call("status"))["fanOut"]
        assert fan_out["directWriteConnections"] == 0 and fan_out["framesWrittenDirect"] == 0
        assert fan_out["framesWrittenBySend"] >= len(events)
