"""Driving the agent of one run, and recording how the run ended.

`RunDriver` is the agent's event sink for one run (completed messages become entries and every
event a numbered session event, through the journal), guards the model stream
(`sessions.stream_guard`: an abort always ends it, even when a provider ignores the signal),
watches the run's limits (`max_duration`, `idle_timeout`, and a hard stop `abort_grace_s` after
any abort) and records how the run ended (`finish`). Deciding when a run happens, the input
ledger and the run records belong to `sessions.runs`.

The tasks a run starts (the prompt, the watchdog, stream pumps) end before `RunDriver.drive`
returns.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import structlog

from agent_core import (
    AbortSignal,
    AgentEndEvent,
    AgentEvent,
    AgentMessage,
    AgentStartEvent,
    AgentTool,
    AssistantMessage,
    AssistantMessageEventStream,
    Context,
    MessageEndEvent,
    MessageStartEvent,
    MessageUpdateEvent,
    Model,
    StreamFn,
    StreamOptions,
    TextDeltaEvent,
    ThinkingLevel,
    ToolResultMessage,
    text_of,
)
from agent_core.agent_types import RefreshTools
from agent_core.messages import tool_calls_of
from sessions.context import convert_to_llm
from sessions.event_payloads import EventPayload, MessageCompleted, StatusChanged
from sessions.ids import new_id
from sessions.input_message import input_keys_of
from sessions.journal import Journal, JournalItem
from sessions.live import LiveSession, RunPhase, RunState
from sessions.profiles import RunSettings
from sessions.recovery import cut_off_messages
from sessions.schema import RunStatus, SessionStatus
from sessions.store import ExtraWrite, NewEntry
from sessions.stream_guard import STREAM_ABORTED_TEXT, error_stream, guarded_stream
from sessions.termination import TerminationReason

__all__ = ["RunDriver", "RunOutcome", "RunSetup"]

log = structlog.get_logger("sessions.run_driver")


class RunOutcome(msgspec.Struct, frozen=True, dict=True):
    """How a run ended: what its run record, its session and its inputs' waiters get."""

    termination_reason: TerminationReason
    session_status: SessionStatus
    result: dict[str, Any]

    @property
    def run_status(self) -> RunStatus:
        """The run record's status: `done`, `error`, `aborted` or `interrupted`."""
        return self.termination_reason.run_status

    @property
    def error(self) -> str | None:
        value = self.result.get("errorMessage")
        return value if isinstance(value, str) else None


class RunSetup(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    """Everything the agent needs for one run."""

    system_prompt: str
    model: Model
    thinking_level: ThinkingLevel
    tools: list[AgentTool]
    context: list[AgentMessage]
    model_error: str | None = None
    refresh_tools: RefreshTools | None = None
    """Asked before each later turn of the run (see `AgentOptions.refresh_tools`)."""


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
        agent.options.refresh_tools = setup.refresh_tools
        agent.state.messages = setup.context
        agent.options.stream.session_id = self.live.session_id
        agent.options.convert_to_llm = convert_to_llm
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
            # The next run starts from the context cache (within its byte budget) or the database:
            # an idle live session must not hold another copy of its context until evicted.
            agent.state.messages = []
            agent.state.tools = []
            agent.options.refresh_tools = None
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
                self.live.abort(TerminationReason.MAX_DURATION)
            elif run.awaiting_model and now - run.last_activity > settings.idle_timeout_s:
                log.warning("model idle timeout", run_id=run.run_id, idle_s=settings.idle_timeout_s)
                self.live.abort(TerminationReason.IDLE_TIMEOUT)

    def _stream(self, model: Model, context: Context, options: StreamOptions) -> AssistantMessageEventStream:
        run = self.run
        run.awaiting_model = True
        run.touch()
        if self._model_error is not None:
            return error_stream(model, self._model_error)
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
            run.partial_chunks = []
            run.partial_message_id = run.translator.message_id
        elif isinstance(event, MessageUpdateEvent) and isinstance(
            event.assistant_message_event, TextDeltaEvent
        ):
            run.partial_chunks.append(event.assistant_message_event.delta)
        elif isinstance(event, MessageEndEvent):
            message = event.message
            completed = drafts[0]
            entry_id = completed.message_id if isinstance(completed, MessageCompleted) else new_id()
            entries.append(NewEntry(kind="message", payload=message.dump(), id=entry_id))
            self._completed(message)
            keys = [k for k in input_keys_of(message) if k not in run.input_keys]
            if keys:
                # A steering or follow-up message joined the run.
                run.input_keys.extend(keys)
                await self._on_inputs_running(keys, run.run_id)
        if not drafts and not entries:
            return
        item = JournalItem(live.session_id, entries=entries, events=live.number(drafts, run.run_id))
        if isinstance(event, MessageEndEvent) and not _is_prompt(event.message):
            # Durable before the loop goes on: tools run only once their call is stored, and a
            # store that refuses the session's writes (deleted, taken by another node) stops the
            # run before its next step.
            await self._journal.commit(item)
        else:
            # Committed in order with everything after it: a prompt's entry goes to the database
            # while the model is asked, not before.
            await self._journal.append(item)

    def _completed(self, message: AgentMessage) -> None:
        run = self.run
        run.last_message = message
        if isinstance(message, AssistantMessage):
            run.awaiting_model = False
            run.partial_chunks = []
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
        entries: list[NewEntry] = []
        drafts: list[EventPayload] = []
        for index, message in enumerate(messages):
            entry_id = last_id if last_id is not None and index == len(messages) - 1 else new_id()
            entries.append(NewEntry(kind="message", payload=message.dump(), id=entry_id))
            drafts.append(MessageCompleted(message_id=entry_id, message=message.dump()))
            self._completed(message)
            if isinstance(message, AssistantMessage):
                run.translator.last_assistant = message
        await self._journal.commit(
            JournalItem(self.live.session_id, entries=entries, events=self.live.number(drafts, run.run_id))
        )

    # --- ending -------------------------------------------------------------------------------

    async def finish(self, record: Callable[[RunOutcome], ExtraWrite] | None = None) -> RunOutcome:
        """Record the end of the run (closing a hard-stopped reply, `agent.finished`, the
        session's status) and return its outcome; `record(outcome)` gives the writes that commit
        with it (the run record's, the inputs')."""
        run = self.run
        if run.phase is RunPhase.RUNNING:
            run.advance(RunPhase.FINISHING)
        if run.hard_stopped:
            await self._close_cut_off()
        reason = _termination_reason(run)
        error = _error_text(run, reason, self._settings)
        # A run the gateway's stop cut short leaves its session interrupted.
        interrupted = reason.run_status is RunStatus.INTERRUPTED
        session_status = SessionStatus.INTERRUPTED if interrupted else SessionStatus.IDLE
        drafts: list[EventPayload] = [
            run.translator.finished(reason, error_message=error),
            StatusChanged(session_status),
        ]
        last = run.last_assistant
        result: dict[str, Any] = {
            "runId": run.run_id,
            "status": reason.outcome.value,
            "terminationReason": reason.value,
            "stopReason": last.stop_reason if last is not None else None,
            "text": text_of(last) if last is not None else "",
            "usage": {**run.usage.dump(), "cost": run.usage.cost.total},
        }
        failure = error or (last.error_message if last is not None else None)
        if failure:
            result["errorMessage"] = failure
        outcome = RunOutcome(reason, session_status, result)
        await self._journal.commit(
            JournalItem(
                self.live.session_id,
                events=self.live.number(drafts, run.run_id),
                session_fields={"status": session_status.value},
                extra=None if record is None else record(outcome),
            )
        )
        return outcome

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


def _is_prompt(message: AgentMessage) -> bool:
    """Whether `message` is a prompt (a user's message: the run's own, or one that joined it).
    The loop's next step with it is asking the model, which changes nothing outside the gateway,
    so its entry need not be durable first; the journal's order makes it durable before anything
    the run records after it. Every other completed message is committed before the loop goes on."""
    return message.role == "user"


def _termination_reason(run: RunState) -> TerminationReason:
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
        return TerminationReason.ERROR
    if last is not None and last.stop_reason == "aborted":
        return TerminationReason.ABORTED
    # Also when an abort came too late to change anything: the run completed.
    return TerminationReason.NO_TOOL_CALLS


def _error_text(run: RunState, reason: TerminationReason, settings: RunSettings) -> str | None:
    if reason is TerminationReason.MAX_DURATION:
        return f"The run reached its maximum duration of {settings.max_duration_s:g} s and was stopped."
    if reason is TerminationReason.IDLE_TIMEOUT:
        return f"The model sent nothing for {settings.idle_timeout_s:g} s; the run was stopped."
    if reason is TerminationReason.GATEWAY_SHUTDOWN:
        return "The gateway shut down during the run."
    if run.failure is not None:
        return run.failure
    return None
