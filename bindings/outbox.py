"""The reply relay: streams an agent's reply into a chat channel.

For each run the relay keeps one platform message per chunk of the reply. The first chunk is
posted on the first non-empty delta and then edited while the reply streams, at most once per
`edit_interval_s` and only when its text changed; when the text grows past the platform's limit
the next chunk is posted as a new message; the end of the run (`final`, `error`, `aborted`) is
one last round of edits, never a second copy.

Every chunk is an outbox record written through the host before the first send attempt, keyed
by `outbox_key(...)`, which doubles as the platform idempotency key (Discord's `nonce`, a marker
in Slack's message metadata). A send that failed in an unknown state is retried with the same
key, so it cannot post twice; after a restart `recover()` finishes what the records say was in
flight.

Reply events are coalesced, not queued: the text is cumulative, so a stream only keeps the latest
one and a slow platform costs edits, never content. Transient failures (network, 5xx) are retried
with a capped backoff until the relay closes; a refusal (4xx) marks the chunk `failed` and ends
that run's stream. The number of live streams (`active_streams`) is bounded by the runs the
daemon lets run at once.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar

import structlog

from bindings.chunking import chunk_text
from bindings.errors import PlatformRequestError, PlatformUnavailableError
from bindings.host import (
    OutboxRecord,
    OutboxState,
    OutboxStore,
    Platform,
    ReplyEvent,
    ReplyKind,
    ReplyRoute,
    outbox_key,
)

log = structlog.get_logger("bindings.outbox")

ERROR_NOTICE = "_(the agent stopped because of an error)_"
ABORTED_NOTICE = "_(stopped)_"
EMPTY_CHUNK = "\u200b"
"""Platforms refuse blank messages; a chunk of pure whitespace is sent as a zero-width space."""


class MessageTransport(Protocol):
    """How the relay reaches a platform. Both calls retry rate limits themselves and raise
    `PlatformUnavailableError` (may retry later) or `PlatformRequestError` (refused)."""

    async def post_message(self, route: ReplyRoute, text: str, *, key: str, maybe_sent: bool = False) -> str:
        """Post `text` to `route` and return the platform message id. Posting twice with the
        same `key` must leave one message. `maybe_sent`: a post with `key` may have been made
        by a previous process (its outcome was never recorded)."""
        ...

    async def edit_message(self, route: ReplyRoute, message_id: str, text: str) -> None: ...


@dataclass(frozen=True, kw_only=True)
class RelaySettings:
    chunk_limit: int
    edit_interval_s: float = 1.0
    retry_initial_s: float = 0.5
    retry_max_s: float = 30.0
    max_routes: int = 4096
    """Session and run routes remembered (least recently used forgotten first)."""


@dataclass
class _Posted:
    key: str
    message_id: str
    text: str
    state: OutboxState


@dataclass
class _Stream:
    run_id: str
    route: ReplyRoute
    text: str = ""
    kind: ReplyKind = "delta"
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    posted: list[_Posted] = field(default_factory=list)
    running: bool = False


class _StreamFailed(Exception):
    pass


def render_reply(text: str, kind: ReplyKind) -> str:
    """The text a reply shows: the agent's text, plus a notice when the run did not finish."""
    notice = {"error": ERROR_NOTICE, "aborted": ABORTED_NOTICE}.get(kind)
    if notice is None:
        return text
    return f"{text.rstrip()}\n\n{notice}" if text.strip() else notice


class ReplyRelay:
    """Relays reply events to one platform account. Run `run()` in a task; `aclose()` ends it.

    `bind(session_key, route, run_id)` tells the relay where replies of a session (and of a
    particular run) go; `on_event(session_key, event)` is the host's reply listener.
    """

    def __init__(
        self,
        *,
        platform: Platform,
        account_id: str,
        transport: MessageTransport,
        store: OutboxStore,
        settings: RelaySettings,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._platform: Platform = platform
        self._account_id = account_id
        self._transport = transport
        self._store = store
        self._settings = settings
        self._clock = clock
        self._sleep = sleep
        self._streams: dict[str, _Stream] = {}
        self._session_routes: OrderedDict[str, ReplyRoute] = OrderedDict()
        self._run_routes: OrderedDict[str, ReplyRoute] = OrderedDict()
        self._finished: OrderedDict[str, None] = OrderedDict()
        self._tg: asyncio.TaskGroup | None = None
        self._closing = asyncio.Event()
        self.posts = 0
        self.edits = 0

    @property
    def active_streams(self) -> int:
        return len(self._streams)

    def route_for_session(self, session_key: str) -> ReplyRoute | None:
        return self._session_routes.get(session_key)

    def bind(self, session_key: str, route: ReplyRoute, run_id: str | None = None) -> None:
        _remember(self._session_routes, session_key, route, self._settings.max_routes)
        if run_id is not None:
            _remember(self._run_routes, run_id, route, self._settings.max_routes)

    def on_event(self, session_key: str, event: ReplyEvent) -> None:
        """Take one reply event (synchronously; never blocks)."""
        if event.run_id in self._finished:
            return
        stream = self._streams.get(event.run_id)
        if stream is None:
            route = self._run_routes.get(event.run_id) or self._session_routes.get(session_key)
            if route is None:
                log.warning("reply without a route", session_key=session_key, run_id=event.run_id)
                return
            stream = self._streams[event.run_id] = _Stream(run_id=event.run_id, route=route)
        if stream.kind != "delta":
            return
        stream.text, stream.kind = event.text, event.kind
        stream.wake.set()
        if event.kind != "delta":
            stream.ended.set()
        self._spawn(stream)

    async def run(self) -> None:
        """Drive the streams until `close()`. Streams cut short by closing stay in the outbox and
        are finished by `recover()` on the next start."""
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                for stream in list(self._streams.values()):
                    self._spawn(stream)
                await self._closing.wait()
                raise _Closing
        except* _Closing:
            pass
        finally:
            self._tg = None
            for stream in self._streams.values():
                stream.running = False

    def close(self) -> None:
        """Ask `run()` to stop (idempotent); it cancels the streams and returns."""
        self._closing.set()

    def _spawn(self, stream: _Stream) -> None:
        if stream.running or self._tg is None or self._closing.is_set():
            return
        stream.running = True
        self._tg.create_task(self._drive(stream), name=f"relay:{stream.run_id}")

    async def _drive(self, stream: _Stream) -> None:
        next_flush = 0.0
        try:
            while True:
                await stream.wake.wait()
                delay = next_flush - self._clock()
                if delay > 0 and not stream.ended.is_set():
                    try:
                        await asyncio.wait_for(stream.ended.wait(), delay)
                    except TimeoutError:
                        pass
                stream.wake.clear()
                final = stream.kind != "delta"
                await self._deliver(stream, render_reply(stream.text, stream.kind), final=final)
                next_flush = self._clock() + self._settings.edit_interval_s
                if final:
                    return
        except _StreamFailed:
            return
        except Exception:
            log.exception("reply stream failed", run_id=stream.run_id, route=stream.route.key)
        finally:
            self._streams.pop(stream.run_id, None)
            self._run_routes.pop(stream.run_id, None)
            _remember(self._finished, stream.run_id, None, self._settings.max_routes)

    async def _deliver(self, stream: _Stream, text: str, *, final: bool) -> None:
        backoff = self._settings.retry_initial_s
        while True:
            try:
                await self._sync(stream, text, final=final)
                return
            except PlatformRequestError as exc:
                log.error("platform refused a reply", run_id=stream.run_id, status=exc.status, code=exc.code)
                for posted in stream.posted:
                    if posted.state != "final":
                        await self._store.outbox_update(posted.key, state="failed")
                raise _StreamFailed from exc
            except PlatformUnavailableError as exc:
                log.warning("reply delivery will be retried", run_id=stream.run_id, error=str(exc))
                await self._sleep(backoff)
                backoff = min(backoff * 2, self._settings.retry_max_s)

    async def _sync(self, stream: _Stream, text: str, *, final: bool) -> None:
        """Make the platform show `text`: edit the chunks that changed, post the new ones."""
        chunks = chunk_text(text, self._settings.chunk_limit) if text.strip() else []
        for index, raw in enumerate(chunks):
            body = raw if raw.strip() else EMPTY_CHUNK
            if index < len(stream.posted):
                await self._update(stream, stream.posted[index], body, final=final)
            else:
                await self._post(stream, index, body, final=final)
        if len(chunks) < len(stream.posted):
            log.warning("reply shrank; extra messages left as they are", run_id=stream.run_id)

    async def _update(self, stream: _Stream, posted: _Posted, body: str, *, final: bool) -> None:
        state: OutboxState = "final" if final else "edited"
        if posted.text != body:
            await self._transport.edit_message(stream.route, posted.message_id, body)
            self.edits += 1
            posted.text, posted.state = body, state
            await self._store.outbox_update(posted.key, state=state, text=body)
        elif final and posted.state != "final":
            posted.state = "final"
            await self._store.outbox_update(posted.key, state="final")

    async def _post(self, stream: _Stream, index: int, body: str, *, final: bool) -> None:
        key = outbox_key(self._platform, self._account_id, stream.run_id, index)
        route = stream.route if index == 0 else replace(stream.route, reply_to=None)
        record = OutboxRecord(
            key=key,
            platform=self._platform,
            account_id=self._account_id,
            route=route,
            run_id=stream.run_id,
            chunk_index=index,
            text=body,
        )
        await self._store.outbox_put(record)
        message_id = await self._transport.post_message(route, body, key=key)
        self.posts += 1
        state: OutboxState = "final" if final else "sent"
        stream.posted.append(_Posted(key=key, message_id=message_id, text=body, state=state))
        await self._store.outbox_update(key, state=state, platform_message_id=message_id, text=body)

    async def recover(self) -> int:
        """Finish the chunks a previous process left in flight: post the `pending` ones again
        with their key (so a post that did reach the platform is not repeated), and make the
        `sent`/`edited` ones show their last saved text. Returns how many were settled.

        A run whose reply this finishes is not also streamed from what the relay gathered before
        it started (in a cluster, a standing-by node hears other nodes' runs): its events are
        ignored from now on."""
        settled = 0
        for record in await self._store.outbox_pending(self._platform, self._account_id):
            self._streams.pop(record.run_id, None)
            _remember(self._finished, record.run_id, None, self._settings.max_routes)
            try:
                if record.state == "pending" or record.platform_message_id is None:
                    message_id = await self._transport.post_message(
                        record.route, record.text, key=record.key, maybe_sent=True
                    )
                    await self._store.outbox_update(record.key, state="final", platform_message_id=message_id)
                else:
                    await self._transport.edit_message(record.route, record.platform_message_id, record.text)
                    await self._store.outbox_update(record.key, state="final")
                settled += 1
            except PlatformRequestError as exc:
                log.error("platform refused a recovered reply", key=record.key, status=exc.status)
                await self._store.outbox_update(record.key, state="failed")
            except PlatformUnavailableError as exc:
                log.warning("recovered reply left for later", key=record.key, error=str(exc))
        return settled


class _Closing(Exception):
    """Raised inside the relay's task group to cancel its streams on close."""


_K = TypeVar("_K")
_V = TypeVar("_V")


def _remember(cache: OrderedDict[_K, _V], key: _K, value: _V, cap: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > cap:
        cache.popitem(last=False)
