"""A live session and the driving of one run.

`LiveSession` is the in-memory side of one session while it runs or was recently used. It owns
the session's `Agent` (whose queues take steering and follow-up messages at once, even while a
run waits for its turn), the next durable `seq`, and the state of its active run. It keeps no
transcript copy: each run rebuilds the agent's messages from the database, reading only the part
of the transcript the context holds (`Store.context_entries`). Keeping every idle session's
context in memory instead would cost far more memory than the rebuild costs time (a parsed message
takes several times its stored size).

`RunDriver` runs the agent for one run: it is the agent's event sink (completed messages become
entries and every event a numbered session event, through the journal), guards the model stream
(an abort always ends it, even when a provider ignores the signal), watches the run's limits
(`max_duration`, `idle_timeout`, and a hard stop `abort_grace_s` after any abort) and records how
the run ended. Deciding when a run happens, the input ledger and the run records belong to the
`SessionManager`.

Lifetimes: a `RunState` lives from the input that starts it until its outcome is recorded; the
tasks a run starts (the prompt, the watchdog, stream pumps) end before `RunDriver.drive` returns.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import structlog

from agent_core import (
    AbortSignal,
    Agent,
    AgentEndEvent,
    AgentEvent,
    AgentMessage,
    AgentStartEvent,
    AgentTool,
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
    TextDeltaEvent,
    ThinkingLevel,
    ToolResultMessage,
    Usage,
    UserMessage,
    text_of,
)
from agent_core._util import resolve
from agent_core.messages import tool_calls_of
from sessions.context import convert_to_llm
from sessions.ids import new_id
from sessions.journal import Journal, JournalItem
from sessions.profiles import RunSettings
from sessions.recovery import cut_off_messages, run_status_for
from sessions.session_events import Draft, RunTranslator, SessionEvent
from sessions.store import NewEntry, SessionRecord

__all__ = [
    "LiveSession",
    "RunDriver",
    "RunOutcome",
    "RunPhase",
    "RunState",
    "guarded_stream",
    "input_keys_of",
]

log = structlog.get_logger("sessions.live")

STREAM_ABORTED_TEXT = "Request was aborted"


class RunPhase(StrEnum):
    PENDING = "pending"
    """Accepted; waiting for the session's lane or a run slot. More prompts may join it."""
    RUNNING = "running"
    """The agent runs."""
    FINISHING = "finishing"
    """The agent is done; the outcome is being recorded."""
    DONE = "done"


_NEXT_PHASES: dict[RunPhase, frozenset[RunPhase]] = {
    RunPhase.PENDING: frozenset({RunPhase.RUNNING, RunPhase.DONE}),
    RunPhase.RUNNING: frozenset({RunPhase.FINISHING, RunPhase.DONE}),
    RunPhase.FINISHING: frozenset({RunPhase.DONE}),
    RunPhase.DONE: frozenset(),
}


def input_keys_of(message: AgentMessage) -> list[str]:
    """The idempotency keys of the inputs a user message carries (several for a merged one)."""
    extra = getattr(message, "__pydantic_extra__", None) or {}
    merged = extra.get("mergedKeys")
    if isinstance(merged, list) and merged:
        return [k for k in merged if isinstance(k, str)]
    key = extra.get("idempotencyKey")
    return [key] if isinstance(key, str) else []


@dataclass(eq=False)
class RunState:
    """One run of a live session, from acceptance to its recorded end."""

    run_id: str
    prompts: list[UserMessage]
    input_keys: list[str]
    phase: RunPhase = RunPhase.PENDING
    translator: RunTranslator = field(default_factory=RunTranslator)
    abort_reason: str | None = None
    abort_at: float | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    awaiting_model: bool = False
    last_activity: float = field(default_factory=time.monotonic)
    partial_text: str = ""
    partial_message_id: str | None = None
    last_message: AgentMessage | None = None
    last_assistant: AssistantMessage | None = None
    answered_calls: set[str] = field(default_factory=set)
    usage: Usage = field(default_factory=Usage)
    hard_stopped: bool = False
    failure: str | None = None
    pumps: set[asyncio.Task[None]] = field(default_factory=set)

    @classmethod
    def for_messages(cls, messages: Sequence[UserMessage]) -> RunState:
        keys = [k for m in messages for k in input_keys_of(m)]
        return cls(run_id=keys[0] if keys else new_id(), prompts=list(messages), input_keys=keys)

    def advance(self, to: RunPhase) -> None:
        if to not in _NEXT_PHASES[self.phase]:
            expected = " or ".join(p.value for p in RunPhase if to in _NEXT_PHASES[p])
            raise RuntimeError(
                f"run {self.run_id}: cannot go from {self.phase.value!r} to {to.value!r}; expected {expected}"
            )
        self.phase = to

    def join(self, message: UserMessage) -> None:
        """Add a prompt to a run that has not started."""
        if self.phase is not RunPhase.PENDING:
            raise RuntimeError(
                f"run {self.run_id}: prompts join only a pending run, not a {self.phase.value} one"
            )
        self.prompts.append(message)
        self.input_keys.extend(k for k in input_keys_of(message) if k not in self.input_keys)

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def add_usage(self, usage: Usage) -> None:
        total = self.usage
        total.input += usage.input
        total.output += usage.output
        total.cache_read += usage.cache_read
        total.cache_write += usage.cache_write
        total.total_tokens += usage.total_tokens
        total.cost.total += usage.cost.total


@dataclass(eq=False)
class LiveSession:
    record: SessionRecord
    next_seq: int
    agent: Agent
    run: RunState | None = None
    collect_buffer: list[UserMessage] = field(default_factory=list)
    collect_timer: asyncio.TimerHandle | None = None
    last_used: float = field(default_factory=time.monotonic)

    @property
    def session_id(self) -> str:
        return self.record.id

    @property
    def session_key(self) -> str | None:
        keys = self.record.keys
        return keys[0] if keys else None

    @property
    def busy(self) -> bool:
        """A run, or messages waiting for one: the live session must stay."""
        return self.run is not None or bool(self.collect_buffer) or self.agent.pending_message_count > 0

    def number(self, drafts: Sequence[Draft], run_id: str | None) -> list[SessionEvent]:
        """Give drafts the session's next seqs, in order. Call only from the session's lane and
        append the result to the journal before awaiting anything else."""
        out = []
        for draft in drafts:
            self.next_seq += 1
            out.append(
                SessionEvent(
                    session_id=self.record.id,
                    seq=self.next_seq,
                    name=draft.name,
                    data=draft.data,
                    run_id=run_id,
                    session_key=self.session_key,
                )
            )
        return out

    def abort(self, reason: str) -> bool:
        """Ask the active run to stop with `reason` (the first reason wins). A pending run stops
        as soon as its agent starts. False when there is no run left to abort."""
        run = self.run
        if run is None or run.phase in (RunPhase.FINISHING, RunPhase.DONE):
            return False
        if run.abort_reason is None:
            run.abort_reason = reason
            run.abort_at = time.monotonic()
        self.agent.abort(reason)
        return True


@dataclass(frozen=True)
class RunOutcome:
    termination_reason: str
    run_status: str
    """`done`, `error`, `aborted` or `interrupted` (the run record's status)."""
    session_status: str
    result: dict[str, Any]

    @property
    def error(self) -> str | None:
        value = self.result.get("errorMessage")
        return value if isinstance(value, str) else None


@dataclass(frozen=True, kw_only=True)
class RunSetup:
    """Everything the agent needs for one run."""

    system_prompt: str
    model: Model
    thinking_level: ThinkingLevel
    tools: list[AgentTool]
    context: list[AgentMessage]
    model_error: str | None = None


class RunDriver:
    """Drives the agent of `live` for `run`; see the module docstring."""

    def __init__(
        self,
        live: LiveSession,
        run: RunState,
        *,
        journal: Journal,
        settings: RunSettings,
        stream_fn: StreamFn,
        on_inputs_running: Callable[[list[str], str], Awaitable[None]],
    ) -> None:
        self.live = live
        self.run = run
        self._journal = journal
        self._settings = settings
        self._base_stream = stream_fn
        self._on_inputs_running = on_inputs_running
        self._model_error: str | None = None
        self._model: Model | None = None

    # --- running ------------------------------------------------------------------------------

    async def drive(self, setup: RunSetup) -> None:
        """Run the agent on the run's prompts until it ends, is aborted, or is stopped hard.
        Failures are recorded on the run (never raised); cancellation propagates."""
        run, agent = self.run, self.live.agent
        self._model = setup.model
        self._model_error = setup.model_error
        agent.state.system_prompt = setup.system_prompt
        agent.state.model = setup.model
        agent.state.thinking_level = setup.thinking_level
        agent.state.tools = setup.tools
        agent.state.messages = setup.context
        agent.session_id = self.live.session_id
        agent.convert_to_llm = convert_to_llm
        agent.stream_fn = self._stream
        if run.abort_reason is not None:
            run.abort_at = time.monotonic()  # the grace period starts when there is something to stop
        unsubscribe = agent.subscribe(self._sink)
        prompt = asyncio.ensure_future(agent.prompt(list(run.prompts)))
        watchdog = asyncio.create_task(self._watch(prompt), name=f"watchdog-{run.run_id}")
        try:
            await asyncio.wait({prompt})
        except asyncio.CancelledError:
            prompt.cancel()
            await asyncio.wait({prompt})
            raise
        finally:
            watchdog.cancel()
            for task in list(run.pumps):
                task.cancel()
            await asyncio.gather(watchdog, *run.pumps, return_exceptions=True)
            unsubscribe()
            # The next run rebuilds its context from the database: an idle live session must not
            # hold on to its last context (up to a context window of messages) until evicted.
            agent.state.messages = []
            agent.state.tools = []
        if prompt.cancelled():
            run.hard_stopped = True
        elif (error := prompt.exception()) is not None:
            log.error("the agent failed", run_id=run.run_id, error=str(error))
            run.failure = str(error) or type(error).__name__

    async def _watch(self, prompt: asyncio.Future[None]) -> None:
        settings, run = self._settings, self.run
        started = time.monotonic()
        step = max(
            0.005,
            min(0.25, settings.idle_timeout_s / 4, settings.max_duration_s / 4, settings.abort_grace_s / 4),
        )
        while not prompt.done():
            await asyncio.sleep(step)
            now = time.monotonic()
            if run.abort_at is not None:
                if now - run.abort_at >= settings.abort_grace_s:
                    log.warning(
                        "run did not stop after its abort; stopping it hard",
                        run_id=run.run_id,
                        reason=run.abort_reason,
                    )
                    prompt.cancel()
                    return
            elif now - started >= settings.max_duration_s:
                self.live.abort("max_duration")
            elif run.awaiting_model and now - run.last_activity > settings.idle_timeout_s:
                log.warning("model idle timeout", run_id=run.run_id, idle_s=settings.idle_timeout_s)
                self.live.abort("idle_timeout")

    def _stream(self, model: Model, context: Context, options: StreamOptions) -> AssistantMessageEventStream:
        run = self.run
        run.awaiting_model = True
        run.touch()
        if self._model_error is not None:
            return _error_stream(model, self._model_error)
        options.on_event = run.touch
        base = self._base_stream
        return guarded_stream(lambda: base(model, context, options), model, options.signal, run)

    async def _sink(self, event: AgentEvent, _signal: AbortSignal) -> None:
        run, live = self.run, self.live
        run.touch()
        if isinstance(event, AgentStartEvent) and run.abort_reason is not None:
            live.agent.abort(run.abort_reason)  # aborted while it waited for its turn
        if isinstance(event, AgentEndEvent):
            await self._store_failure(event.messages)
            return
        drafts = run.translator.translate(event)
        entries: list[NewEntry] = []
        if isinstance(event, MessageStartEvent) and event.message.role == "assistant":
            run.partial_text = ""
            run.partial_message_id = run.translator.message_id
        elif isinstance(event, MessageUpdateEvent) and isinstance(
            event.assistant_message_event, TextDeltaEvent
        ):
            run.partial_text += event.assistant_message_event.delta
        elif isinstance(event, MessageEndEvent):
            message = event.message
            entries.append(NewEntry(kind="message", payload=message.dump(), id=drafts[0].data["messageId"]))
            self._completed(message)
            keys = [k for k in input_keys_of(message) if k not in run.input_keys]
            if keys:
                # A steering or follow-up message joined the run.
                run.input_keys.extend(keys)
                await self._on_inputs_running(keys, run.run_id)
        if not drafts and not entries:
            return
        item = JournalItem(live.session_id, entries=entries, events=live.number(drafts, run.run_id))
        if entries:
            # Durable before the loop acts on it: tools run only once their call is stored.
            await self._journal.commit(item)
        else:
            await self._journal.append(item)

    def _completed(self, message: AgentMessage) -> None:
        run = self.run
        run.last_message = message
        if isinstance(message, AssistantMessage):
            run.awaiting_model = False
            run.partial_text = ""
            run.partial_message_id = None
            run.last_assistant = message
            run.add_usage(message.usage)
        elif isinstance(message, ToolResultMessage):
            run.answered_calls.add(message.tool_call_id)

    async def _store_failure(self, messages: list[AgentMessage]) -> None:
        """The agent's own failure message (a hook or the stream function raised) never went
        through message_end; store it so the transcript shows the failure."""
        last = messages[-1] if messages else None
        if not isinstance(last, AssistantMessage) or last is self.run.last_message:
            return
        await self._store_closing([last])

    async def _store_closing(self, messages: list[AgentMessage], *, last_id: str | None = None) -> None:
        """Store messages the loop never completed; `last_id` names the last one (the message a
        client saw start streaming)."""
        run = self.run
        entries, drafts = [], []
        for index, message in enumerate(messages):
            entry_id = last_id if last_id is not None and index == len(messages) - 1 else new_id()
            entries.append(NewEntry(kind="message", payload=message.dump(), id=entry_id))
            drafts.append(Draft("message.completed", {"messageId": entry_id, "message": message.dump()}))
            self._completed(message)
            if isinstance(message, AssistantMessage):
                run.translator.last_assistant = message
        await self._journal.commit(
            JournalItem(self.live.session_id, entries=entries, events=self.live.number(drafts, run.run_id))
        )

    # --- ending -------------------------------------------------------------------------------

    async def finish(self) -> RunOutcome:
        """Record the end of the run (closing a hard-stopped reply, `agent.finished`, the
        session's status) and return the outcome for the run record."""
        run = self.run
        if run.phase is RunPhase.RUNNING:
            run.advance(RunPhase.FINISHING)
        if run.hard_stopped:
            await self._close_cut_off()
        reason = _termination_reason(run)
        error = _error_text(run, reason, self._settings)
        session_status = "interrupted" if reason == "gateway_shutdown" else "idle"
        drafts = [
            run.translator.finished(reason, error_message=error),
            Draft("status.changed", {"status": session_status}),
        ]
        await self._journal.commit(
            JournalItem(
                self.live.session_id,
                events=self.live.number(drafts, run.run_id),
                session_fields={"status": session_status},
            )
        )
        status = run_status_for(reason)
        last = run.last_assistant
        result: dict[str, Any] = {
            "runId": run.run_id,
            "status": {"done": "ok", "error": "error"}.get(status, "aborted"),
            "terminationReason": reason,
            "stopReason": last.stop_reason if last is not None else None,
            "text": text_of(last) if last is not None else "",
            "usage": {**run.usage.dump(), "cost": run.usage.cost.total},
        }
        error = error or (last.error_message if last is not None else None)
        if error:
            result["errorMessage"] = error
        return RunOutcome(reason, status, session_status, result)

    async def _close_cut_off(self) -> None:
        run = self.run
        orphans = []
        if run.last_assistant is not None:
            orphans = [c for c in tool_calls_of(run.last_assistant) if c.id not in run.answered_calls]
        model = self._model
        ref = (
            (model.api, model.provider, model.id) if model is not None else ("unknown", "unknown", "unknown")
        )
        text = _error_text(run, _termination_reason(run), self._settings) or STREAM_ABORTED_TEXT
        closing = cut_off_messages(orphans, run.partial_text, ref, text)
        await self._store_closing(closing, last_id=run.partial_message_id)


def _termination_reason(run: RunState) -> str:
    last = run.last_assistant
    cut_short = (
        run.hard_stopped
        or run.failure is not None
        or last is None
        or last.stop_reason in ("error", "aborted")
    )
    if run.abort_reason is not None and cut_short:
        return run.abort_reason
    if run.failure is not None or (last is not None and last.stop_reason == "error"):
        return "error"
    if last is not None and last.stop_reason == "aborted":
        return "aborted"
    # Also when an abort came too late to change anything: the run completed.
    return "no_tool_calls"


def _error_text(run: RunState, reason: str, settings: RunSettings) -> str | None:
    if reason == "max_duration":
        return f"The run reached its maximum duration of {settings.max_duration_s:g} s and was stopped."
    if reason == "idle_timeout":
        return f"The model sent nothing for {settings.idle_timeout_s:g} s; the run was stopped."
    if reason == "gateway_shutdown":
        return "The gateway shut down during the run."
    if run.failure is not None:
        return run.failure
    return None


# --- the model stream guard ---------------------------------------------------------------------


def guarded_stream(
    call: Callable[[], AssistantMessageEventStream | Awaitable[AssistantMessageEventStream]],
    model: Model,
    signal: AbortSignal | None,
    run: RunState,
) -> AssistantMessageEventStream:
    """The stream of `call()`, forwarded event by event, that ends with an `aborted` error (the
    partial message streamed so far) as soon as `signal` aborts, whether or not the provider
    notices, and with an `error` when the provider raises. Each event touches the run (idle
    watchdog). The forwarding task belongs to `run.pumps` and ends with the stream."""
    outer = AssistantMessageEventStream()
    last: list[AssistantMessage] = []

    def end_with(reason: str, text: str) -> None:
        if outer.done:
            return
        base = last[-1] if last else AssistantMessage(api=model.api, provider=model.provider, model=model.id)
        final = base.model_copy(update={"stop_reason": reason, "error_message": text})
        outer.push(
            ErrorEvent(reason="aborted", error=final)
            if reason == "aborted"
            else ErrorEvent(reason="error", error=final)
        )
        outer.end(final)

    async def pump() -> None:
        try:
            inner = await resolve(call())
            async for event in inner:
                run.touch()
                partial = getattr(event, "partial", None)
                if isinstance(partial, AssistantMessage):
                    last.append(partial)
                    del last[:-1]
                outer.push(event)
                if outer.done:
                    return
            if not outer.done:
                outer.end(await inner.result())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            end_with("error", str(exc) or type(exc).__name__)

    def on_abort() -> None:
        end_with("aborted", STREAM_ABORTED_TEXT)
        task.cancel()

    task = asyncio.create_task(pump(), name=f"stream-{run.run_id}")
    run.pumps.add(task)
    task.add_done_callback(run.pumps.discard)
    if signal is not None:
        remove = signal.add_listener(on_abort)
        task.add_done_callback(lambda _: remove())
    return outer


def _error_stream(model: Model, message: str) -> AssistantMessageEventStream:
    stream = AssistantMessageEventStream()
    final = AssistantMessage(
        api=model.api, provider=model.provider, model=model.id, stop_reason="error", error_message=message
    )
    stream.push(ErrorEvent(reason="error", error=final))
    stream.end(final)
    return stream
