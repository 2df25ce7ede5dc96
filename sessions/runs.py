"""The lifecycle of runs: from the inputs that start one to its recorded outcome.

`Runs.start` makes a run of a live session for some input messages. The run waits for the
session's lane (one operation at a time per session), then for a slot of the global run limiter,
records its start, drives the agent (`sessions.run_driver.RunDriver`), and records how it ended.
Its start is one journal commit (the session `running` and that event, the run record, its
inputs `running`, and the session as it is now, which the run goes by), and so is its end
(`agent.finished` and the session's status, the run record's outcome, its usage added to the
session's totals, its inputs' outcome): one database round trip each. Whatever happens, its
inputs end with exactly one recorded outcome.

The run's context comes from the session's cached context (`sessions.context_cache`) when it
matches the session's entries, else from the store. Messages still queued in the
agent when a run ends (a steer that came too late, follow-ups after an abort) start the next run:
nothing accepted is dropped.

Sub-agent runs (`kind == "subagent"`) whose parent session has a run in progress run without a
slot of the limiter: the parent holds one and waits for them, so taking another could deadlock
once every slot is held by a parent.

While `accepting` is False (before start-up finished, after shutdown began) no run starts: the
inputs stay queued in the ledger and run after the next start. Run tasks belong to `Runs`, from
acceptance until their outcome is recorded; `aclose` ends them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import cast

import structlog

from agent_core import Model, StreamFn, ThinkingLevel, parse_message
from sessions._direct_write import DirectWrite
from sessions.compactor import Compactor
from sessions.context_cache import ContextCache
from sessions.errors import Conflict, InvalidTransition, NotFound, SessionsError, StoreError
from sessions.event_payloads import StatusChanged
from sessions.ids import new_id
from sessions.input_message import InputMessage, as_input
from sessions.inputs import Inputs
from sessions.journal import Journal, JournalItem
from sessions.lane import LaneRegistry, RunLimiter
from sessions.live import LiveSession, RunPhase, RunState
from sessions.live_cache import LiveSessions
from sessions.profiles import AgentDirectory, AgentProfile, RunContext, RunSettings, RunTools, ToolsFactory
from sessions.records import InputRecord, SessionRecord
from sessions.run_driver import RunDriver, RunOutcome, RunSetup
from sessions.run_model import model_for
from sessions.schema import InputStatus, RunStatus, SessionKind, SessionStatus
from sessions.session_status import session_in
from sessions.store import ExtraWrite, Store
from sessions.termination import TerminationReason

__all__ = ["Runs"]

log = structlog.get_logger("sessions.runs")

_THINKING_LEVELS = frozenset({"off", "minimal", "low", "medium", "high", "xhigh"})


class _StartRefused(Exception):
    """The store refused a run's start (its session is gone or archived; the message says which)."""


class Runs:
    """The runs of one manager's live sessions. `directory()` and `settings()` return the
    current agent directory and run settings; `on_session_changed(session_id, reason)` is told
    when a run starts and when it has finished."""

    def __init__(
        self,
        store: Store,
        journal: Journal,
        *,
        lanes: LaneRegistry,
        limiter: RunLimiter,
        lives: LiveSessions,
        inputs: Inputs,
        contexts: ContextCache,
        compactor: Compactor,
        directory: Callable[[], AgentDirectory],
        settings: Callable[[], RunSettings],
        tools_factory: ToolsFactory | None,
        stream_fn: StreamFn,
        on_session_changed: Callable[[str, str], None],
    ) -> None:
        self._store = store
        self._journal = journal
        self._lanes = lanes
        self._limiter = limiter
        self._lives = lives
        self._inputs = inputs
        self._contexts = contexts
        self._compactor = compactor
        self._directory = directory
        self._settings = settings
        self._tools_factory = tools_factory
        self._stream_fn = stream_fn
        self._on_session_changed = on_session_changed
        self.accepting = False
        """Whether runs may start; see the module docstring."""
        self._tasks: set[asyncio.Task[None]] = set()

    def start(
        self,
        live: LiveSession,
        messages: list[InputMessage],
        *,
        after: RunState | None = None,
        run_id: str | None = None,
    ) -> None:
        """Make a run of `live` for `messages` (the live session's run from now on), named
        `run_id` when given (else after its first input); with `after`, it goes to the lane only
        once that run has finished."""
        if not self.accepting:
            return  # the inputs stay queued and run after the restart
        run = RunState.for_messages(messages)
        if run_id is not None:
            run.run_id = run_id
        live.run = run
        task = asyncio.create_task(self._run_task(live, run, after), name=f"run-{run.run_id}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    async def resume(self, session_id: str, inputs: list[InputRecord]) -> None:
        """Start one run for inputs accepted before a restart (in arrival order). Raise
        NotFound when their session is gone."""
        live = await self._lives.load(session_id)
        messages = [as_input(parse_message(i.payload), i.idempotency_key) for i in inputs]
        log.info("running inputs accepted before the restart", session_id=session_id, count=len(messages))
        first = inputs[0].idempotency_key if inputs else None
        # The input's key may name an earlier run that a crash cut off before the input moved on.
        taken = first is not None and await self._store.runs.get(first) is not None
        self.start(live, messages, run_id=new_id() if taken else None)

    async def aclose(self, grace_s: float) -> None:
        """Stop starting runs, give active ones `grace_s` to end, abort the rest with
        `gateway_shutdown`, and cancel any that outlive their abort grace. Idempotent."""
        self.accepting = False
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=grace_s)
        for live in self._lives:
            live.abort(TerminationReason.GATEWAY_SHUTDOWN)
        if self._tasks:
            _, stuck = await asyncio.wait(list(self._tasks), timeout=self._settings().abort_grace_s + 5.0)
            for task in stuck:
                task.cancel()
            if stuck:
                await asyncio.gather(*stuck, return_exceptions=True)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("a run task failed", task=task.get_name(), exc_info=error)

    # --- one run ------------------------------------------------------------------------------

    async def _run_task(self, live: LiveSession, run: RunState, after: RunState | None) -> None:
        failed = False
        try:
            if after is not None:
                await after.finished.wait()
            await self._lanes.lane(live.session_id).run(lambda: self._execute(live, run))
        except _StartRefused as refused:
            failed = True
            await self._inputs.settle(run.input_keys, InputStatus.REJECTED, reason=str(refused))
        except Exception as exc:
            failed = True
            log.exception("a run failed outside the agent", run_id=run.run_id)
            if run.phase is RunPhase.PENDING:
                reason = f"the run could not start: {exc}"
                await self._inputs.settle(run.input_keys, InputStatus.REJECTED, reason=reason)
            else:
                with contextlib.suppress(SessionsError):
                    await self._store.runs.finish(
                        run.run_id,
                        status=RunStatus.ERROR,
                        termination_reason=TerminationReason.ERROR,
                        error=str(exc),
                    )
                await self._inputs.settle(
                    run.input_keys, InputStatus.REJECTED, reason=f"the run failed: {exc}", run_id=run.run_id
                )
        finally:
            if run.phase is not RunPhase.DONE:
                run.phase = RunPhase.DONE
            run.finished.set()
            if live.run is run:
                live.run = None
            live.last_used = time.monotonic()
            self._after_run(live)
            if failed:
                # Events the store refused leave the seq counter ahead of the log; the next use
                # reloads it from the database.
                self._lives.forget(live)

    def _after_run(self, live: LiveSession) -> None:
        """Messages still queued in the agent start the next run."""
        if live.run is not None or not self.accepting:
            return
        leftovers = [m for m in live.agent.drain_queues() if isinstance(m, InputMessage)]
        if leftovers:
            self.start(live, leftovers)

    async def _execute(self, live: LiveSession, run: RunState) -> None:
        if not self.accepting:
            return  # stopping before the run started: its inputs run after the restart
        if self._borrows_parent_slot(live):
            await self._execute_run(live, run)
            return
        async with self._limiter.slot():
            if self.accepting:
                await self._execute_run(live, run)

    def _borrows_parent_slot(self, live: LiveSession) -> bool:
        record = live.record
        if record.kind != SessionKind.SUBAGENT or record.parent_id is None:
            return False
        parent = self._lives.get(record.parent_id)
        return parent is not None and parent.run is not None and parent.run.phase is RunPhase.RUNNING

    async def _execute_run(self, live: LiveSession, run: RunState) -> None:
        run.advance(RunPhase.RUNNING)
        session = await self._start(live, run)
        live.record = session
        profile = self._directory().profile(session.agent_id)
        model, model_error = model_for(self._directory(), session, profile)
        self._on_session_changed(session.id, "agent.run.started")
        settings = self._settings()
        driver = RunDriver(
            live,
            run,
            journal=self._journal,
            settings=settings,
            stream_fn=self._stream_fn,
            on_inputs_running=lambda keys, run_id: self._inputs.mark(keys, InputStatus.RUNNING, run_id),
        )
        try:
            setup = await self._setup(
                session, profile, run, model=model, error=model_error, settings=settings
            )
            await driver.drive(setup)
        except Exception as exc:
            log.exception("the run could not be prepared", run_id=run.run_id)
            run.failure = str(exc) or type(exc).__name__
        ended: list[SessionRecord | None] = []
        await driver.finish(lambda outcome: self._end_writes(live, run, outcome, ended))
        self._inputs.settled(run.input_keys)
        run.advance(RunPhase.DONE)
        if ended and ended[0] is not None:
            live.record = ended[0]
        self._on_session_changed(live.session_id, "agent.run.finished")

    async def _start(self, live: LiveSession, run: RunState) -> SessionRecord:
        """Record the run's start in one journal commit (see the module docstring) and return
        the session as that commit saw it. Raise _StartRefused when the session is gone or
        archived."""
        found: list[SessionRecord | None] = []
        keys = list(run.input_keys)

        async def write(tx: DirectWrite) -> None:
            found.clear()
            if not await self._store.runs.start_in(tx, run.run_id, live.session_id):
                raise Conflict(f"run {run.run_id} already exists")
            await self._store.inputs.move_in(tx, keys, status=InputStatus.RUNNING, run_id=run.run_id)
            found.append(await session_in(tx, live.session_id))

        item = JournalItem(
            live.session_id,
            events=live.number([StatusChanged(SessionStatus.RUNNING)], run.run_id),
            session_fields={"status": SessionStatus.RUNNING.value},
            extra=write,
        )
        try:
            await self._journal.commit(item)
        except NotFound as exc:
            raise _StartRefused("the session was deleted") from exc
        except Conflict as exc:
            raise _StartRefused(f"the run could not start: {exc}") from exc
        except InvalidTransition as exc:
            if exc.current == SessionStatus.ARCHIVED.value:
                raise _StartRefused("the session is archived") from exc
            raise
        session = found[0] if found else None
        if session is None:
            raise StoreError(f"session {live.session_id} vanished while its run started")
        return session

    def _end_writes(
        self, live: LiveSession, run: RunState, outcome: RunOutcome, ended: list[SessionRecord | None]
    ) -> ExtraWrite:
        """The writes that commit with the run's `agent.finished`: the run record's outcome, its
        usage, its inputs' outcome; the session as it is then goes into `ended`."""
        keys = list(run.input_keys)
        interrupted = outcome.run_status is RunStatus.INTERRUPTED
        final = InputStatus.INTERRUPTED if interrupted else InputStatus.DONE

        async def write(tx: DirectWrite) -> None:
            ended.clear()
            await self._store.runs.finish_in(
                tx,
                run.run_id,
                session_id=live.session_id,
                status=outcome.run_status,
                termination_reason=outcome.termination_reason,
                error=outcome.error,
                result=outcome.result,
                usage=run.usage,
            )
            await self._store.inputs.move_in(tx, keys, status=final, run_id=run.run_id)
            ended.append(await session_in(tx, live.session_id))

        return write

    async def _setup(
        self,
        session: SessionRecord,
        profile: AgentProfile,
        run: RunState,
        *,
        model: Model,
        error: str | None,
        settings: RunSettings,
    ) -> RunSetup:
        context = self._contexts.get(session.id, session.entry_count)
        if context is None:
            # Only the part of the transcript the context holds is read (from the newest
            # compaction on): a run's cost follows its context, however long the history is.
            # A new session with no entries of its own and no parent has nothing to read (a burst
            # of first messages must not queue up for the database one read after another).
            fresh = session.entry_count == 0 and session.parent_id is None
            entries = [] if fresh else await self._store.transcript.context_entries(session.id)
            context = self._contexts.fill(session.id, session.entry_count, entries)
        tools = RunTools([])
        if error is None:
            if settings.compaction_enabled:
                context = await self._compactor.before_run(session, model, context)
            tools = await self._build_tools(session, run, profile, model)
        level = session.thinking_level or profile.thinking_level
        return RunSetup(
            system_prompt=profile.system_prompt,
            model=model,
            thinking_level=cast(ThinkingLevel, level if level in _THINKING_LEVELS else "off"),
            tools=tools.tools,
            refresh_tools=tools.refresh,
            context=context,
            model_error=error,
        )

    async def _build_tools(
        self, session: SessionRecord, run: RunState, profile: AgentProfile, model: Model
    ) -> RunTools:
        if self._tools_factory is None:
            return RunTools([])
        ctx = RunContext(session=session, run_id=run.run_id, profile=profile, model=model)
        made = self._tools_factory(ctx)
        built = made if isinstance(made, list | RunTools) else await made
        return built if isinstance(built, RunTools) else RunTools(list(built))
