"""`sessions.events.subscribe` by key from the start, against the real gateway served in-process,
when the key's session publishes while the call is still looking the key up (a watcher that
subscribes just as the session's first run starts): the answer comes first, then every event of
the session exactly once, in order."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from gateway.app import Gateway, create_app
from gateway.client import GatewayClient
from gateway.config import load_config
from gateway.state import GatewayState
from sessions import SessionEvent, SessionRecord
from tests.e2e.helpers import Raw, connect_params

TOKEN = "subscribe-methods-test-token-0123456789"


@contextlib.asynccontextmanager
async def served(home: Path) -> AsyncIterator[tuple[str, GatewayState]]:
    """The real app under a real uvicorn on a free loopback port: its URL and running state."""
    config = load_config(None, {"GATEWAY_HOME": str(home), "GATEWAY_MODEL": "faux/echo"})
    gateway = Gateway(config, token=TOKEN)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(gateway), ws="websockets-sansio", lifespan="on", log_config=None, access_log=False
        )
    )
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            assert not serving.done(), "the server did not start"
            await asyncio.sleep(0.01)
        yield f"ws://127.0.0.1:{port}/", gateway.running_state()
    finally:
        server.should_exit = True
        await serving
        sock.close()


class LookupGate:
    """Forces the interleaving: the first look-up of `key` in the store (the subscribe call's)
    reads the database, then waits until the key's session has published an event before it
    returns what it read."""

    def __init__(self, state: GatewayState, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.key = key
        self.looking = asyncio.Event()
        self.published = asyncio.Event()
        self._read = state.store.tree.get_session_by_key
        monkeypatch.setattr(state.store.tree, "get_session_by_key", self._get_session_by_key)
        state.bridge.add_listener(self._on_event)

    async def _get_session_by_key(self, key: str) -> SessionRecord | None:
        record = await self._read(key)
        if key == self.key and not self.looking.is_set():
            self.looking.set()
            await self.published.wait()
        return record

    def _on_event(self, event: SessionEvent) -> None:
        if event.session_key == self.key:
            self.published.set()


async def subscribe_while_the_first_run_starts(
    url: str, gate: LookupGate, params: dict[str, Any], *, reset: bool = False
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Subscribe with `params` on a raw connection; while the call looks the key up, start a run
    on the key (after moving the key to a new session with `reset`). The answer, and every frame
    of the connection up to the run's end in order (the answer included)."""
    raw = await Raw.open(url)
    assert (await raw.handshake(connect_params(TOKEN)))["ok"]
    try:
        await raw.send({"type": "req", "id": "sub", "method": "sessions.events.subscribe", "params": params})
        await asyncio.wait_for(gate.looking.wait(), 10)
        async with GatewayClient(url, token=TOKEN) as writer:
            if reset:
                await writer.call("sessions.reset", {"key": gate.key})
            await writer.call(
                "chat.send", {"sessionKey": gate.key, "message": "!long 5", "idempotencyKey": "r1"}
            )
            frames: list[dict[str, Any]] = []
            while not frames or frames[-1].get("event") != "session.agent.finished":
                frames.append(await raw.recv())
        answer = next(f for f in frames if f.get("id") == "sub")
        return answer, frames
    finally:
        await raw.aclose()


def answered_first(answer: dict[str, Any], frames: list[dict[str, Any]]) -> bool:
    """No native event of the session came before the subscribe answer (OpenClaw `agent` and
    `chat` frames go to every operator connection and are not part of the subscription)."""
    native = [i for i, f in enumerate(frames) if str(f.get("event", "")).startswith("session.")]
    return not native or frames.index(answer) < native[0]


def session_seqs(frames: list[dict[str, Any]]) -> list[int]:
    return [f["payload"]["sessionSeq"] for f in frames if str(f.get("event", "")).startswith("session.")]


async def test_a_session_that_publishes_during_the_look_up_is_replayed_once_after_the_answer(
    gateway_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "agent:main:watched"
    async with served(gateway_home) as (url, state):
        async with GatewayClient(url, token=TOKEN) as client:
            created = await client.call("sessions.create", {"key": key})
        gate = LookupGate(state, key, monkeypatch)
        answer, frames = await subscribe_while_the_first_run_starts(url, gate, {"key": key, "afterSeq": 0})
    assert answer["ok"] and answer["payload"]["sessionId"] == created["sessionId"]
    assert answer["payload"]["replay"] == "exact"
    seqs = session_seqs(frames)
    assert seqs == list(range(1, len(seqs) + 1)), "every event once, in order"
    assert answered_first(answer, frames), "no event of the session before the answer"


async def test_a_key_first_used_during_the_look_up_is_answered_with_its_session_and_replayed_once(
    gateway_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "agent:main:first-use"
    async with served(gateway_home) as (url, state):
        gate = LookupGate(state, key, monkeypatch)
        answer, frames = await subscribe_while_the_first_run_starts(url, gate, {"key": key})
        record = await state.store.tree.get_session_by_key(key)
    assert record is not None
    assert answer["ok"] and answer["payload"]["sessionId"] == record.id
    seqs = session_seqs(frames)
    assert seqs == list(range(1, len(seqs) + 1)), "every event once, in order"
    assert answered_first(answer, frames), "no event of the session before the answer"


async def test_a_key_moved_to_a_new_session_during_the_look_up_is_followed_where_it_points_now(
    gateway_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "agent:main:moved"
    async with served(gateway_home) as (url, state):
        async with GatewayClient(url, token=TOKEN) as client:
            old = await client.call("sessions.create", {"key": key})
        gate = LookupGate(state, key, monkeypatch)
        answer, frames = await subscribe_while_the_first_run_starts(
            url, gate, {"key": key, "afterSeq": 0}, reset=True
        )
        record = await state.store.tree.get_session_by_key(key)
    assert record is not None and record.id != old["sessionId"]
    assert answer["ok"] and answer["payload"]["sessionId"] == record.id
    events = [f for f in frames if str(f.get("event", "")).startswith("session.")]
    assert {f["payload"]["sessionId"] for f in events} == {record.id}
    seqs = session_seqs(frames)
    assert seqs == list(range(1, len(seqs) + 1)), "every event once, in order"
    assert answered_first(answer, frames), "no event of the session before the answer"
