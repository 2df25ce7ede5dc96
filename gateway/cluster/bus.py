"""`Bus`: Redis pub/sub between the nodes of a cluster: committed event batches and control messages.

Redis is the fast path, never the record. A node publishes each batch of events it committed once
(one PUBLISH on `{prefix}:events`, however many clients follow the session anywhere) and small
control messages to one node (`{prefix}:node:<id>`) or to all (`{prefix}:all`). Every node
subscribes to the three channels that concern it and skips what it sent itself.

Guarantees, and their limits:

- Per sender, messages leave in the order they were handed over (one sender task, one connection).
  Redis pub/sub is at most once: a message published while a subscriber is disconnected is lost for
  it. A node repairs that from the event log: `on_resubscribed(since_ms)` says from when.
- The outgoing queue holds at most `max_queued` messages (event batches and control messages
  together). When it is full the oldest message is dropped and counted (`dropped`): receivers fill
  the hole from the log on the batch after it or on their next catch-up. While Redis is away the
  queue keeps what is published (within the bound) and is sent once a connection is back. A chunk
  whose PUBLISH may or may not have reached Redis is sent again: a receiver may see a message twice
  (the relay drops repeated events by seq; control messages must be idempotent).
- Nothing here raises into its callers: `publish_events` and `send` only queue; failures of Redis
  are logged, one line per change of state, and retried forever with backoff (0.1 s doubling to
  2 s). A subscription that hears nothing for `DEAD_AFTER` seconds (it pings when idle) is taken
  for dead and opened again, so a silently dead connection is noticed within about two seconds.

The two connections are named (`<prefix>:<node>:sub`, `:pub`; see `CLIENT LIST`). They are plain
redis-py connections, not its `PubSub`, which re-subscribes silently and would hide a loss.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any

import msgspec
import structlog
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError
from redis.retry import Retry

from gateway.background import Background
from sessions import EventRecord, SessionEvent

__all__ = ["Bus"]

log = structlog.get_logger("gateway.cluster.bus")

DEFAULT_MAX_QUEUED = 10_000
CHUNK = 64  # messages per round trip (pipelined PUBLISH commands)
FIRST_DELAY = 0.1
MAX_DELAY = 2.0
CONNECT_TIMEOUT = 2.0
IO_TIMEOUT = 2.0
POLL = 0.25
"""How long one read of the subscription waits before the idle checks run."""
PING_AFTER = 0.7
"""Silence on the subscription after which it is pinged."""
DEAD_AFTER = 2.0
"""Silence (no message, no pong) after which the subscription is taken for dead."""

OnEvents = Callable[[list[EventRecord]], None]
OnMessage = Callable[[str, dict[str, Any], str], None]
OnResubscribed = Callable[[int], Awaitable[None]]


class _WireEvent(msgspec.Struct, array_like=True, frozen=True):
    session_id: str
    seq: int
    run_id: str | None
    type: str
    created_at: int
    payload: msgspec.Raw
    """The event's stored JSON (`SessionEvent.log_json()`), spliced in as it is."""

    @classmethod
    def of(cls, e: SessionEvent) -> _WireEvent:
        return cls(e.session_id, e.seq, e.run_id, e.name, e.ts, msgspec.Raw(e.log_json().encode()))

    def record(self) -> EventRecord:
        payload = _decode_payload(self.payload)
        return EventRecord(self.session_id, self.seq, self.run_id, self.type, payload, self.created_at)


class _Batch(msgspec.Struct, frozen=True):
    origin: str = msgspec.field(name="o")
    events: list[_WireEvent] = msgspec.field(name="e")


class _Control(msgspec.Struct, frozen=True):
    origin: str = msgspec.field(name="o")
    kind: str = msgspec.field(name="k")
    body: dict[str, Any] = msgspec.field(name="b")


_decode_batch = msgspec.json.Decoder(_Batch).decode
_decode_control = msgspec.json.Decoder(_Control).decode
_decode_payload = msgspec.json.Decoder(dict[str, Any]).decode
_encode = msgspec.json.Encoder().encode


def _now_ms() -> int:
    return int(time.time() * 1000)


class Bus:
    """The node's Redis pub/sub. Set the callbacks, then `await start()`; `await aclose()` at the end.

    Callbacks run on the event loop and must not block: `on_events` gets remote event batches (the
    payload parsed back to a dict), `on_message` remote control messages `(kind, body, origin)`,
    and `on_resubscribed(since_ms)` is awaited (as a task of the bus) each time the subscription
    is established after a time without one: `since_ms` is the wall-clock time until which the
    bus had heard everything (the last message or pong of the lost connection, or the time of
    `start()` when the first attempt to subscribe failed). A callback that raises is logged.
    """

    def __init__(self, url: str, *, prefix: str, node_id: str, max_queued: int = DEFAULT_MAX_QUEUED) -> None:
        self.node_id = node_id
        self.events_channel = f"{prefix}:events"
        self.node_channel = f"{prefix}:node:{node_id}"
        self.all_channel = f"{prefix}:all"
        self._prefix = prefix
        self.max_queued = max_queued
        self.on_events: OnEvents | None = None
        self.on_message: OnMessage | None = None
        self.on_resubscribed: OnResubscribed | None = None
        self.published = 0
        self.received = 0
        self.dropped = 0
        self.reconnects = 0
        """Subscriptions established after a loss."""
        self.connected = False
        """True while the subscription is up."""
        name = f"{prefix}:{node_id}".replace(" ", "_")  # a Redis client name cannot hold spaces
        self.sub_name = f"{name}:sub"
        self.pub_name = f"{name}:pub"
        self._url = url
        # Outgoing (channel, data), oldest first; `_in_flight` is the chunk being published.
        self._queue: deque[tuple[str, bytes]] = deque()
        self._in_flight = 0
        self._wake = asyncio.Event()
        self._tasks = Background("cluster bus")
        self._started = False
        self._closed = False
        self._overflowing = False
        self._heard_ms = 0

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the subscriber and the sender. Returns at once; the connections are made (and
        made again) in the background. Idempotent; a closed bus stays closed."""
        if self._started or self._closed:
            return
        self._started = True
        self._tasks.spawn(self._receive_forever(_now_ms()), name="bus-receive")
        self._tasks.spawn(self._send_forever(), name="bus-send")

    async def aclose(self) -> None:
        """Stop both tasks and close the connections; what is still queued is discarded (call
        `flush` first to wait for it). Idempotent."""
        self._closed = True
        await self._tasks.aclose()
        self._queue.clear()
        self.connected = False

    async def __aenter__(self) -> Bus:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def flush(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds until everything queued has been published; True if it
        has (False when Redis is away or the bus is not running)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self._queue or self._in_flight:
            if self._closed or asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    @property
    def queued(self) -> int:
        """Messages waiting to be published (at most `max_queued`)."""
        return len(self._queue) + self._in_flight

    # -- publishing ------------------------------------------------------------------------------

    def publish_events(self, events: Sequence[SessionEvent]) -> None:
        """Queue one batch of committed events (in seq order per session) for the other nodes.
        Never blocks, never raises."""
        if not events or self._closed:
            return
        try:
            batch = _Batch(self.node_id, [_WireEvent.of(event) for event in events])
            self._enqueue(self.events_channel, _encode(batch))
        except Exception:
            log.exception("cluster bus cannot encode an event batch", count=len(events))

    def send(self, kind: str, body: dict[str, Any], *, node: str | None = None) -> None:
        """Queue a control message for `node` (or, with None, for every node). Never blocks; a
        body JSON cannot hold is logged and dropped."""
        if self._closed:
            return
        channel = self.all_channel if node is None else f"{self._prefix}:node:{node}"
        try:
            data = _encode(_Control(origin=self.node_id, kind=kind, body=body))
        except Exception:
            log.exception("cluster bus cannot encode a message", kind=kind)
            return
        self._enqueue(channel, data)

    def _enqueue(self, channel: str, data: bytes) -> None:
        self._queue.append((channel, data))
        self._trim()
        self._wake.set()

    def _trim(self) -> None:
        """Drop the oldest messages past the bound (receivers repair from the log)."""
        size = len(self._queue) + self._in_flight
        over = size - self.max_queued
        if over <= 0:
            # One warning per overflow: the next only after the queue has half emptied.
            if size <= self.max_queued // 2:
                self._overflowing = False
            return
        for _ in range(min(over, len(self._queue))):
            self._queue.popleft()
            self.dropped += 1
        if not self._overflowing:
            self._overflowing = True
            log.warning("cluster bus queue full: dropping the oldest messages", bound=self.max_queued)

    async def _send_forever(self) -> None:
        conn: AbstractConnection | None = None
        delay = FIRST_DELAY
        failing = False
        try:
            while True:
                if not self._queue:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                chunk = [self._queue.popleft() for _ in range(min(CHUNK, len(self._queue)))]
                self._in_flight = len(chunk)
                try:
                    conn = conn or await self._open(self.pub_name)
                    await conn.send_packed_command(conn.pack_commands(("PUBLISH", *m) for m in chunk))
                    for _ in chunk:
                        await conn.read_response()
                except (RedisError, OSError) as exc:
                    self._in_flight = 0
                    if isinstance(exc, ResponseError):
                        # Refused (permissions, a misconfigured server): it would fail again.
                        self.dropped += len(chunk)
                        log.error("cluster bus publish refused; messages dropped", error=str(exc))
                    else:
                        # Not known to have reached Redis: send it again, oldest first.
                        self._queue.extendleft(reversed(chunk))
                        self._trim()
                    if not failing:
                        log.warning("cluster bus cannot publish; retrying", error=str(exc))
                    failing = True
                    if conn is not None:
                        await conn.disconnect(nowait=True)
                        conn = None
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, MAX_DELAY)
                    continue
                self._in_flight = 0
                self.published += len(chunk)
                delay = FIRST_DELAY
                if failing:
                    failing = False
                    log.info("cluster bus publishing again", queued=len(self._queue))
        finally:
            if conn is not None:
                await conn.disconnect(nowait=True)

    # -- subscribing -----------------------------------------------------------------------------

    async def _receive_forever(self, started_ms: int) -> None:
        # `since_ms` is None while nothing was ever missed (the first attempt has not failed).
        since_ms: int | None = None
        delay = FIRST_DELAY
        failing = False
        while True:
            try:
                conn = await self._subscribe()
            except (RedisError, OSError) as exc:
                if since_ms is None:
                    since_ms = started_ms
                if not failing:
                    failing = True
                    log.warning("cluster bus cannot subscribe; retrying", error=str(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_DELAY)
                continue
            failing = False
            delay = FIRST_DELAY
            self.connected = True
            log.info("cluster bus subscribed", node=self.node_id, catch_up_since=since_ms)
            if since_ms is not None:
                self.reconnects += 1
                self._tasks.spawn(self._resubscribed(since_ms), name="bus-resubscribed")
            self._heard_ms = _now_ms()
            try:
                await self._listen(conn)
            except (RedisError, OSError) as exc:
                log.warning("cluster bus subscription lost", error=str(exc) or type(exc).__name__)
            except Exception:
                log.exception("cluster bus subscription failed")
            finally:
                self.connected = False
                await conn.disconnect(nowait=True)
            since_ms = self._heard_ms

    async def _resubscribed(self, since_ms: int) -> None:
        if self.on_resubscribed is not None:
            await self.on_resubscribed(since_ms)

    async def _subscribe(self) -> AbstractConnection:
        conn = await self._open(self.sub_name)
        try:
            channels = (self.events_channel, self.node_channel, self.all_channel)
            await conn.send_command("SUBSCRIBE", *channels)
            for _ in channels:
                reply = await conn.read_response(timeout=IO_TIMEOUT)
                if not isinstance(reply, list) or reply[0] != b"subscribe":
                    raise RedisError(f"unexpected reply to SUBSCRIBE: {reply!r}")
        except BaseException:
            await conn.disconnect(nowait=True)
            raise
        return conn

    async def _listen(self, conn: AbstractConnection) -> None:
        """Read the subscription until it fails, keeping `_heard_ms` at the wall-clock time of the
        last thing read: everything published before it has been received."""
        loop = asyncio.get_running_loop()
        last = pinged = loop.time()
        while True:
            reply = await conn.read_response(timeout=POLL)
            now = loop.time()
            if reply is None:
                if now - last >= DEAD_AFTER:
                    raise RedisError(f"no reply from Redis for {DEAD_AFTER} s")
                if now - last >= PING_AFTER and now - pinged >= PING_AFTER:
                    pinged = now
                    await conn.send_command("PING")
                continue
            last = now
            self._heard_ms = _now_ms()
            if isinstance(reply, list) and len(reply) == 3 and reply[0] == b"message":
                self._dispatch(reply[1].decode(), reply[2])

    def _dispatch(self, channel: str, data: bytes) -> None:
        try:
            if channel == self.events_channel:
                batch = _decode_batch(data)
                if batch.origin != self.node_id:
                    self.received += 1
                    records = [event.record() for event in batch.events]
                    if self.on_events is not None:
                        self.on_events(records)
            else:
                message = _decode_control(data)
                if message.origin != self.node_id:
                    self.received += 1
                    if self.on_message is not None:
                        self.on_message(message.kind, message.body, message.origin)
        except msgspec.DecodeError as exc:
            log.warning("cluster bus message unreadable", channel=channel, error=str(exc))
        except Exception:
            log.exception("cluster bus callback failed", channel=channel)

    async def _open(self, name: str) -> AbstractConnection:
        pool = ConnectionPool.from_url(
            self._url,
            client_name=name,
            socket_connect_timeout=CONNECT_TIMEOUT,
            socket_timeout=IO_TIMEOUT,
            retry=Retry(NoBackoff(), 0),
            # RESP2 (redis-py 8 defaults to RESP3): pub/sub messages are plain replies, not pushes
            # that the parser would hand to a push handler.
            protocol=2,
        )
        conn: AbstractConnection = pool.make_connection()  # type: ignore[no-untyped-call]
        try:
            await conn.connect()  # type: ignore[no-untyped-call]
        except BaseException:
            await conn.disconnect(nowait=True)
            raise
        return conn
