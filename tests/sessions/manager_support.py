"""What the SessionManager tests share: an in-test agent directory over the faux provider, a
recording event publisher, tools, scripted stream functions and checks of the durable log."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent_core import (
    AbortSignal,
    AgentTool,
    AgentToolResult,
    AssistantMessage,
    AssistantMessageEventStream,
    Context,
    Model,
    StartEvent,
    StreamFn,
    StreamOptions,
    TextContent,
    ToolUpdateCallback,
    UserMessage,
    text_of,
)
from agent_core.errors import ModelNotFoundError
from agent_core.providers import stream_simple
from sessions.inputs import SubmitResult
from sessions.manager import SessionManager
from sessions.profiles import AgentProfile, QueueModeName, RunContext, RunSettings, ToolsFactory
from sessions.records import EntryRecord, EventRecord, InputRecord, SessionRecord
from sessions.session_events import SessionEvent
from sessions.store import Store

ECHO_REF = "faux/echo"
NO_MODEL = "no model is configured: set GATEWAY_MODEL=faux/echo"
FAST = RunSettings(
    max_duration_s=30.0,
    idle_timeout_s=10.0,
    collect_window_s=0.05,
    abort_grace_s=2.0,
    shutdown_grace_s=0.0,
    live_idle_ttl_s=600.0,
)


def echo_model(*, pace_ms: float = 1.0, context_window: int = 128_000, max_tokens: int = 4_096) -> Model:
    return Model(
        id="echo",
        name="Faux echo",
        api="faux",
        provider="faux",
        context_window=context_window,
        max_tokens=max_tokens,
        compat={"paceMs": pace_ms},
    )


class Directory:
    """Agents `main` (and any other id) on the faux echo model."""

    def __init__(
        self,
        *,
        model: str | None = ECHO_REF,
        models: dict[str, Model] | None = None,
        queue_mode: QueueModeName = "followup",
        pace_ms: float = 1.0,
        context_window: int = 128_000,
    ) -> None:
        self.model = model
        self.queue_mode = queue_mode
        self.models = {ECHO_REF: echo_model(pace_ms=pace_ms, context_window=context_window), **(models or {})}

    def profile(self, agent_id: str) -> AgentProfile:
        return AgentProfile(
            id=agent_id,
            model=self.model,
            system_prompt="You are a test agent.",
            queue_mode=self.queue_mode,
        )

    def resolve_model(self, ref: str) -> Model:
        if not ref:
            raise ModelNotFoundError(NO_MODEL)
        try:
            return self.models[ref]
        except KeyError:
            raise ModelNotFoundError(f"unknown model {ref}") from None

    def api_key(self, provider: str) -> str | None:
        return None


class Recorder:
    """An EventPublisher that records what it is given. With `sqlite_path`, it also checks that
    every published event is already committed (read back through a separate connection)."""

    def __init__(self, sqlite_path: Path | None = None) -> None:
        self.events: list[SessionEvent] = []
        self.changes: list[tuple[str, str]] = []
        self.uncommitted: list[tuple[str, int]] = []
        self.checked = 0
        self._db = sqlite3.connect(sqlite_path) if sqlite_path is not None else None

    def publish(self, event: SessionEvent) -> None:
        if self._db is not None:
            row = self._db.execute(
                "SELECT 1 FROM events WHERE session_id = ? AND seq = ?", (event.session_id, event.seq)
            ).fetchone()
            self.checked += 1
            if row is None:
                self.uncommitted.append((event.session_id, event.seq))
        self.events.append(event)

    def session_changed(self, session_id: str, reason: str) -> None:
        self.changes.append((session_id, reason))

    def of(self, session_id: str) -> list[SessionEvent]:
        return [e for e in self.events if e.session_id == session_id]

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


# --- tools ---------------------------------------------------------------------------------------

ECHO_PARAMS = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def tool(
    name: str,
    run: Callable[[dict[str, Any], AbortSignal | None], Awaitable[str]],
    parameters: dict[str, Any] | None = None,
) -> AgentTool:
    async def execute(
        call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        return AgentToolResult(content=[TextContent(text=await run(params, signal))])

    return AgentTool(
        name=name,
        label=name,
        description=f"the {name} test tool",
        parameters=parameters or ECHO_PARAMS,
        execute=execute,
    )


def echo_tool(delay_s: float = 0.0) -> AgentTool:
    async def run(params: dict[str, Any], signal: AbortSignal | None) -> str:
        if delay_s:
            await asyncio.sleep(delay_s)
        return str(params["text"])

    return tool("echo", run)


def gated_tool(gate: asyncio.Event, entered: asyncio.Event | None = None, name: str = "gate") -> AgentTool:
    """Returns its text once `gate` is set (ignoring aborts, like a stubborn tool)."""

    async def run(params: dict[str, Any], signal: AbortSignal | None) -> str:
        if entered is not None:
            entered.set()
        await gate.wait()
        return str(params["text"])

    return tool(name, run)


def tools_factory(*tools: AgentTool) -> ToolsFactory:
    def factory(ctx: RunContext) -> list[AgentTool]:
        return list(tools)

    return factory


# --- stream functions ------------------------------------------------------------------------


@dataclass
class StreamLog:
    """A stream function that records each call's context (as role/text pairs) and delegates to
    the faux provider; it also counts calls in flight per session and overall."""

    calls: list[tuple[str | None, list[tuple[str, str]], str | None]] = field(default_factory=list)
    active: dict[str | None, int] = field(default_factory=dict)
    active_total: int = 0
    max_per_session: int = 0
    max_total: int = 0
    inner: StreamFn = stream_simple

    def __call__(self, model: Model, context: Context, options: StreamOptions) -> Any:
        return self._run(model, context, options)

    async def _run(
        self, model: Model, context: Context, options: StreamOptions
    ) -> AssistantMessageEventStream:
        sid = options.session_id
        self.calls.append((sid, [(m.role, text_of(m)) for m in context.messages], context.system_prompt))
        inner = await _resolve(self.inner(model, context, options))
        self.active[sid] = self.active.get(sid, 0) + 1
        self.active_total += 1
        self.max_per_session = max(self.max_per_session, self.active[sid])
        self.max_total = max(self.max_total, self.active_total)
        out = AssistantMessageEventStream()

        async def forward() -> None:
            try:
                async for event in inner:
                    out.push(event)
                out.end(await inner.result())
            finally:
                self.active[sid] -= 1
                self.active_total -= 1

        self._tasks.add(asyncio.ensure_future(forward()))
        return out

    def __post_init__(self) -> None:
        self._tasks: set[asyncio.Future[None]] = set()

    def contexts(self, session_id: str | None = None) -> list[list[tuple[str, str]]]:
        return [ctx for sid, ctx, _ in self.calls if session_id is None or sid == session_id]


async def _resolve(value: Any) -> Any:
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value


def stalled_stream(model: Model, context: Context, options: StreamOptions) -> AssistantMessageEventStream:
    """Starts a reply, then never sends anything again and ignores the abort signal."""
    stream = AssistantMessageEventStream()
    partial = AssistantMessage(api=model.api, provider=model.provider, model=model.id)
    stream.push(StartEvent(partial=partial))
    return stream


async def hanging_stream(
    model: Model, context: Context, options: StreamOptions
) -> AssistantMessageEventStream:
    """Never even returns a stream."""
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


# --- the harness ---------------------------------------------------------------------------------


@dataclass
class Harness:
    store: Store
    manager: SessionManager
    recorder: Recorder
    directory: Directory

    async def session(self, key: str = "agent:main:main", **kwargs: Any) -> SessionRecord:
        return await self.manager.ensure_session(key, **kwargs)

    async def send(
        self, session: SessionRecord, text: str | UserMessage, key: str, mode: str | None = None
    ) -> SubmitResult:
        return await self.manager.submit(session=session, message=text, idempotency_key=key, queue_mode=mode)

    async def wait(self, key: str, timeout: float = 15.0) -> dict[str, Any]:
        outcome = await self.manager.wait_run(key, timeout)
        assert outcome is not None, f"no outcome for {key} within {timeout} s"
        return outcome

    async def input(self, key: str) -> InputRecord:
        record = await self.store.inputs.get(key)
        assert record is not None, f"no input {key}"
        return record

    async def events(self, session_id: str) -> list[EventRecord]:
        return await self.store.events.read(session_id, after_seq=0, limit=100_000)

    async def transcript(self, session_id: str) -> list[EntryRecord]:
        return await self.store.transcript.read(session_id)

    async def messages(self, session_id: str) -> list[dict[str, Any]]:
        return [e.payload for e in await self.transcript(session_id) if e.kind == "message"]

    async def texts(self, session_id: str) -> list[tuple[str, str]]:
        """(role, text) of every message entry; tool calls show as `call:NAME`."""
        out = []
        for payload in await self.messages(session_id):
            text = "".join(
                block.get("text", "") if block.get("type") == "text" else f"call:{block.get('name')}"
                for block in payload.get("content", [])
                if isinstance(block, dict) and block.get("type") in ("text", "toolCall")
            )
            if isinstance(payload.get("content"), str):
                text = payload["content"]
            out.append((payload["role"], text))
        return out

    async def check_log(self, session_id: str) -> list[EventRecord]:
        """The durable log has every seq from 1 to last_seq once, and the publisher saw exactly
        those events in seq order."""
        stored = await self.events(session_id)
        session = await self.store.tree.get_session(session_id)
        assert session is not None
        assert [e.seq for e in stored] == list(range(1, session.last_seq + 1))
        published = [e.seq for e in self.recorder.of(session_id)]
        assert published == [e.seq for e in stored]
        assert [e.name for e in self.recorder.of(session_id)] == [e.type for e in stored]
        return stored

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, "condition not reached in time"
            await asyncio.sleep(0.005)

    async def wait_for_event(self, session_id: str, name: str, timeout: float = 10.0, **fields: Any) -> None:
        def seen() -> bool:
            return any(
                e.name == name and all(e.data.dump().get(k) == v for k, v in fields.items())
                for e in self.recorder.of(session_id)
            )

        await self.wait_for(seen, timeout)


Opener = Callable[..., Awaitable[Harness]]


@dataclass
class HarnessFactory:
    url: str
    opened: list[Harness] = field(default_factory=list)

    async def __call__(
        self,
        *,
        settings: RunSettings = FAST,
        directory: Directory | None = None,
        tools: ToolsFactory | None = None,
        stream_fn: StreamFn | None = None,
        check_commits: bool = False,
    ) -> Harness:
        store = await Store.open(self.url)
        path = store.database.sqlite_path if check_commits else None
        recorder = Recorder(path)
        directory = directory or Directory()
        manager = SessionManager(
            store,
            directory=directory,
            tools_factory=tools,
            publisher=recorder,
            settings=settings,
            stream_fn=stream_fn,
        )
        await manager.start()
        harness = Harness(store, manager, recorder, directory)
        self.opened.append(harness)
        return harness

    async def close(self, harness: Harness, *, grace_s: float = 0.0) -> None:
        await harness.manager.aclose(grace_s=grace_s)
        await harness.store.aclose()
        harness.recorder.close()

    async def close_all(self) -> None:
        for harness in self.opened:
            await self.close(harness)


@pytest.fixture
async def harnesses(store_url: str) -> AsyncIterator[HarnessFactory]:
    """Opens started SessionManagers (each with its own Store) on the test's database; closes
    them all at the end. Import it into a test module to use it."""
    factory = HarnessFactory(store_url)
    try:
        yield factory
    finally:
        await factory.close_all()
