"""`SessionManager`: sessions as the gateway uses them.

It accepts inputs (recorded in the input ledger before the caller is answered), decides what
each becomes while a run is active (the session's queue mode), runs agents on the session's lane
under the global run limiter, ends each run with a recorded termination reason, and recovers what
a crash left behind. Operations that change a session's history (runs, compaction, inject) go
through the session's lane; steering, follow-ups and aborts reach the running agent at once.
Driving the agent of one run is `sessions.live.RunDriver`'s job.

Every accepted input ends in exactly one recorded outcome: `done` (with the outcome of the run it
ended in), `rejected` (the run could not happen) or `interrupted` (the gateway stopped during its
run). Inputs still waiting when the gateway stops stay `queued`, `steered` or `followup` and run
after the restart.

Sub-agent runs (`kind == "subagent"`) whose parent session has a run in progress run without a
slot of the global limiter: the parent holds one and waits for them, so taking another could
deadlock once every slot is held by a parent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import structlog

from agent_core import (
    AbortSignal,
    Agent,
    AgentMessage,
    AgentTool,
    AssistantMessage,
    Model,
    StreamFn,
    TextContent,
    ThinkingLevel,
    UserMessage,
    parse_message,
    text_of,
)
from agent_core._util import resolve
from sessions import compaction as compaction_mod
from sessions.context import build_context
from sessions.errors import (
    Conflict,
    InvalidRequest,
    InvalidTransition,
    LaneFull,
    NotFound,
    SessionsError,
    StoreUnavailable,
)
from sessions.ids import new_id
from sessions.journal import Journal, JournalItem
from sessions.lane import LaneRegistry, RunLimiter
from sessions.live import LiveSession, RunDriver, RunOutcome, RunPhase, RunSetup, RunState, input_keys_of
from sessions.profiles import (
    QUEUE_MODES,
    AgentDirectory,
    AgentProfile,
    RunContext,
    RunSettings,
    ToolsFactory,
)
from sessions.recovery import recover
from sessions.schema import SessionKind, SessionStatus
from sessions.session_events import Draft, EventPublisher, NullPublisher
from sessions.store import InputRecord, NewEntry, SessionRecord, Store

__all__ = ["AbortSignal", "SessionManager", "SubmitResult", "agent_from_key", "kind_from_key"]

log = structlog.get_logger("sessions.manager")
T = TypeVar("T")

FINAL_INPUT_STATES = frozenset({"done", "rejected", "interrupted"})
_QUEUED_STATUS = {"steer": "steered", "followup": "followup", "collect": "followup"}


@dataclass(frozen=True)
class SubmitResult:
    """The answer to an inbound message. `status` is `started` (accepted now), `in_flight` (the
    key was seen and has not finished) or the stored outcome (`ok`, `error`, `aborted`).
    `disposition` says what an accepted message became: `queued` (a run of its own, or joined a
    run that has not started), `steered` or `followup`."""

    run_id: str
    status: str
    session: SessionRecord
    disposition: str = "queued"
    result: dict[str, Any] | None = None


class SessionManager:
    """Live sessions over one store. `await start()` before use; `await aclose()` at the end."""

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
        # Live sessions in LRU order (most recently used last); see `_evict`.
        self._live: OrderedDict[str, LiveSession] = OrderedDict()
        self._loading: dict[str, asyncio.Future[LiveSession]] = {}
        # Run tasks, from acceptance until their outcome is recorded.
        self._tasks: set[asyncio.Task[None]] = set()
        # Per input key, set once the input's outcome is recorded; only while someone waits.
        self._waiters: dict[str, asyncio.Event] = {}
        self._accepting = False
        self._closed = False
        self._sweeper: asyncio.Task[None] | None = None
        self.started_at = time.time()

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the journal, close what a crash left open, run the inputs that were accepted
        and never started."""
        await self.journal.start()
        pending = await recover(self.store, self.journal)
        self._accepting = True
        for session_id, inputs in pending.items():
            try:
                await self._resume_inputs(session_id, inputs)
            except SessionsError as exc:
                await self._settle([i.idempotency_key for i in inputs], "rejected", reason=str(exc))
        self._sweeper = asyncio.create_task(self._sweep(), name="live-session-sweeper")

    async def aclose(self, *, grace_s: float | None = None) -> None:
        """Graceful stop: refuse new inputs, give active runs `grace_s` (default
        `shutdown_grace_s`) to end, abort the rest with `gateway_shutdown`, flush the event log.
        Inputs that have not started stay queued and run after the next start. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._accepting = False
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        for live in self._live.values():
            if live.collect_timer is not None:
                live.collect_timer.cancel()
                live.collect_timer = None
        grace = self.settings.shutdown_grace_s if grace_s is None else grace_s
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=grace)
        for live in list(self._live.values()):
            live.abort("gateway_shutdown")
        if self._tasks:
            _, stuck = await asyncio.wait(list(self._tasks), timeout=self.settings.abort_grace_s + 5.0)
            for task in stuck:
                task.cancel()
            if stuck:
                await asyncio.gather(*stuck, return_exceptions=True)
        for event in self._waiters.values():
            event.set()
        await self.journal.aclose()

    async def __aenter__(self) -> SessionManager:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

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
        """The session by id or key; raise NotFound."""
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
        """Runs whose agent runs or whose outcome is being recorded."""
        return sum(
            1
            for live in self._live.values()
            if live.run is not None and live.run.phase in (RunPhase.RUNNING, RunPhase.FINISHING)
        )

    def queue_depths(self) -> dict[str, int]:
        """Per session with any: messages waiting in the agent's queues or the collect buffer,
        plus operations on its lane."""
        out: dict[str, int] = {}
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
        """Record an inbound message, then act on it. Never runs the same key twice: a key seen
        before answers `in_flight` or its stored outcome.

        Raise StoreUnavailable while the manager is not accepting (starting or stopping),
        LaneFull when the session has too many operations waiting, InvalidRequest for an unknown
        queue mode.
        """
        if not self._accepting:
            raise StoreUnavailable("the gateway is not accepting messages right now", retry_after_ms=2000)
        if queue_mode is not None and queue_mode not in QUEUE_MODES:
            raise InvalidRequest(f"queueMode must be one of {', '.join(QUEUE_MODES)}")
        existing = await self.store.get_input(idempotency_key)
        if existing is not None:
            return await self._repeat(existing, session)
        if self.lanes.depth(session.id) >= self.settings.lane_depth:
            raise LaneFull("this session has too many operations waiting", retry_after_ms=1000)
        mode = queue_mode or session.queue_mode or self.directory.profile(session.agent_id).queue_mode
        user = _user_message(message, idempotency_key)
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
        disposition = await self._dispatch(live, user, mode)
        return SubmitResult(
            run_id=idempotency_key, status="started", session=live.record, disposition=disposition
        )

    async def _repeat(self, record: InputRecord, session: SessionRecord) -> SubmitResult:
        if record.status not in FINAL_INPUT_STATES:
            return SubmitResult(
                run_id=record.idempotency_key, status="in_flight", session=session, disposition=record.status
            )
        result = await self._input_result(record)
        return SubmitResult(
            run_id=record.idempotency_key,
            status=str(result.get("status", "ok")),
            session=session,
            disposition=record.status,
            result=result,
        )

    async def _dispatch(self, live: LiveSession, user: UserMessage, mode: str) -> str:
        """Act on a recorded input. The ledger is updated before the message reaches the agent,
        so the agent's own update (running, done) always comes later."""
        run = live.run
        if run is not None and run.phase is not RunPhase.PENDING and mode in _QUEUED_STATUS:
            await self._mark([input_keys_of(user)[0]], _QUEUED_STATUS[mode], run.run_id)
        run = live.run  # it may have ended while the ledger was written
        if run is None or not self._accepting:
            self._start_run(live, [user])
            return "queued"
        if run.phase is RunPhase.PENDING:
            run.join(user)
            await self._mark(input_keys_of(user), "queued", run.run_id)
            return "queued"
        if mode == "interrupt":
            self._abort_tree(live, "aborted")
            self._start_run(live, [user], after=run)
            return "queued"
        if mode == "collect":
            live.collect_buffer.append(user)
            self._arm_collect(live)
            return "followup"
        if mode == "steer":
            live.agent.steer(user)
            return "steered"
        live.agent.follow_up(user)
        return "followup"

    def _arm_collect(self, live: LiveSession) -> None:
        """Each collected message restarts the quiet window."""
        if live.collect_timer is not None:
            live.collect_timer.cancel()
        loop = asyncio.get_running_loop()
        live.collect_timer = loop.call_later(self.settings.collect_window_s, self._release_collect, live)

    def _release_collect(self, live: LiveSession) -> None:
        live.collect_timer = None
        if not live.collect_buffer or not self._accepting:
            return  # when stopping, the buffered inputs stay `followup` and run after the restart
        merged = _merge(live.collect_buffer)
        live.collect_buffer = []
        run = live.run
        if run is None:
            self._start_run(live, [merged])
        elif run.phase is RunPhase.PENDING:
            run.join(merged)
        else:
            # A finishing run leaves it in the queue; `_after_run` starts the next run with it.
            live.agent.follow_up(merged)

    async def _resume_inputs(self, session_id: str, inputs: list[InputRecord]) -> None:
        live = await self._live_session(session_id)
        messages = [_user_message(parse_message(i.payload), i.idempotency_key) for i in inputs]
        log.info("running inputs accepted before the restart", session_id=session_id, count=len(messages))
        self._start_run(live, messages)

    async def _mark(self, keys: list[str], status: str, run_id: str) -> None:
        for key in keys:
            with contextlib.suppress(InvalidTransition):
                await self.store.update_input(key, status=status, run_id=run_id)

    async def _settle(
        self, keys: list[str], status: str, *, reason: str | None = None, run_id: str | None = None
    ) -> None:
        """Record the final outcome of inputs (once; a recorded outcome never changes) and wake
        their waiters."""
        for key in keys:
            try:
                await self.store.update_input(key, status=status, reason=reason, run_id=run_id)
            except (InvalidTransition, NotFound):
                pass
            except SessionsError:
                log.exception("could not record an input's outcome", key=key)
                continue
            waiter = self._waiters.pop(key, None)
            if waiter is not None:
                waiter.set()

    async def wait_run(self, run_id: str, timeout_s: float | None = None) -> dict[str, Any] | None:
        """Wait until the input `run_id` (or the run of that id) has its outcome and return the
        run's stored result (`status`: ok, error or aborted). None on timeout, for an unknown id,
        or when the manager stops first."""
        record = await self.store.get_input(run_id)
        if record is None:
            return await self._wait_plain_run(run_id, timeout_s)
        if record.status not in FINAL_INPUT_STATES:
            waiter = self._waiters.setdefault(run_id, asyncio.Event())
            record = await self.store.get_input(run_id)  # after registering: no outcome slips by
            if record is not None and record.status not in FINAL_INPUT_STATES and not self._closed:
                try:
                    await asyncio.wait_for(waiter.wait(), timeout=timeout_s)
                except TimeoutError:
                    return None
                record = await self.store.get_input(run_id)
            elif self._waiters.pop(run_id, None) is waiter:
                waiter.set()
        if record is None or record.status not in FINAL_INPUT_STATES:
            return None
        return await self._input_result(record)

    async def _wait_plain_run(self, run_id: str, timeout_s: float | None) -> dict[str, Any] | None:
        for live in list(self._live.values()):
            if live.run is not None and live.run.run_id == run_id:
                try:
                    await asyncio.wait_for(live.run.finished.wait(), timeout=timeout_s)
                except TimeoutError:
                    return None
                break
        run = await self.store.get_run(run_id)
        if run is None or run.status == "running":
            return None
        return dict(run.result or {"runId": run_id, "status": _outcome(run.status)})

    async def _input_result(self, record: InputRecord) -> dict[str, Any]:
        run = await self.store.get_run(record.run_id) if record.run_id else None
        if record.status == "rejected" or run is None:
            out: dict[str, Any] = {"runId": record.idempotency_key, "status": "error"}
            if record.status == "interrupted":
                out["status"] = "aborted"
            if record.reason:
                out["errorMessage"] = record.reason
            return out
        result = dict(run.result) if isinstance(run.result, dict) else {}
        result.setdefault("runId", run.id)
        result["status"] = (
            "aborted" if record.status == "interrupted" else result.get("status") or _outcome(run.status)
        )
        return result

    # --- runs ---------------------------------------------------------------------------------

    def _start_run(
        self, live: LiveSession, messages: list[UserMessage], *, after: RunState | None = None
    ) -> None:
        if not self._accepting:
            return  # the inputs stay queued and run after the restart
        run = RunState.for_messages(messages)
        live.run = run
        task = asyncio.create_task(self._run_task(live, run, after), name=f"run-{run.run_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_task(self, live: LiveSession, run: RunState, after: RunState | None) -> None:
        failed = False
        try:
            if after is not None:
                await after.finished.wait()
            await self.lanes.lane(live.session_id).run(lambda: self._execute(live, run))
        except Exception as exc:
            failed = True
            log.exception("a run failed outside the agent", run_id=run.run_id)
            if run.phase is RunPhase.PENDING:
                await self._settle(run.input_keys, "rejected", reason=f"the run could not start: {exc}")
            else:
                with contextlib.suppress(SessionsError):
                    await self.store.finish_run(
                        run.run_id, status="error", termination_reason="error", error=str(exc)
                    )
                await self._settle(
                    run.input_keys, "rejected", reason=f"the run failed: {exc}", run_id=run.run_id
                )
        finally:
            if run.phase is not RunPhase.DONE:
                run.phase = RunPhase.DONE
            run.finished.set()
            if live.run is run:
                live.run = None
            live.last_used = time.monotonic()
            self._after_run(live)
            if (
                failed
                and self._live.get(live.session_id) is live
                and self._evictable(live)
            ):
                # Events the store refused leave the seq counter ahead of the log; the next
                # use reloads it from the database.
                del self._live[live.session_id]

    def _after_run(self, live: LiveSession) -> None:
        """Messages still queued in the agent (a steer that came too late, follow-ups after an
        abort or the end of the run) start the next run: nothing accepted is dropped."""
        if live.run is not None or not self._accepting:
            return
        leftovers = [m for m in live.agent.drain_queues() if isinstance(m, UserMessage)]
        if leftovers:
            self._start_run(live, leftovers)

    async def _execute(self, live: LiveSession, run: RunState) -> None:
        if not self._accepting:
            return  # stopping before the run started: its inputs run after the restart
        if self._borrows_parent_slot(live):
            await self._execute_run(live, run)
            return
        async with self.limiter.slot():
            if self._accepting:
                await self._execute_run(live, run)

    def _borrows_parent_slot(self, live: LiveSession) -> bool:
        record = live.record
        if record.kind != SessionKind.SUBAGENT or record.parent_id is None:
            return False
        parent = self._live.get(record.parent_id)
        return parent is not None and parent.run is not None and parent.run.phase is RunPhase.RUNNING

    async def _execute_run(self, live: LiveSession, run: RunState) -> None:
        session = await self.store.get_session(live.session_id)
        if session is None:
            await self._settle(run.input_keys, "rejected", reason="the session was deleted")
            return
        if session.status == SessionStatus.ARCHIVED:
            await self._settle(run.input_keys, "rejected", reason="the session is archived")
            return
        live.record = session
        profile = self.directory.profile(session.agent_id)
        model, model_error = self._model_for(session, profile)
        run.advance(RunPhase.RUNNING)
        try:
            await self.store.create_run(run.run_id, session.id)
        except Conflict:
            run.run_id = new_id()  # the input's key names an earlier, interrupted run
            await self.store.create_run(run.run_id, session.id)
        await self.journal.commit(
            JournalItem(
                session.id,
                events=live.number([Draft("status.changed", {"status": "running"})], run.run_id),
                session_fields={"status": "running"},
            )
        )
        await self._mark(run.input_keys, "running", run.run_id)
        self._session_changed(session.id, "agent.run.started")
        driver = RunDriver(
            live,
            run,
            journal=self.journal,
            settings=self.settings,
            stream_fn=self._base_stream_fn(),
            on_inputs_running=lambda keys, run_id: self._mark(keys, "running", run_id),
        )
        try:
            setup = await self._setup(session, profile, run, model, model_error)
            await driver.drive(setup)
        except Exception as exc:
            log.exception("the run could not be prepared", run_id=run.run_id)
            run.failure = str(exc) or type(exc).__name__
        outcome = await driver.finish()
        await self._record_outcome(live, run, outcome)

    async def _setup(
        self,
        session: SessionRecord,
        profile: AgentProfile,
        run: RunState,
        model: Model,
        model_error: str | None,
    ) -> RunSetup:
        # Only the part of the transcript the context holds is read (from the newest compaction
        # on): a run's cost follows its context, however long the session's history is.
        context = build_context(await self.store.context_entries(session.id))
        tools: list[AgentTool] = []
        if model_error is None:
            if self.settings.compaction_enabled:
                context = await self._maybe_auto_compact(session, model, context)
            tools = await self._build_tools(session, run, profile, model)
        level = session.thinking_level or profile.thinking_level
        return RunSetup(
            system_prompt=profile.system_prompt,
            model=model,
            thinking_level=cast(ThinkingLevel, level if level in _THINKING_LEVELS else "off"),
            tools=tools,
            context=context,
            model_error=model_error,
        )

    async def _record_outcome(self, live: LiveSession, run: RunState, outcome: RunOutcome) -> None:
        await self.store.finish_run(
            run.run_id,
            status=outcome.run_status,
            termination_reason=outcome.termination_reason,
            error=outcome.error,
            result=outcome.result,
        )
        usage = run.usage
        await self.store.add_usage(
            live.session_id,
            input=usage.input,
            output=usage.output,
            total=usage.total_tokens,
            cost=usage.cost.total,
        )
        final = "interrupted" if outcome.run_status == "interrupted" else "done"
        await self._settle(run.input_keys, final, run_id=run.run_id)
        run.advance(RunPhase.DONE)
        refreshed = await self.store.get_session(live.session_id)
        if refreshed is not None:
            live.record = refreshed
        self._session_changed(live.session_id, "agent.run.finished")

    def _model_for(self, session: SessionRecord, profile: AgentProfile) -> tuple[Model, str | None]:
        ref = session.model or profile.model
        try:
            # Without a ref the directory's error says how to configure a model (the same text
            # the daemon prints at start-up).
            return self.directory.resolve_model(ref or ""), None
        except Exception as exc:
            return _placeholder_model(ref), str(exc)

    async def _build_tools(
        self, session: SessionRecord, run: RunState, profile: AgentProfile, model: Model
    ) -> list[AgentTool]:
        if self._tools_factory is None:
            return []
        ctx = RunContext(session=session, run_id=run.run_id, profile=profile, model=model)
        return list(await resolve(self._tools_factory(ctx)))

    def _base_stream_fn(self) -> StreamFn:
        if self._stream_fn is not None:
            return self._stream_fn
        from agent_core.providers import stream_simple

        return stream_simple

    # --- inject -------------------------------------------------------------------------------

    async def inject(self, session_id: str, *, text: str, role: str = "assistant") -> str:
        """Append a message to the transcript without running the agent (`chat.inject`); runs on
        the session's lane. Returns the entry id. Raise NotFound for an unknown session."""
        session = await self.get(session_id=session_id)
        if role == "user":
            message: AgentMessage = UserMessage(content=[TextContent(text=text)])
        else:
            message = AssistantMessage(
                content=[TextContent(text=text)], api="gateway", provider="gateway", model="inject"
            )
        entry_id = new_id()

        async def op() -> None:
            live = await self._live_session(session.id)
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
        """Abort the session's active run and its sub-agent sessions' runs. Returns the ids of
        the runs asked to stop (the run records their end as usual)."""
        live = self._live.get(session_id)
        if live is None or live.run is None or (run_id is not None and live.run.run_id != run_id):
            return []
        return self._abort_tree(live, reason)

    def _abort_tree(self, live: LiveSession, reason: str) -> list[str]:
        aborted: list[str] = []
        run = live.run
        if run is not None and live.abort(reason):
            aborted.append(run.run_id)
        for child in list(self._live.values()):
            if child.record.parent_id == live.session_id and child.record.kind == SessionKind.SUBAGENT:
                aborted.extend(self._abort_tree(child, reason))
        return aborted

    # --- history-changing operations (on the lane) --------------------------------------------

    async def on_lane(self, session_id: str, op: Callable[[], Awaitable[T]]) -> T:
        """Run `op` on the session's lane (after its runs and other operations)."""
        return await self.lanes.lane(session_id).run(op)

    async def compact(self, session_id: str) -> compaction_mod.CompactionResult:
        """Compact the session's history now (on its lane). Raise CompactionError when there is
        not enough history or the summary fails, NotFound for an unknown session."""
        session = await self.get(session_id=session_id)

        async def op() -> compaction_mod.CompactionResult:
            profile = self.directory.profile(session.agent_id)
            model, error = self._model_for(session, profile)
            if error is not None:
                raise compaction_mod.CompactionError(error)
            return await self._compact(session, model)

        return await self.on_lane(session_id, op)

    async def _maybe_auto_compact(
        self, session: SessionRecord, model: Model, context: list[AgentMessage]
    ) -> list[AgentMessage]:
        tokens = compaction_mod.context_tokens(context)
        if not compaction_mod.should_compact(
            tokens, model.context_window, self.settings.compaction_reserve_tokens
        ):
            return context
        try:
            await self._compact(session, model)
        except compaction_mod.CompactionError as exc:
            log.warning("automatic compaction failed", session_id=session.id, error=str(exc))
            return context
        return build_context(await self.store.context_entries(session.id))

    async def _compact(self, session: SessionRecord, model: Model) -> compaction_mod.CompactionResult:
        # A compaction summarises what the context holds (continuing the previous summary), so it
        # needs no more of the transcript than a run does.
        entries = await self.store.context_entries(session.id)
        plan = compaction_mod.plan(entries, self.settings.compaction_keep_recent_tokens)
        summary = await compaction_mod.summarize(
            plan.to_summarize,
            model=model,
            stream_fn=self._base_stream_fn(),
            api_key=self.directory.api_key(model.provider),
            previous_summary=plan.previous_summary,
        )
        result = compaction_mod.CompactionResult(
            summary=summary, first_kept_entry_id=plan.first_kept_entry_id, tokens_before=plan.tokens_before
        )
        await self.journal.commit(
            JournalItem(session.id, entries=[NewEntry(kind="compaction", payload=result.payload())])
        )
        self._session_changed(session.id, "compaction")
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
            self._evict_over_cap(keep=session_id)
            return live
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters (if any) get it through the shield
            raise
        finally:
            self._loading.pop(session_id, None)

    def forget(self, session_id: str) -> None:
        """Drop a live session that is not busy (after delete or reset)."""
        live = self._live.get(session_id)
        if live is not None and self._evictable(live):
            self._live.pop(session_id, None)

    def _evictable(self, live: LiveSession) -> bool:
        """Nothing of the session is in flight: no run, no queued message, no lane operation, no
        uncommitted event (its seq counter must not be rebuilt from a stale `last_seq`)."""
        sid = live.session_id
        return not live.busy and self.lanes.depth(sid) == 0 and self.journal.pending_for(sid) == 0

    def _evict_over_cap(self, *, keep: str) -> None:
        excess = len(self._live) - self.settings.live_cap
        if excess <= 0:
            return
        for sid in list(self._live):
            if excess <= 0:
                break
            if sid != keep and self._evictable(self._live[sid]):
                del self._live[sid]
                excess -= 1

    def evict_idle(self, now: float | None = None) -> int:
        """Drop live sessions unused for `live_idle_ttl_s` that are not busy; return how many."""
        now = time.monotonic() if now is None else now
        ttl = self.settings.live_idle_ttl_s
        evicted = 0
        for sid in list(self._live):
            live = self._live[sid]
            if now - live.last_used > ttl and self._evictable(live):
                del self._live[sid]
                evicted += 1
        return evicted

    async def _sweep(self) -> None:
        interval = max(0.05, min(30.0, self.settings.live_idle_ttl_s / 2))
        while True:
            await asyncio.sleep(interval)
            self.evict_idle()

    def _session_changed(self, session_id: str, reason: str) -> None:
        notify = getattr(self.publisher, "session_changed", None)
        if callable(notify):
            try:
                notify(session_id, reason)
            except Exception:
                log.exception("session change notification failed")


# --- helpers ----------------------------------------------------------------------------------

_THINKING_LEVELS = frozenset({"off", "minimal", "low", "medium", "high", "xhigh"})


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
    extra = dict(user.__pydantic_extra__ or {})
    extra.pop("mergedKeys", None)
    extra["idempotencyKey"] = idempotency_key
    user.__pydantic_extra__ = extra
    return user


def _merge(messages: list[UserMessage]) -> UserMessage:
    """Collected messages as one user message that carries every input's key."""
    keys = [k for m in messages for k in input_keys_of(m)]
    if len(messages) == 1:
        return messages[0]
    merged = UserMessage(content=[TextContent(text="\n\n".join(text_of(m) for m in messages))])
    merged.__pydantic_extra__ = {"idempotencyKey": keys[0], "mergedKeys": keys}
    return merged


def _outcome(run_status: str) -> str:
    return {"done": "ok", "error": "error"}.get(run_status, "aborted")


def _placeholder_model(ref: str | None = None) -> Model:
    provider, _, model_id = (ref or "none/none").partition("/")
    return Model(id=model_id or "none", api="none", provider=provider or "none")
