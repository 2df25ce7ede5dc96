"""`SessionManager`: sessions as the gateway uses them.

It accepts inputs (recorded in the input ledger before the caller is answered), decides what
each becomes while a run is active (the session's queue mode), runs agents on the session's lane
under the global run limiter, turns every agent event into durable numbered session events
through the journal, ends each run with a recorded termination reason, and recovers what a crash
left behind. Operations that change a session's history (runs, compaction, reset, branch at the
head) go through the session's lane; steering, follow-ups and aborts reach the running agent at
once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from agent_core import (
    AbortSignal,
    Agent,
    AgentEvent,
    AgentMessage,
    AssistantMessage,
    AssistantMessageEventStream,
    Context,
    ErrorEvent,
    MessageEndEvent,
    MessageStartEvent,
    MessageUpdateEvent,
    Model,
    StreamFn,
    StreamOptions,
    TextContent,
    TextDeltaEvent,
    UserMessage,
    parse_message,
    text_of,
)
from agent_core._util import resolve
from sessions import compaction as compaction_mod
from sessions.context import build_context
from sessions.errors import InvalidRequest, NotFound, SessionsError, StoreUnavailable
from sessions.ids import new_id
from sessions.journal import Journal, JournalItem
from sessions.lane import LaneRegistry, RunLimiter
from sessions.live import LiveSession, RunState
from sessions.profiles import (
    QUEUE_MODES,
    AgentDirectory,
    AgentProfile,
    RunContext,
    RunSettings,
    ToolsFactory,
)
from sessions.recovery import recover
from sessions.session_events import Draft, EventPublisher, NullPublisher
from sessions.store import InputRecord, NewEntry, SessionRecord, Store

log = structlog.get_logger("sessions.manager")
T = TypeVar("T")

FINAL_INPUT_STATES = frozenset({"done", "rejected", "interrupted"})


@dataclass(frozen=True)
class SubmitResult:
    """The answer to an inbound message. `status` is `started` (accepted now), `in_flight` (the
    key was seen and has not finished) or the stored outcome (`ok`, `error`, `aborted`)."""

    run_id: str
    status: str
    session: SessionRecord
    disposition: str = "queued"
    result: dict[str, Any] | None = None


class SessionManager:
    def __init__(
        self,
        store: Store,
        *,
        directory: AgentDirectory,
        tools_factory: ToolsFactory | None = None,
        publisher: EventPublisher | None = None,
        settings: RunSettings | None = None,
        stream_fn: StreamFn | None = None,
    ) -> None:
        self.store = store
        self.directory = directory
        self.settings = settings or RunSettings()
        self.publisher = publisher or NullPublisher()
        self._tools_factory = tools_factory
        self._stream_fn = stream_fn
        self.journal = Journal(store, self.publisher)
        self.lanes = LaneRegistry(max_depth=self.settings.lane_depth)
        self.limiter = RunLimiter(self.settings.max_concurrent_runs)
        self._live: OrderedDict[str, LiveSession] = OrderedDict()
        self._loading: dict[str, asyncio.Future[LiveSession]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._run_done: dict[str, asyncio.Event] = {}
        self._accepting = False
        self._sweeper: asyncio.Task[None] | None = None
        self.started_at = time.time()

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the journal, close what a crash left open, resume accepted inputs."""
        await self.journal.start()
        pending = await recover(self.store, self.journal, self.publisher)
        self._accepting = True
        for session_id, inputs in pending.items():
            await self._resume_inputs(session_id, inputs)
        self._sweeper = asyncio.create_task(self._sweep(), name="live-session-sweeper")

    async def aclose(self, *, grace_s: float | None = None) -> None:
        """Graceful stop: refuse new inputs, give runs `grace_s`, abort the rest with
        `gateway_shutdown`, flush the event log. Idempotent."""
        self._accepting = False
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        grace = self.settings.shutdown_grace_s if grace_s is None else grace_s
        runs = [live.run for live in self._live.values() if live.run is not None]
        if runs:
            waits = [asyncio.ensure_future(r.finished.wait()) for r in runs]
            _, still = await asyncio.wait(waits, timeout=grace)
            for fut in still:
                fut.cancel()
            for live in list(self._live.values()):
                if live.run is not None and not live.run.finished.is_set():
                    self._abort_live(live, "gateway_shutdown")
        if self._tasks:
            _, stuck = await asyncio.wait(list(self._tasks), timeout=max(grace, 5.0))
            for task in stuck:
                task.cancel()
            if stuck:
                await asyncio.gather(*stuck, return_exceptions=True)
        await self.journal.aclose()

    # --- sessions -----------------------------------------------------------------------------

    async def ensure_session(
        self, key: str, *, agent_id: str | None = None, kind: str | None = None, origin: Any = None
    ) -> SessionRecord:
        """The session a key names, created on first use (agent taken from the key grammar)."""
        record = await self.store.get_session_by_key(key)
        if record is not None:
            return record
        agent = agent_id or agent_from_key(key) or "main"
        profile = self.directory.profile(agent)
        try:
            return await self.store.create_session(
                agent_id=agent,
                key=key,
                kind=kind or kind_from_key(key),
                queue_mode=profile.queue_mode,
                origin=origin,
            )
        except SessionsError:
            existing = await self.store.get_session_by_key(key)
            if existing is None:
                raise
            return existing

    async def get(self, *, key: str | None = None, session_id: str | None = None) -> SessionRecord:
        record = None
        if session_id:
            record = await self.store.get_session(session_id)
        elif key:
            record = await self.store.get_session_by_key(key)
        if record is None:
            raise NotFound(f"unknown session: {key or session_id}")
        return record

    def active_run_ids(self, session_id: str) -> list[str]:
        live = self._live.get(session_id)
        if live is None or live.run is None:
            return []
        return [live.run.run_id]

    def in_flight(self, session_id: str) -> dict[str, Any] | None:
        """The active run and the text streamed so far (for `chat.history`)."""
        live = self._live.get(session_id)
        if live is None or live.run is None:
            return None
        return {"runId": live.run.run_id, "text": live.run.partial_text}

    def live_count(self) -> int:
        return len(self._live)

    def running_count(self) -> int:
        return sum(1 for live in self._live.values() if live.run is not None)

    def queue_depths(self) -> dict[str, int]:
        out = {}
        for sid, live in self._live.items():
            depth = len(live.collect_buffer) + live.agent.pending_message_count
            if depth:
                out[sid] = depth
        for sid, depth in self.lanes.depths().items():
            out[sid] = out.get(sid, 0) + depth
        return out

    # --- inputs -------------------------------------------------------------------------------

    async def submit(
        self,
        *,
        session: SessionRecord,
        message: str | UserMessage,
        idempotency_key: str,
        queue_mode: str | None = None,
        source: dict[str, Any] | None = None,
    ) -> SubmitResult:
        """Record an inbound message and act on it. Never runs the same key twice."""
        if not self._accepting:
            raise StoreUnavailable("the gateway is not accepting messages right now", retry_after_ms=2000)
        if queue_mode is not None and queue_mode not in QUEUE_MODES:
            raise InvalidRequest(f"queueMode must be one of {', '.join(QUEUE_MODES)}")
        user = _user_message(message, idempotency_key)
        existing = await self.store.get_input(idempotency_key)
        if existing is not None:
            return await self._repeat(existing, session)
        if self.lanes.depths().get(session.id, 0) >= self.settings.lane_depth:
            raise StoreUnavailable("this session has too many operations waiting", retry_after_ms=1000)
        mode = queue_mode or session.queue_mode or self.directory.profile(session.agent_id).queue_mode
        record, created = await self.store.record_input(
            idempotency_key,
            session_id=session.id,
            payload=user.dump(),
            source=source,
            queue_mode=mode,
            status="queued",
            run_id=idempotency_key,
        )
        if not created:
            return await self._repeat(record, session)
        live = await self._live_session(session.id)
        disposition = await self._dispatch(live, record, user, mode)
        return SubmitResult(
            run_id=idempotency_key, status="started", session=live.record, disposition=disposition
        )

    async def _repeat(self, record: InputRecord, session: SessionRecord) -> SubmitResult:
        if record.status in FINAL_INPUT_STATES:
            run = await self.store.get_run(record.run_id) if record.run_id else None
            result = dict(run.result or {}) if run is not None and run.result else None
            status = _outcome(record, run.status if run else None)
            return SubmitResult(
                run_id=record.idempotency_key,
                status=status,
                session=session,
                disposition=record.status,
                result=result,
            )
        return SubmitResult(
            run_id=record.idempotency_key, status="in_flight", session=session, disposition=record.status
        )

    async def _dispatch(self, live: LiveSession, record: InputRecord, user: UserMessage, mode: str) -> str:
        key = record.idempotency_key
        run = live.run
        if run is None:
            self._start_run(live, [(key, user)])
            return "queued"
        if mode == "interrupt":
            self._abort_live(live, "aborted")
            self._start_run(live, [(key, user)], after=run)
            return "queued"
        if mode == "collect":
            live.collect_buffer.append((key, user))
            self._arm_collect(live)
            await self.store.update_input(key, status="followup", run_id=run.run_id)
            return "followup"
        if mode == "steer":
            live.agent.steer(user)
            await self.store.update_input(key, status="steered", run_id=run.run_id)
            return "steered"
        live.agent.follow_up(user)
        await self.store.update_input(key, status="followup", run_id=run.run_id)
        return "followup"

    def _arm_collect(self, live: LiveSession) -> None:
        if live.collect_timer is not None:
            live.collect_timer.cancel()
        loop = asyncio.get_running_loop()
        live.collect_timer = loop.call_later(self.settings.collect_window_s, self._release_collect, live)

    def _release_collect(self, live: LiveSession) -> None:
        live.collect_timer = None
        items, live.collect_buffer = live.collect_buffer, []
        if not items:
            return
        merged = _merge(items)
        if live.run is not None and not live.run.finished.is_set():
            live.agent.follow_up(merged)
        else:
            self._start_run(live, [(items[0][0], merged)])

    async def _resume_inputs(self, session_id: str, inputs: list[InputRecord]) -> None:
        live = await self._live_session(session_id)
        items = [
            (i.idempotency_key, _user_message(parse_message(i.payload), i.idempotency_key)) for i in inputs
        ]
        if items:
            log.info("resuming accepted inputs after restart", session_id=session_id, count=len(items))
            self._start_run(live, items)

    # --- runs ---------------------------------------------------------------------------------

    def _start_run(
        self, live: LiveSession, items: list[tuple[str, UserMessage]], *, after: RunState | None = None
    ) -> RunState:
        run = RunState(run_id=items[0][0], input_keys=[k for k, _ in items])
        self._run_done[run.run_id] = run.finished
        live.run = run
        task = asyncio.create_task(self._run_task(live, run, items, after), name=f"run-{run.run_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run

    async def _run_task(
        self,
        live: LiveSession,
        run: RunState,
        items: list[tuple[str, UserMessage]],
        after: RunState | None,
    ) -> None:
        try:
            if after is not None:
                await after.finished.wait()
            await self.lanes.lane(live.session_id).run(lambda: self._execute(live, run, items))
        except Exception as exc:  # the run's own failures are recorded inside _execute
            log.exception("run failed before it could start", run_id=run.run_id)
            await self._fail_inputs(run.input_keys, f"the run could not start: {exc}")
        finally:
            run.finished.set()
            if live.run is run:
                live.run = None
            live.last_used = time.monotonic()
            self._run_done.pop(run.run_id, None)
            await self._after_run(live)

    async def _after_run(self, live: LiveSession) -> None:
        """Messages still queued in the agent (a steer that came too late, follow-ups after an
        abort) start the next run: nothing accepted is ever dropped."""
        if live.run is not None or not self._accepting:
            return
        leftovers = _drain_agent_queues(live.agent)
        if leftovers:
            items = [(_input_key(m) or f"followup-{id(m)}", m) for m in leftovers]
            self._start_run(live, items)

    async def _execute(self, live: LiveSession, run: RunState, items: list[tuple[str, UserMessage]]) -> None:
        async with self.limiter.slot():
            await self._execute_run(live, run, items)

    async def _execute_run(
        self, live: LiveSession, run: RunState, items: list[tuple[str, UserMessage]]
    ) -> None:
        session = await self.store.get_session(live.session_id)
        if session is None:
            await self._fail_inputs(run.input_keys, "the session was deleted")
            return
        live.record = session
        run.started = True
        profile = self.directory.profile(session.agent_id)
        model, model_error = self._model_for(session, profile)
        await self.store.create_run(run.run_id, session.id)
        for key in run.input_keys:
            await self.store.update_input(key, status="running", run_id=run.run_id)
        await self.journal.append(
            JournalItem(
                session.id,
                events=live.number([Draft("status.changed", {"status": "running"})], run.run_id),
                session_fields={"status": "running"},
            )
        )
        self.publisher_session_changed(session.id, "agent.run.started")
        entries = await self.store.transcript(session.id)
        context = build_context(entries)
        if model_error is None and self.settings.compaction_enabled:
            context = await self._maybe_auto_compact(live, session, model, context, entries)
        tools = await self._build_tools(session, run, profile, model) if model_error is None else []
        agent = live.agent
        agent.state.system_prompt = profile.system_prompt
        agent.state.model = model
        agent.state.thinking_level = session.thinking_level or profile.thinking_level  # type: ignore[assignment]
        agent.state.tools = tools
        agent.state.messages = context
        agent.session_id = session.id
        agent.stream_fn = self._stream_for(run, model_error)
        unsubscribe = agent.subscribe(lambda event, signal: self._on_event(live, run, event))
        watchdog = asyncio.create_task(self._watchdog(live, run), name=f"watchdog-{run.run_id}")
        try:
            await agent.prompt([m for _, m in items])
        finally:
            watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watchdog
            unsubscribe()
        await self._finish_run(live, run)

    def _model_for(self, session: SessionRecord, profile: AgentProfile) -> tuple[Model, str | None]:
        ref = session.model or profile.model
        if not ref:
            return _placeholder_model(), (
                "No model is configured. Set GATEWAY_MODEL (for example GATEWAY_MODEL=faux/echo for an "
                "offline echo model, or openai/gpt-4o-mini with OPENAI_API_KEY set), or set `model` for "
                f"agent '{profile.id}' in the config file."
            )
        try:
            return self.directory.resolve_model(ref), None
        except Exception as exc:
            return _placeholder_model(ref), str(exc)

    async def _build_tools(
        self, session: SessionRecord, run: RunState, profile: AgentProfile, model: Model
    ) -> list[Any]:
        if self._tools_factory is None:
            return []
        ctx = RunContext(session=session, run_id=run.run_id, profile=profile, model=model)
        return list(await resolve(self._tools_factory(ctx)))

    def _stream_for(self, run: RunState, model_error: str | None) -> StreamFn:
        base = self._stream_fn

        def stream(model: Model, context: Context, options: StreamOptions) -> Any:
            run.awaiting_model = True
            run.touch()
            if model_error is not None:
                return _error_stream(model, model_error)
            options.on_event = run.touch
            if base is not None:
                return base(model, context, options)
            from agent_core.providers import stream_simple

            return stream_simple(model, context, options)

        return stream

    async def _on_event(self, live: LiveSession, run: RunState, event: AgentEvent) -> None:
        run.touch()
        drafts = run.translator.translate(event)
        entries: list[NewEntry] = []
        if isinstance(event, MessageStartEvent) and event.message.role == "assistant":
            run.partial_text = ""
            run.partial_message_id = run.translator.message_id
        elif isinstance(event, MessageUpdateEvent):
            if isinstance(event.assistant_message_event, TextDeltaEvent):
                run.partial_text += event.assistant_message_event.delta
        elif isinstance(event, MessageEndEvent):
            message_id = drafts[0].data["messageId"] if drafts else None
            entries.append(NewEntry(kind="message", payload=event.message.dump(), id=message_id))
            if isinstance(event.message, AssistantMessage):
                run.awaiting_model = False
                run.partial_text = ""
                run.partial_message_id = None
            key = _input_key(event.message)
            if key is not None and key not in run.input_keys:
                run.input_keys.append(key)
                await self.store.update_input(key, status="running", run_id=run.run_id)
        if drafts or entries:
            await self.journal.append(
                JournalItem(live.session_id, entries=entries, events=live.number(drafts, run.run_id))
            )

    async def _watchdog(self, live: LiveSession, run: RunState) -> None:
        settings = self.settings
        deadline = time.monotonic() + settings.max_duration_s
        step = max(0.01, min(1.0, settings.idle_timeout_s / 4, settings.max_duration_s / 4))
        while True:
            await asyncio.sleep(step)
            now = time.monotonic()
            if now >= deadline:
                self._abort_live(live, "max_duration")
                return
            if run.awaiting_model and now - run.last_activity > settings.idle_timeout_s:
                log.warning("model idle timeout", run_id=run.run_id, idle_s=settings.idle_timeout_s)
                self._abort_live(live, "idle_timeout")
                return

    async def _finish_run(self, live: LiveSession, run: RunState) -> None:
        messages = live.agent.state.messages
        last = messages[-1] if messages else None
        error_message: str | None = None
        if run.abort_reason is not None:
            reason, status = run.abort_reason, "aborted"
        elif isinstance(last, AssistantMessage) and last.stop_reason == "error":
            reason, status = "error", "error"
            error_message = last.error_message
        elif isinstance(last, AssistantMessage) and last.stop_reason == "aborted":
            reason, status = "aborted", "aborted"
        else:
            reason, status = "no_tool_calls", "ok"
        drafts = [run.translator.finished(reason, error_message=error_message)]
        drafts.append(Draft("status.changed", {"status": "idle"}))
        await self.journal.commit(
            JournalItem(
                live.session_id,
                events=live.number(drafts, run.run_id),
                session_fields={"status": "idle"},
            )
        )
        usage = _run_usage(messages, run)
        result: dict[str, Any] = {
            "runId": run.run_id,
            "status": status,
            "terminationReason": reason,
            "stopReason": last.stop_reason if isinstance(last, AssistantMessage) else None,
            "text": text_of(last) if isinstance(last, AssistantMessage) else "",
            "usage": usage,
        }
        if isinstance(last, AssistantMessage) and last.error_message:
            result["errorMessage"] = last.error_message
        await self.store.finish_run(
            run.run_id,
            status=_run_status(status),
            termination_reason=reason,
            error=result.get("errorMessage"),
            result=result,
        )
        await self.store.add_usage(
            live.session_id,
            input=usage["input"],
            output=usage["output"],
            total=usage["totalTokens"],
            cost=usage["cost"],
        )
        for key in run.input_keys:
            await self.store.update_input(key, status="done", run_id=run.run_id)
        refreshed = await self.store.get_session(live.session_id)
        if refreshed is not None:
            live.record = refreshed
        self.publisher_session_changed(live.session_id, "agent.run.finished")

    async def _fail_inputs(self, keys: list[str], reason: str) -> None:
        for key in keys:
            with contextlib.suppress(SessionsError):
                await self.store.update_input(key, status="rejected", reason=reason)

    async def _maybe_auto_compact(
        self,
        live: LiveSession,
        session: SessionRecord,
        model: Model,
        context: list[AgentMessage],
        entries: list[Any],
    ) -> list[AgentMessage]:
        tokens = compaction_mod.context_tokens(context)
        if not compaction_mod.should_compact(
            tokens, model.context_window, self.settings.compaction_reserve_tokens
        ):
            return context
        try:
            await self._compact_entries(live, session, model, entries)
        except compaction_mod.CompactionError as exc:
            log.warning("automatic compaction failed", session_id=session.id, error=str(exc))
            return context
        return build_context(await self.store.transcript(session.id))

    async def inject(self, session_id: str, *, text: str, role: str = "assistant") -> str:
        """Append a message to the transcript without running the agent (`chat.inject`)."""
        session = await self.get(session_id=session_id)
        live = await self._live_session(session_id)
        if role == "user":
            message: AgentMessage = UserMessage(content=[TextContent(text=text)])
        else:
            message = AssistantMessage(
                content=[TextContent(text=text)], api="gateway", provider="gateway", model="inject"
            )
        entry_id = new_id()

        async def op() -> None:
            drafts = [Draft("message.completed", {"messageId": entry_id, "message": message.dump()})]
            await self.journal.commit(
                JournalItem(
                    session.id,
                    entries=[NewEntry(kind="message", payload=message.dump(), id=entry_id)],
                    events=live.number(drafts, None),
                )
            )

        await self.on_lane(session_id, op)
        return entry_id

    # --- abort --------------------------------------------------------------------------------

    async def abort(
        self, session_id: str, *, reason: str = "aborted", run_id: str | None = None
    ) -> list[str]:
        """Abort the session's active run (and its sub-agents' runs). Returns aborted run ids."""
        live = self._live.get(session_id)
        aborted: list[str] = []
        if live is not None and live.run is not None and (run_id is None or live.run.run_id == run_id):
            aborted.append(live.run.run_id)
            self._abort_live(live, reason)
        for child in list(self._live.values()):
            if child.record.parent_id == session_id and child.record.kind == "subagent":
                aborted.extend(await self.abort(child.session_id, reason=reason))
        return aborted

    def _abort_live(self, live: LiveSession, reason: str) -> None:
        run = live.run
        if run is None:
            return
        if run.abort_reason is None:
            run.abort_reason = reason
        live.agent.abort()
        for child in list(self._live.values()):
            if child.record.parent_id == live.session_id and child.record.kind == "subagent":
                self._abort_live(child, reason)

    async def wait_run(self, run_id: str, timeout_s: float | None = None) -> dict[str, Any] | None:
        """Wait for a run (or the run an input joined) to end; its stored result, or None on timeout."""
        record = await self.store.get_input(run_id)
        actual = record.run_id if record is not None and record.run_id else run_id
        event = self._run_done.get(actual)
        if event is not None:
            try:
                await asyncio.wait_for(event.wait(), timeout=timeout_s)
            except TimeoutError:
                return None
        for _ in range(50):
            run = await self.store.get_run(actual)
            if run is not None and run.status != "running":
                return dict(run.result or {"runId": actual, "status": run.status})
            if run is None and record is not None and record.status in FINAL_INPUT_STATES:
                return {"runId": run_id, "status": _outcome(record, None), "reason": record.reason}
            if event is None:
                # Not live here: either unknown, or still waiting for its turn on a lane.
                if record is None and run is None:
                    return None
                await asyncio.sleep(0.05)
                event = self._run_done.get(actual)
                if event is not None:
                    return await self.wait_run(run_id, timeout_s)
        return None

    # --- history-changing operations (on the lane) --------------------------------------------

    async def on_lane(self, session_id: str, op: Callable[[], Awaitable[T]]) -> T:
        return await self.lanes.lane(session_id).run(op)

    async def compact(self, session_id: str) -> compaction_mod.CompactionResult:
        session = await self.get(session_id=session_id)
        live = await self._live_session(session_id)

        async def op() -> compaction_mod.CompactionResult:
            profile = self.directory.profile(session.agent_id)
            model, error = self._model_for(session, profile)
            if error is not None:
                raise compaction_mod.CompactionError(error)
            entries = await self.store.transcript(session_id)
            return await self._compact_entries(live, session, model, entries)

        return await self.on_lane(session_id, op)

    async def _compact_entries(
        self, live: LiveSession, session: SessionRecord, model: Model, entries: list[Any]
    ) -> compaction_mod.CompactionResult:
        previous_summary, previous_first_kept = compaction_mod.previous_compaction(entries)
        pairs = compaction_mod.messages_of(entries)
        if previous_first_kept is not None:
            ids = [entry_id for entry_id, _ in pairs]
            if previous_first_kept in ids:
                pairs = pairs[ids.index(previous_first_kept) :]
        messages = [m for _, m in pairs]
        cut = compaction_mod.find_cut_point(messages, self.settings.compaction_keep_recent_tokens)
        if cut is None:
            raise compaction_mod.CompactionError("there is not enough history to compact")
        stream_fn = self._stream_fn
        if stream_fn is None:
            from agent_core.providers import stream_simple

            stream_fn = stream_simple
        summary = await compaction_mod.summarize(
            messages[: cut.first_kept_index],
            model=model,
            stream_fn=stream_fn,
            api_key=self.directory.api_key(model.provider),
            previous_summary=previous_summary,
        )
        result = compaction_mod.CompactionResult(
            summary=summary,
            first_kept_entry_id=pairs[cut.first_kept_index][0],
            tokens_before=cut.tokens_before,
        )
        await self.journal.commit(
            JournalItem(session.id, entries=[NewEntry(kind="compaction", payload=result.payload())])
        )
        self.publisher_session_changed(session.id, "compaction")
        return result

    # --- live sessions ------------------------------------------------------------------------

    async def _live_session(self, session_id: str) -> LiveSession:
        live = self._live.get(session_id)
        if live is not None:
            self._live.move_to_end(session_id)
            live.last_used = time.monotonic()
            return live
        loading = self._loading.get(session_id)
        if loading is not None:
            return await asyncio.shield(loading)
        future: asyncio.Future[LiveSession] = asyncio.get_running_loop().create_future()
        self._loading[session_id] = future
        try:
            record = await self.store.get_session(session_id)
            if record is None:
                raise NotFound(f"unknown session: {session_id}")
            live = LiveSession(record=record, next_seq=record.last_seq, agent=Agent())
            self._live[session_id] = live
            future.set_result(live)
            self._evict_over_cap()
            return live
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()
            raise
        finally:
            self._loading.pop(session_id, None)

    def forget(self, session_id: str) -> None:
        """Drop a live session that is not busy (after delete or reset)."""
        live = self._live.get(session_id)
        if live is not None and not live.busy:
            self._live.pop(session_id, None)

    def _evict_over_cap(self) -> None:
        excess = len(self._live) - self.settings.live_cap
        if excess <= 0:
            return
        for sid in list(self._live):
            if excess <= 0:
                break
            live = self._live[sid]
            if not live.busy and self.lanes.depths().get(sid, 0) == 0:
                del self._live[sid]
                excess -= 1

    def evict_idle(self, now: float | None = None) -> int:
        now = time.monotonic() if now is None else now
        ttl = self.settings.live_idle_ttl_s
        evicted = 0
        for sid in list(self._live):
            live = self._live[sid]
            if not live.busy and now - live.last_used > ttl and self.lanes.depths().get(sid, 0) == 0:
                del self._live[sid]
                evicted += 1
        return evicted

    async def _sweep(self) -> None:
        interval = max(0.05, min(30.0, self.settings.live_idle_ttl_s / 2))
        while True:
            await asyncio.sleep(interval)
            self.evict_idle()

    def publisher_session_changed(self, session_id: str, reason: str) -> None:
        notify = getattr(self.publisher, "session_changed", None)
        if callable(notify):
            try:
                notify(session_id, reason)
            except Exception:
                log.exception("session change notification failed")


# --- helpers ----------------------------------------------------------------------------------


def agent_from_key(key: str) -> str | None:
    """`agent:<id>:...` names its agent."""
    parts = key.split(":")
    if len(parts) >= 3 and parts[0] == "agent" and parts[1]:
        return parts[1]
    return None


def kind_from_key(key: str) -> str:
    parts = key.split(":")
    if len(parts) >= 3 and parts[0] == "agent":
        rest = parts[2:]
        if rest == ["main"]:
            return "main"
        if "thread" in rest or "channel" in rest:
            return "channel"
        if "group" in rest:
            return "group"
        if "direct" in rest or "dm" in rest:
            return "direct"
    return "custom"


def _user_message(message: str | AgentMessage, idempotency_key: str) -> UserMessage:
    if isinstance(message, str):
        user = UserMessage(content=[TextContent(text=message)])
    elif isinstance(message, UserMessage):
        user = message.model_copy()
    else:
        user = UserMessage(content=[TextContent(text=text_of(message))])
    user.__pydantic_extra__ = dict(user.__pydantic_extra__ or {})
    user.__pydantic_extra__["idempotencyKey"] = idempotency_key
    return user


def _input_key(message: Any) -> str | None:
    extra = getattr(message, "__pydantic_extra__", None) or {}
    key = extra.get("idempotencyKey")
    return key if isinstance(key, str) else None


def _merge(items: list[tuple[str, UserMessage]]) -> UserMessage:
    if len(items) == 1:
        return items[0][1]
    text = "\n\n".join(text_of(m) for _, m in items)
    merged = UserMessage(content=[TextContent(text=text)])
    merged.__pydantic_extra__ = {
        "idempotencyKey": items[0][0],
        "mergedKeys": [k for k, _ in items],
    }
    return merged


def _drain_agent_queues(agent: Agent) -> list[UserMessage]:
    drain = getattr(agent, "drain_queues", None)
    if callable(drain):
        return [m for m in drain() if isinstance(m, UserMessage)]
    return []


def _outcome(record: InputRecord, run_status: str | None) -> str:
    if record.status == "rejected":
        return "error"
    if record.status == "interrupted":
        return "aborted"
    if run_status in ("error", "aborted"):
        return run_status
    if run_status == "interrupted":
        return "aborted"
    return "ok"


def _run_status(status: str) -> str:
    return {"ok": "done"}.get(status, status)


def _run_usage(messages: list[AgentMessage], run: RunState) -> dict[str, Any]:
    totals = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0, "cost": 0.0}
    # Only this run's assistant messages: those after the prompts of this run.
    for message in messages:
        if isinstance(message, AssistantMessage) and message.timestamp >= _started_ms(run):
            usage = message.usage
            totals["input"] += usage.input
            totals["output"] += usage.output
            totals["cacheRead"] += usage.cache_read
            totals["cacheWrite"] += usage.cache_write
            totals["totalTokens"] += usage.total_tokens
            totals["cost"] += usage.cost.total
    return totals


def _started_ms(run: RunState) -> int:
    elapsed = time.monotonic() - run.translator.started_at
    return int((time.time() - elapsed) * 1000) - 1


def _placeholder_model(ref: str | None = None) -> Model:
    provider, _, model_id = (ref or "none/none").partition("/")
    return Model(id=model_id or "none", api="none", provider=provider or "none")


def _error_stream(model: Model, message: str) -> AssistantMessageEventStream:
    stream = AssistantMessageEventStream()
    final = AssistantMessage(
        api=model.api,
        provider=model.provider,
        model=model.id,
        stop_reason="error",
        error_message=message,
    )
    stream.push(ErrorEvent(reason="error", error=final))
    return stream


__all__ = ["AbortSignal", "SessionManager", "SubmitResult", "agent_from_key", "kind_from_key"]
