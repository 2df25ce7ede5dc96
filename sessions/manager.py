"""`SessionManager`: sessions as the gateway uses them.

It accepts inputs (recorded in the input ledger before the caller is answered), runs agents on
each session's lane under the global run limiter, ends each run with a recorded termination
reason, and recovers what a crash left behind. Operations that change a session's history (runs,
compaction, inject) go through the session's lane; steering, follow-ups and aborts reach the
running agent at once.

The manager composes the parts that do the work, each in the module named after it:

- `sessions.inputs`: the outcomes of inputs (repeats, settling, waiting);
- `sessions.queueing`: what an input becomes while a run is active (the queue modes);
- `sessions.runs`: the lifecycle of runs (lane, limiter, recording, driving the agent);
- `sessions.live_cache`: the live sessions kept in memory;
- `sessions.compactor`: compactions, on request and before a run;
- `sessions.aborts`: aborting a run with its sub-agents' runs;
- `sessions.answers`: inputs the caller answers itself (chat commands).

Settings are read at each use: `apply_settings` (a config reload) changes the run limiter's cap
and the lanes' depth at once, and everything else from the next use on.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog

from agent_core import AgentMessage, AssistantMessage, StreamFn, TextContent, UserMessage
from sessions import compaction
from sessions.aborts import abort_tree
from sessions.answers import Answers
from sessions.compactor import Compactor
from sessions.context_cache import ContextCache
from sessions.errors import Fenced, InvalidRequest, LaneFull, NotFound, SessionsError, StoreUnavailable
from sessions.event_payloads import MessageCompleted
from sessions.ids import new_id
from sessions.input_ledger import InputClaim
from sessions.input_message import as_input
from sessions.inputs import Inputs, SubmitResult
from sessions.journal import Journal, JournalItem
from sessions.keys import agent_from_key, kind_from_key
from sessions.lane import LaneRegistry, RunLimiter
from sessions.live_cache import LiveSessions
from sessions.ownership import Ownership
from sessions.placement import Placement, RemoteOwners
from sessions.profiles import QUEUE_MODES, AgentDirectory, RunSettings, ToolsFactory
from sessions.queueing import QueueModes
from sessions.records import NewEntry, SessionRecord
from sessions.recovery import recover
from sessions.run_model import model_for, stream_fn_or_default
from sessions.runs import Runs
from sessions.schema import InputStatus
from sessions.session_events import EventPublisher, NullPublisher
from sessions.store import Store
from sessions.termination import TerminationReason

__all__ = ["SessionManager"]

log = structlog.get_logger("sessions.manager")
T = TypeVar("T")


class SessionManager:
    """Live sessions over one store. `await start()` before use; `await aclose()` at the end.

    `directory` may be replaced at any time (a config reload); `apply_settings` changes the
    settings."""

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
        self._settings = settings or RunSettings()
        self.publisher = publisher or NullPublisher()
        self.contexts = ContextCache(lambda: self._settings.context_cache_bytes)
        """The live sessions' parsed contexts (`sessions.context_cache`)."""
        self.journal = Journal(store, self.publisher, on_committed=self._committed, on_refused=self._refused)
        self.lanes = LaneRegistry(max_depth=self._settings.lane_depth)
        self.limiter = RunLimiter(self._settings.max_concurrent_runs)
        self._lives = LiveSessions(
            store, lanes=self.lanes, journal=self.journal, contexts=self.contexts, settings=self._current
        )
        self._inputs = Inputs(store, find_run=self._lives.find_run)
        stream = stream_fn_or_default(stream_fn)
        self._compactor = Compactor(
            store,
            self.journal,
            directory=self._directory,
            settings=self._current,
            stream_fn=stream,
            on_compacted=lambda session_id: self._session_changed(session_id, "compaction"),
        )
        self._runs = Runs(
            store,
            self.journal,
            lanes=self.lanes,
            limiter=self.limiter,
            lives=self._lives,
            inputs=self._inputs,
            contexts=self.contexts,
            compactor=self._compactor,
            directory=self._directory,
            settings=self._current,
            tools_factory=tools_factory,
            stream_fn=stream,
            on_session_changed=self._session_changed,
        )
        self._queue = QueueModes(self._runs, self._inputs, self._lives, settings=self._current)
        self._answers = Answers(store, self.journal, lives=self._lives, inputs=self._inputs)
        self.placement: Placement | None = None
        """In a cluster, where each session's inputs run (`join_cluster`); None on one node."""
        self._closed = False
        self.started_at = time.time()

    # --- settings -----------------------------------------------------------------------------

    @property
    def settings(self) -> RunSettings:
        return self._settings

    def apply_settings(self, settings: RunSettings) -> None:
        """Use `settings` from now on: the run limiter's cap and the lanes' depth change at once
        (lowering either lets what already holds a slot or waits on a lane finish); the other
        limits apply from their next use (run limits to runs that start later)."""
        self.limiter.limit = settings.max_concurrent_runs
        self.lanes.max_depth = settings.lane_depth
        self._settings = settings

    def _current(self) -> RunSettings:
        return self._settings

    def _directory(self) -> AgentDirectory:
        return self.directory

    def join_cluster(self, ownership: Ownership, remote: RemoteOwners) -> None:
        """Run as one node of a cluster (before `start`): sessions are owned by one node at a
        time, each write is fenced, inputs for a session owned elsewhere go to its owner
        (`sessions.placement`)."""
        self.store.database.fence = ownership
        self._inputs.poll_s = 0.5  # a run on another node settles its inputs there
        self.placement = Placement(
            self.store,
            self.journal,
            ownership,
            lives=self._lives,
            runs=self._runs,
            queue=self._queue,
            lanes=self.lanes,
            default_mode=self._default_mode,
            remote=remote,
        )

    async def _default_mode(self, session_id: str) -> str:
        session = await self.get(session_id=session_id)
        return session.queue_mode or self.directory.profile(session.agent_id).queue_mode

    def _refused(self, item: JournalItem, error: BaseException) -> None:
        """A commit the store refused: a fenced one means another node took the session."""
        if isinstance(error, Fenced) and self.placement is not None:
            self.placement.lost(error.session_id)
            self.contexts.drop(error.session_id)

    def _committed(self, items: list[JournalItem]) -> None:
        """Entries the journal has committed reach the cached contexts."""
        for item in items:
            if item.entries:
                self.contexts.committed(item.session_id, item.entries)

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the journal, close what a crash left open, run the inputs that were accepted
        and never started."""
        await self.journal.start()
        if self.placement is not None:
            # In a cluster, recovery is per session, by whichever node takes it (`sweep`).
            self._runs.accepting = True
            self._lives.start()
            return
        pending = await recover(self.store, self.journal)
        self._runs.accepting = True
        for session_id, inputs in pending.items():
            try:
                await self._runs.resume(session_id, inputs)
            except SessionsError as exc:
                keys = [i.idempotency_key for i in inputs]
                await self._inputs.settle(keys, InputStatus.REJECTED, reason=str(exc))
        self._lives.start()

    async def aclose(self, *, grace_s: float | None = None) -> None:
        """Graceful stop: refuse new inputs, give active runs `grace_s` (default
        `shutdown_grace_s`) to end, abort the rest with `gateway_shutdown`, flush the event log.
        Inputs that have not started stay queued and run after the next start. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._runs.accepting = False
        await self._lives.aclose()
        self._queue.cancel_timers()
        await self._runs.aclose(self._settings.shutdown_grace_s if grace_s is None else grace_s)
        self._inputs.close()
        await self.journal.aclose()
        if self.placement is not None:
            try:  # others take the sessions (and their waiting inputs) at once
                await self.placement.ownership.release()
            except SessionsError as exc:
                log.warning("could not release this node's sessions", error=str(exc))

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
        record = await self.store.tree.get_session_by_key(key)
        if record is not None:
            return record
        agent = agent_id or agent_from_key(key) or "main"
        profile = self.directory.profile(agent)
        try:
            return await self.store.tree.create_session(
                agent_id=agent,
                key=key,
                kind=kind or kind_from_key(key),
                queue_mode=profile.queue_mode,
                origin=origin,
            )
        except SessionsError:
            existing = await self.store.tree.get_session_by_key(key)
            if existing is None:
                raise
            return existing

    async def get(self, *, key: str | None = None, session_id: str | None = None) -> SessionRecord:
        """The session by id or key; raise NotFound."""
        record = None
        if session_id:
            record = await self.store.tree.get_session(session_id)
        elif key:
            record = await self.store.tree.get_session_by_key(key)
        if record is None:
            raise NotFound(f"unknown session: {key or session_id}")
        return record

    def active_run_ids(self, session_id: str) -> list[str]:
        live = self._lives.get(session_id)
        if live is None or live.run is None:
            return []
        return [live.run.run_id]

    def in_flight(self, session_id: str) -> dict[str, Any] | None:
        """The active run and the text streamed so far (for `chat.history`)."""
        live = self._lives.get(session_id)
        if live is None or live.run is None:
            return None
        return {"runId": live.run.run_id, "text": live.run.partial_text}

    def live_count(self) -> int:
        return len(self._lives)

    def running_count(self) -> int:
        """Runs whose agent runs or whose outcome is being recorded."""
        return self._lives.running_count()

    def queue_depths(self) -> dict[str, int]:
        """Per session with any: messages waiting in the agent's queues or the collect buffer,
        plus operations on its lane."""
        out: dict[str, int] = {}
        for live in self._lives:
            depth = len(live.collect_buffer) + live.agent.pending_message_count
            if depth:
                out[live.session_id] = depth
        for sid, depth in self.lanes.depths().items():
            out[sid] = out.get(sid, 0) + depth
        return out

    def forget(self, session_id: str) -> None:
        """Drop a live session that is not busy, and the session's cached context (after delete
        or reset)."""
        live = self._lives.get(session_id)
        if live is not None:
            self._lives.forget(live)
        self.contexts.drop(session_id)

    def evict_idle(self, now: float | None = None) -> int:
        """Drop live sessions unused for `live_idle_ttl_s` that are not busy; return how many."""
        return self._lives.evict_idle(now)

    # --- inputs -------------------------------------------------------------------------------

    async def submit(
        self,
        *,
        session: SessionRecord,
        message: str | UserMessage,
        idempotency_key: str,
        queue_mode: str | None = None,
        source: dict[str, Any] | None = None,
        claim: InputClaim | None = None,
    ) -> SubmitResult:
        """Record an inbound message, then act on it. Never runs the same key twice: a key seen
        before answers `in_flight` or its stored outcome. `claim` commits with the input or not
        at all (`sessions.input_ledger.InputClaim`); what it raises reaches the caller.

        Raise StoreUnavailable while the manager is not accepting (starting or stopping),
        LaneFull when the session has too many operations waiting, InvalidRequest for an unknown
        queue mode.
        """
        if not self._runs.accepting:
            raise StoreUnavailable("the gateway is not accepting messages right now", retry_after_ms=2000)
        if queue_mode is not None and queue_mode not in QUEUE_MODES:
            raise InvalidRequest(f"queueMode must be one of {', '.join(QUEUE_MODES)}")
        if self.lanes.depth(session.id) >= self._settings.lane_depth:
            existing = await self.store.inputs.get(idempotency_key)
            if existing is not None:
                return await self._inputs.repeat(existing, session)
            raise LaneFull("this session has too many operations waiting", retry_after_ms=1000)
        mode = queue_mode or session.queue_mode or self.directory.profile(session.agent_id).queue_mode
        user = as_input(message, idempotency_key)
        placement = self.placement
        reserved = placement is not None and placement.reserve(idempotency_key)
        # Its own transaction, not a share of the journal's next commit: while the database is
        # locked by another program, the sender must hear UNAVAILABLE (the journal would wait).
        try:
            record, created = await self.store.inputs.record(
                idempotency_key,
                session_id=session.id,
                payload=user.dump(),
                source=source,
                queue_mode=mode,
                status=InputStatus.QUEUED,
                run_id=idempotency_key,
                claim=claim,
            )
        except BaseException:
            if reserved and placement is not None:
                placement.unreserve(idempotency_key)
            raise
        if not created:
            if reserved and placement is not None:
                placement.unreserve(idempotency_key)
            return await self._inputs.repeat(record, session)
        if placement is not None:
            owner = await placement.route(session.id)
            if owner is not None:
                placement.unreserve(idempotency_key)
                placement.remote.wake(owner, session.id, idempotency_key)
                return SubmitResult(run_id=idempotency_key, status="started", session=session)
        live = await self._lives.load(session.id)
        disposition = await self._queue.dispatch(live, user, mode)
        return SubmitResult(
            run_id=idempotency_key, status="started", session=live.record, disposition=disposition
        )

    async def accept_answer(
        self,
        *,
        session: SessionRecord,
        message: str | UserMessage,
        idempotency_key: str,
        source: dict[str, Any] | None = None,
    ) -> SubmitResult:
        """Record an inbound message the caller answers itself instead of the agent (a chat
        command), before the sender is answered. `started` obliges the caller to `answer` it
        once; a key seen before answers `in_flight` or its stored outcome (`sessions.answers`).
        Raise StoreUnavailable while the manager is not accepting."""
        if not self._runs.accepting:
            raise StoreUnavailable("the gateway is not accepting messages right now", retry_after_ms=2000)
        return await self._answers.accept(
            session=session, message=message, idempotency_key=idempotency_key, source=source
        )

    async def answer(
        self,
        idempotency_key: str,
        *,
        session_id: str,
        text: str,
        session_key: str | None = None,
        duration_ms: int = 0,
    ) -> None:
        """Publish the reply to a message `accept_answer` started, as a run of `session_id`
        (under `session_key`, the key the message was sent to, when given). Raise NotFound for
        an unknown input or session."""
        await self._answers.reply(
            idempotency_key,
            session_id=session_id,
            text=text,
            session_key=session_key,
            duration_ms=duration_ms,
        )

    async def wait_run(self, run_id: str, timeout_s: float | None = None) -> dict[str, Any] | None:
        """Wait until the input `run_id` (or the run of that id) has its outcome and return the
        run's stored result (`status`: ok, error or aborted). None on timeout, for an unknown id,
        or when the manager stops first."""
        return await self._inputs.wait(run_id, timeout_s)

    # --- operations that reach the running agent at once --------------------------------------

    async def abort(
        self,
        session_id: str,
        *,
        reason: TerminationReason = TerminationReason.ABORTED,
        run_id: str | None = None,
    ) -> list[str]:
        """Abort the session's active run (only if it is `run_id`, when given) and its sub-agent
        sessions' runs. Returns the ids of the runs asked to stop (each records its end as
        usual)."""
        if self.placement is not None and not self.placement.ownership.owns(session_id):
            return await self.placement.abort_remote(session_id, reason, run_id)
        live = self._lives.get(session_id)
        if live is None or live.run is None or (run_id is not None and live.run.run_id != run_id):
            return []
        return abort_tree(live, reason, self._lives)

    # --- history-changing operations (on the lane) --------------------------------------------

    async def on_lane(self, session_id: str, op: Callable[[], Awaitable[T]]) -> T:
        """Run `op` on the session's lane (after its runs and other operations). In a cluster,
        this node first becomes the session's owner (`Placement.acquire`)."""
        if self.placement is not None:
            await self.placement.acquire(session_id)
        return await self.lanes.lane(session_id).run(op)

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
            live = await self._lives.load(session.id)
            payloads = [MessageCompleted(message_id=entry_id, message=message.dump())]
            await self.journal.commit(
                JournalItem(
                    session.id,
                    entries=[NewEntry(kind="message", payload=message.dump(), id=entry_id)],
                    events=live.number(payloads, None),
                )
            )

        await self.on_lane(session_id, op)
        return entry_id

    async def compact(self, session_id: str) -> compaction.CompactionResult:
        """Compact the session's history now (on its lane). Raise CompactionError when there is
        not enough history or the summary fails, NotFound for an unknown session."""
        session = await self.get(session_id=session_id)

        async def op() -> compaction.CompactionResult:
            profile = self.directory.profile(session.agent_id)
            model, error = model_for(self.directory, session, profile)
            if error is not None:
                raise compaction.CompactionError(error)
            return await self._compactor.compact(session, model)

        return await self.on_lane(session_id, op)

    # --- notifications ------------------------------------------------------------------------

    def _session_changed(self, session_id: str, reason: str) -> None:
        notify = getattr(self.publisher, "session_changed", None)
        if callable(notify):
            try:
                notify(session_id, reason)
            except Exception:
                log.exception("session change notification failed", session_id=session_id, reason=reason)
