"""Closing what a crash left open.

Runs still marked `running` when the daemon starts were cut off. For each: every message the event
log shows completed is already a transcript entry (they commit together, in order); tool calls of
the last assistant message that never got a result get an error result (so the transcript stays
valid for every provider); the reply that was being streamed becomes an assistant entry with
`stopReason: "aborted"` holding the text streamed so far (recovered from the event log); the run,
its started inputs and the session are marked `interrupted`. The run is not repeated (its tools
may have had side effects). Inputs that were accepted but had not started are returned so the
manager can run them.

Recovery is idempotent: a run whose `agent.finished` event is already in the log (the crash hit
between recording the end and closing the run record) is only closed, never given a second
cut-off reply.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import structlog

from agent_core import (
    AgentMessage,
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    parse_message,
)
from sessions.event_payloads import AgentFinished, EventPayload, MessageCompleted, StatusChanged
from sessions.ids import new_id
from sessions.input_ledger import WAITING_INPUT_STATUSES
from sessions.journal import Journal, JournalItem
from sessions.records import EntryRecord, EventRecord, InputRecord, RunRecord, SessionRecord
from sessions.schema import RunStatus, SessionStatus
from sessions.session_events import SessionEvent, open_reply
from sessions.store import NewEntry, Store
from sessions.termination import TerminationReason

__all__ = [
    "INTERRUPTED_TEXT",
    "ORPHANED_TOOL_TEXT",
    "cut_off_messages",
    "orphaned_tool_calls",
    "recover",
    "recover_session",
]

log = structlog.get_logger("sessions.recovery")

INTERRUPTED_TEXT = "The gateway stopped during the run; the reply was cut off here."
ORPHANED_TOOL_TEXT = "The run stopped before this tool call finished; its outcome is unknown."
ModelRef = tuple[str, str, str]
"""(api, provider, model id) of an assistant message."""


def orphaned_tool_calls(messages: Sequence[AgentMessage]) -> list[ToolCall]:
    """Tool calls of the last assistant message that have no result after it (none when a user
    message came after it)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AssistantMessage):
            answered = {m.tool_call_id for m in messages[index + 1 :] if isinstance(m, ToolResultMessage)}
            return [b for b in message.content if isinstance(b, ToolCall) and b.id not in answered]
        if message.role == "user":
            return []
    return []


def cut_off_messages(
    orphans: Sequence[ToolCall], partial_text: str, model: ModelRef, error_text: str
) -> list[AgentMessage]:
    """What closes a run that was cut off: an error result for every unanswered tool call, then an
    assistant message with stopReason "aborted" holding the text streamed so far."""
    out: list[AgentMessage] = [
        ToolResultMessage(
            tool_call_id=call.id,
            tool_name=call.name,
            content=[TextContent(text=ORPHANED_TOOL_TEXT)],
            is_error=True,
        )
        for call in orphans
    ]
    api, provider, model_id = model
    out.append(
        AssistantMessage(
            content=[TextContent(text=partial_text)] if partial_text else [],
            api=api,
            provider=provider,
            model=model_id,
            stop_reason="aborted",
            error_message=error_text,
        )
    )
    return out


async def recover(store: Store, journal: Journal) -> dict[str, list[InputRecord]]:
    """Close every run a crash left open and return the inputs to run now, per session, in
    arrival order. The journal must be started."""
    still_open: set[str] = set()
    for run in await store.runs.running():
        try:
            await _close_run(store, journal, run)
        except Exception:
            still_open.add(run.session_id)
            log.exception("could not close an interrupted run", run_id=run.id)
    await _close_stale_running_inputs(store)
    await _interrupt_stale_sessions(store, journal, skip=still_open)
    pending: dict[str, list[InputRecord]] = defaultdict(list)
    for record in await store.inputs.with_status(WAITING_INPUT_STATUSES):
        pending[record.session_id].append(record)
    return dict(pending)


async def recover_session(store: Store, journal: Journal, session_id: str) -> list[InputRecord]:
    """`recover` for one session, by the node that has just taken it over from one that died or
    left (`sessions.ownership`): close its runs left open, then return its inputs to run now, in
    arrival order. Idempotent like `recover`."""
    for run in await store.runs.running(session_id):
        await _close_run(store, journal, run)
    await _close_stale_running_inputs(store, session_id)
    session = await store.tree.get_session(session_id)
    if session is not None and session.status == SessionStatus.RUNNING:
        await _mark_interrupted(journal, session)
    return await store.inputs.with_status(WAITING_INPUT_STATUSES, session_id=session_id)


async def _close_run(store: Store, journal: Journal, run: RunRecord) -> None:
    session = await store.tree.get_session(run.session_id)
    if session is None:
        await store.runs.finish(
            run.id, status=RunStatus.INTERRUPTED, termination_reason=TerminationReason.INTERRUPTED
        )
        return
    events = await _run_events(store, session.id, run.id)
    finished = next((e for e in reversed(events) if e.type == "agent.finished"), None)
    if finished is not None:
        # The end was recorded; only the run record missed it.
        reason = (
            TerminationReason.parse(finished.payload.get("terminationReason"))
            or TerminationReason.INTERRUPTED
        )
        status = reason.run_status
        error = finished.payload.get("errorMessage")
        result = {"runId": run.id, "status": reason.outcome.value, "terminationReason": reason.value}
        if error:
            result["errorMessage"] = error
        await store.runs.finish(run.id, status=status, termination_reason=reason, error=error, result=result)
        final = "done" if status is RunStatus.DONE else "interrupted"
        await _finish_started_inputs(store, session.id, run.id, final)
        return
    await _append_cut_off(store, journal, session, run.id, events)
    await store.runs.finish(
        run.id,
        status=RunStatus.INTERRUPTED,
        termination_reason=TerminationReason.INTERRUPTED,
        error=INTERRUPTED_TEXT,
        result={
            "runId": run.id,
            "status": TerminationReason.INTERRUPTED.outcome.value,
            "terminationReason": TerminationReason.INTERRUPTED.value,
            "errorMessage": INTERRUPTED_TEXT,
        },
    )
    await _finish_started_inputs(store, session.id, run.id, "interrupted")
    log.warning("closed a run interrupted by a gateway stop", run_id=run.id, session_id=session.id)


async def _append_cut_off(
    store: Store, journal: Journal, session: SessionRecord, run_id: str, events: list[EventRecord]
) -> None:
    partial_text, partial_id = open_reply(events)
    entries = await store.transcript.read(session.id)
    messages = _messages(entries)
    closing = cut_off_messages(
        orphaned_tool_calls(messages), partial_text, _last_model(entries, session), INTERRUPTED_TEXT
    )
    ids = [new_id() for _ in closing[:-1]] + [partial_id or new_id()]
    payloads: list[EventPayload] = [
        MessageCompleted(message_id=entry_id, message=message.dump())
        for entry_id, message in zip(ids, closing, strict=True)
    ]
    turns, tokens, duration_ms = _run_totals(events)
    payloads.append(
        AgentFinished(
            termination_reason=TerminationReason.INTERRUPTED,
            total_turns=turns,
            total_tokens=tokens,
            duration_ms=duration_ms,
            stop_reason="aborted",
            error_message=INTERRUPTED_TEXT,
        )
    )
    payloads.append(StatusChanged(SessionStatus.INTERRUPTED))
    key = session.keys[0] if session.keys else None
    numbered = [
        SessionEvent(session.id, session.last_seq + offset, payload, run_id=run_id, session_key=key)
        for offset, payload in enumerate(payloads, start=1)
    ]
    if session.status == SessionStatus.IDLE:
        # The crash hit between creating the run and marking the session running; idle cannot
        # move to interrupted directly.
        await journal.append(JournalItem(session.id, session_fields={"status": "running"}))
    await journal.commit(
        JournalItem(
            session.id,
            entries=[_entry(entry_id, message) for entry_id, message in zip(ids, closing, strict=True)],
            events=numbered,
            session_fields={"status": "interrupted"},
        )
    )


def _run_totals(events: list[EventRecord]) -> tuple[int, int, int]:
    """The totals `agent.finished` carries (clients need them to render the end of a run), as far
    as the run's logged events tell: turns started, tokens of its completed assistant messages,
    and the time in milliseconds from its first event to its last."""
    tokens = 0
    for event in events:
        message = event.payload.get("message") if event.type == "message.completed" else None
        if isinstance(message, dict) and message.get("role") == "assistant":
            usage = message.get("usage")
            total = usage.get("totalTokens") if isinstance(usage, dict) else None
            if isinstance(total, int):
                tokens += total
    stamps = [ts for ts in (event.payload.get("ts") for event in events) if isinstance(ts, int)]
    return (
        sum(1 for event in events if event.type == "turn.started"),
        tokens,
        max(stamps) - min(stamps) if stamps else 0,
    )


def _entry(entry_id: str, message: AgentMessage) -> NewEntry:
    return NewEntry(kind="message", payload=message.dump(), id=entry_id)


async def _finish_started_inputs(store: Store, session_id: str, run_id: str, status: str) -> None:
    """Inputs the run had started get the run's outcome; queued ones never reached the model
    and stay resumable."""
    for record in await store.inputs.with_status(["running"], session_id=session_id):
        if record.run_id == run_id:
            reason = "the gateway stopped during the run" if status == "interrupted" else None
            await store.inputs.update(record.idempotency_key, status=status, reason=reason)


async def _close_stale_running_inputs(store: Store, session_id: str | None = None) -> None:
    """Inputs marked running (of one session, when given) whose run already ended (the crash hit
    before they were settled)."""
    for record in await store.inputs.with_status(["running"], session_id=session_id):
        run = await store.runs.get(record.run_id) if record.run_id else None
        if run is None:
            # Never reached a run: run it now.
            await store.inputs.update(record.idempotency_key, status="queued")
        elif run.status is not RunStatus.RUNNING:
            final = "interrupted" if run.status is RunStatus.INTERRUPTED else "done"
            await store.inputs.update(record.idempotency_key, status=final)


async def _interrupt_stale_sessions(store: Store, journal: Journal, *, skip: set[str]) -> None:
    """Sessions still marked running with no open run (a crash between marking the session and
    recording its run, or after the run record was closed) become interrupted."""
    stale: list[SessionRecord] = []
    offset = 0
    while True:
        page, _total = await store.tree.list_sessions(status="running", limit=500, offset=offset)
        stale.extend(s for s in page if s.id not in skip)
        if len(page) < 500:
            break
        offset += len(page)
    for session in stale:
        try:
            await _mark_interrupted(journal, session)
        except Exception:
            log.exception("could not mark a stale running session interrupted", session_id=session.id)


async def _mark_interrupted(journal: Journal, session: SessionRecord) -> None:
    key = session.keys[0] if session.keys else None
    event = SessionEvent(
        session.id, session.last_seq + 1, StatusChanged(SessionStatus.INTERRUPTED), session_key=key
    )
    await journal.commit(JournalItem(session.id, events=[event], session_fields={"status": "interrupted"}))


async def _run_events(store: Store, session_id: str, run_id: str) -> list[EventRecord]:
    out: list[EventRecord] = []
    after = 0
    while True:
        batch = await store.events.read(session_id, after_seq=after, limit=2000)
        if not batch:
            return out
        out.extend(e for e in batch if e.run_id == run_id)
        after = batch[-1].seq


def _messages(entries: list[EntryRecord]) -> list[AgentMessage]:
    return [parse_message(entry.payload) for entry in entries if entry.kind == "message"]


def _last_model(entries: list[EntryRecord], session: SessionRecord) -> ModelRef:
    for entry in reversed(entries):
        if entry.kind == "message" and entry.payload.get("role") == "assistant":
            payload = entry.payload
            return (
                str(payload.get("api", "unknown")),
                str(payload.get("provider", "unknown")),
                str(payload.get("model", "unknown")),
            )
    provider, _, model_id = (session.model or "unknown/unknown").partition("/")
    return "unknown", provider, model_id or "unknown"
