"""Cluster fixtures: the real Redis at 127.0.0.1:6379 (a unique channel prefix per test), a TCP
proxy in front of it that a test can cut or freeze (the shared Redis itself is never restarted),
the sessions store on each backend, a PostgreSQL database of a test's own, and small helpers to
make and wait for events."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio import Redis

from sessions import MessageDelta, SessionEvent, Store, TurnStarted
from sessions.db import Database
from sessions.store import NewEvent, open_database
from tests.sessions.conftest import postgres_schema, store, store_url

__all__ = ["store", "store_url"]

REDIS_HOST = "127.0.0.1"
REDIS_PORT = 6379
REDIS_URL = f"redis://{REDIS_HOST}:{REDIS_PORT}/0"


@pytest.fixture
async def database() -> AsyncIterator[Database]:
    """PostgreSQL (cluster mode needs it): a migrated database in a schema of its own, dropped afterwards."""
    async with postgres_schema() as url:
        db = await open_database(url)
        try:
            yield db
        finally:
            await db.aclose()


@pytest.fixture
def prefix() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    client = Redis(host=REDIS_HOST, port=REDIS_PORT)
    try:
        yield client
    finally:
        await client.aclose()


async def kill_client(redis: Redis, name: str) -> int:
    """Kill every Redis connection named `name` (by id); return how many went."""
    clients = await redis.client_list()
    ids = [c["id"] for c in clients if c.get("name") == name]
    for client_id in ids:
        await redis.client_kill_filter(_id=client_id)
    return len(ids)


async def eventually(check: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class Proxy:
    """A TCP relay to Redis on a loopback port. `cut()` closes every connection and refuses new
    ones until `restore()`; `freeze()` keeps connections open but stops forwarding (a dead peer
    that never says so) until `thaw()`."""

    def __init__(self) -> None:
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def restore(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    async def aclose(self) -> None:
        await self.cut()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(REDIS_HOST, REDIS_PORT)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(source, sink))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                await self._flowing.wait()
                sink.write(data)
                await sink.drain()
        except (OSError, RuntimeError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                sink.close()


@pytest.fixture
async def proxy() -> AsyncIterator[Proxy]:
    relay = Proxy()
    await relay.restore()
    try:
        yield relay
    finally:
        await relay.aclose()


def turn(session_id: str, seq: int, *, ts: int | None = None) -> SessionEvent:
    """A small event (`turn.started`, turn index = seq)."""
    if ts is None:
        return SessionEvent(session_id=session_id, seq=seq, data=TurnStarted(turn_index=seq), run_id="r1")
    return SessionEvent(session_id=session_id, seq=seq, data=TurnStarted(turn_index=seq), run_id="r1", ts=ts)


def delta(session_id: str, seq: int) -> SessionEvent:
    """A droppable event (`message.delta`), which pruning removes."""
    data = MessageDelta(message_id="m1", content_index=0, kind="text", delta=f"d{seq}")
    return SessionEvent(session_id=session_id, seq=seq, data=data, run_id="r1")


async def new_session(store: Store) -> str:
    return (await store.tree.create_session(agent_id="main")).id


async def commit(store: Store, events: list[SessionEvent]) -> None:
    """Append `events` (one session's, continuing its log) as the journal stores them."""
    await store.events.append(
        events[0].session_id, [NewEvent(e.seq, e.name, e.log_payload(), e.run_id) for e in events]
    )
