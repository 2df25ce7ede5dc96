"""The reply relay with a recording transport: streaming edits, chunks, finalisation, failures,
and recovery after a restart."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator

import pytest

from bindings.chunking import chunk_text
from bindings.errors import PlatformRequestError, PlatformUnavailableError
from bindings.host import OutboxRecord, ReplyEvent, ReplyRoute, outbox_key
from bindings.outbox import ABORTED_NOTICE, ERROR_NOTICE, RelaySettings, ReplyRelay, render_reply
from tests.bindings.helpers import wait_until
from tests.bindings.memory_host import MemoryHost

ROUTE = ReplyRoute(platform="discord", account_id="default", channel_id="c1", reply_to="m0")
KEY = "agent:main:discord:channel:c1"


class RecordingTransport:
    """Keeps messages like a platform would; `keys` remembers idempotency keys."""

    def __init__(self) -> None:
        self.messages: dict[str, str] = {}
        self.order: list[str] = []
        self.keys: dict[str, str] = {}
        self.calls: list[tuple[str, str, float]] = []
        self.fail_next: list[Exception] = []
        self.routes: list[ReplyRoute] = []
        self.maybe_sent: list[str] = []

    async def post_message(self, route: ReplyRoute, text: str, *, key: str, maybe_sent: bool = False) -> str:
        self.calls.append(("post", text, time.monotonic()))
        if maybe_sent:
            self.maybe_sent.append(key)
        if self.fail_next:
            raise self.fail_next.pop(0)
        if key in self.keys:
            return self.keys[key]
        message_id = f"m{len(self.order) + 1}"
        self.keys[key] = message_id
        self.messages[message_id] = text
        self.order.append(message_id)
        self.routes.append(route)
        return message_id

    async def edit_message(self, route: ReplyRoute, message_id: str, text: str) -> None:
        self.calls.append(("edit", text, time.monotonic()))
        if self.fail_next:
            raise self.fail_next.pop(0)
        self.messages[message_id] = text

    def texts(self) -> list[str]:
        return [self.messages[m] for m in self.order]


@pytest.fixture
def transport() -> RecordingTransport:
    return RecordingTransport()


@pytest.fixture
async def relay(transport: RecordingTransport) -> AsyncIterator[tuple[ReplyRelay, MemoryHost]]:
    host = MemoryHost()
    relay = ReplyRelay(
        platform="discord",
        account_id="default",
        transport=transport,
        store=host,
        settings=RelaySettings(chunk_limit=100, edit_interval_s=0.1, retry_initial_s=0.01),
    )
    relay.bind(KEY, ROUTE)
    task = asyncio.create_task(relay.run())
    yield relay, host
    relay.close()
    await task


def event(kind: str, text: str, run: str = "r1") -> ReplyEvent:
    return ReplyEvent(run_id=run, kind=kind, text=text)  # type: ignore[arg-type]


async def test_streams_by_editing_then_finalises_by_editing(
    relay: tuple[ReplyRelay, MemoryHost], transport: RecordingTransport
) -> None:
    r, host = relay
    text = ""
    started = time.monotonic()
    for i in range(40):
        text += f"{i % 10}"
        r.on_event(KEY, event("delta", text))
        await asyncio.sleep(0.01)
    streamed_for = time.monotonic() - started
    r.on_event(KEY, event("final", text))
    await wait_until(lambda: r.active_streams == 0)
    assert transport.texts() == [text]
    posts = [c for c in transport.calls if c[0] == "post"]
    edits = [c for c in transport.calls if c[0] == "edit"]
    assert len(posts) == 1 and posts[0][1] == "0"
    assert 1 <= len(edits) <= streamed_for / 0.1 + 2, "about one edit per interval, not one per delta"
    assert len(edits) < 40
    assert all(b[2] - a[2] >= 0.09 for a, b in itertools.pairwise(edits[:-1]))
    [record] = host.outbox.values()
    assert (record.state, record.text, record.platform_message_id) == ("final", text, "m1")
    assert record.key == outbox_key("discord", "default", "r1", 0)


async def test_text_past_the_limit_posts_new_chunks_only_for_new_text(
    relay: tuple[ReplyRelay, MemoryHost], transport: RecordingTransport
) -> None:
    r, host = relay
    long_text = " ".join(f"word{i}" for i in range(80))
    r.on_event(KEY, event("delta", long_text[:50]))
    await wait_until(lambda: transport.order)
    r.on_event(KEY, event("final", long_text))
    await wait_until(lambda: r.active_streams == 0)
    assert transport.texts() == chunk_text(long_text, 100)
    assert len([c for c in transport.calls if c[0] == "post"]) == len(transport.texts())
    assert transport.routes[0].reply_to == "m0" and transport.routes[1].reply_to is None
    assert {rec.state for rec in host.outbox.values()} == {"final"}


async def test_empty_deltas_post_nothing_and_late_events_are_ignored(
    relay: tuple[ReplyRelay, MemoryHost], transport: RecordingTransport
) -> None:
    r, _ = relay
    r.on_event(KEY, event("delta", "   "))
    await asyncio.sleep(0.05)
    assert transport.calls == []
    r.on_event(KEY, event("final", "done"))
    await wait_until(lambda: r.active_streams == 0)
    r.on_event(KEY, event("delta", "done and more"))
    await asyncio.sleep(0.05)
    assert transport.texts() == ["done"]


@pytest.mark.parametrize(("kind", "notice"), [("error", ERROR_NOTICE), ("aborted", ABORTED_NOTICE)])
async def test_interrupted_runs_are_marked(
    relay: tuple[ReplyRelay, MemoryHost], transport: RecordingTransport, kind: str, notice: str
) -> None:
    r, _ = relay
    r.on_event(KEY, event(kind, "partial answer"))
    await wait_until(lambda: r.active_streams == 0)
    assert transport.texts() == [render_reply("partial answer", kind)]  # type: ignore[arg-type]
    assert transport.texts()[0].endswith(notice)


async def test_transient_failures_are_retried_with_the_same_key(
    relay: tuple[ReplyRelay, MemoryHost], transport: RecordingTransport
) -> None:
    r, _ = relay
    transport.fail_next = [PlatformUnavailableError("down"), PlatformUnavailableError("still down")]
    r.on_event(KEY, event("final", "eventually"))
    await wait_until(lambda: r.active_streams == 0)
    assert transport.texts() == ["eventually"]
    assert [c[0] for c in transport.calls] == ["post", "post", "post"]


async def test_a_refusal_fails_the_chunk_and_ends_the_stream(
    relay: tuple[ReplyRelay, MemoryHost], transport: RecordingTransport
) -> None:
    r, host = relay
    r.on_event(KEY, event("delta", "first"))
    await wait_until(lambda: transport.order)
    transport.fail_next = [PlatformRequestError("missing access", status=403, code=50001)]
    r.on_event(KEY, event("final", "first and last"))
    await wait_until(lambda: r.active_streams == 0)
    [record] = host.outbox.values()
    assert record.state == "failed"


async def test_replies_without_a_route_are_dropped_with_a_warning(
    relay: tuple[ReplyRelay, MemoryHost], transport: RecordingTransport
) -> None:
    r, _ = relay
    r.on_event("agent:main:unknown", event("final", "lost"))
    await asyncio.sleep(0.05)
    assert transport.calls == [] and r.active_streams == 0


async def test_run_routes_take_precedence(
    relay: tuple[ReplyRelay, MemoryHost], transport: RecordingTransport
) -> None:
    r, _ = relay
    other = ReplyRoute(platform="discord", account_id="default", channel_id="c2")
    r.bind(KEY, other, run_id="r9")
    r.bind(KEY, ROUTE)
    r.on_event(KEY, event("final", "to c2", run="r9"))
    await wait_until(lambda: r.active_streams == 0)
    assert transport.routes == [other]


async def test_recover_finishes_what_a_crash_left(transport: RecordingTransport) -> None:
    host = MemoryHost()
    settings = RelaySettings(chunk_limit=100)
    first = ReplyRelay(
        platform="discord", account_id="default", transport=transport, store=host, settings=settings
    )
    first.bind(KEY, ROUTE)
    task = asyncio.create_task(first.run())
    first.on_event(KEY, event("delta", "half an answer"))
    await wait_until(lambda: transport.order)
    first.close()
    await task  # the process dies mid-stream
    # a post that was written to the outbox but whose answer never came back
    pending_key = outbox_key("discord", "default", "r2", 0)
    await host.outbox_put(
        OutboxRecord(
            key=pending_key,
            platform="discord",
            account_id="default",
            route=ROUTE,
            run_id="r2",
            chunk_index=0,
            text="lost?",
        )
    )
    transport.keys[pending_key] = "m-existing"  # it did reach the platform
    second = ReplyRelay(
        platform="discord", account_id="default", transport=transport, store=host, settings=settings
    )
    assert await second.recover() == 2
    assert await host.outbox_pending("discord", "default") == []
    assert transport.texts() == ["half an answer"]
    assert host.outbox[pending_key].platform_message_id == "m-existing"
    assert transport.maybe_sent == [pending_key]  # the platform was told the post may exist
