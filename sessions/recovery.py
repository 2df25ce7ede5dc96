"""Closing what a crash left open.

Runs still marked `running` when the daemon starts were cut off. For each: the completed messages
are already transcript entries (a message is committed before the loop acts on it); tool calls of
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
from typing import Any

import structlog

from agent_core import (
    AgentMessage,
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    parse_message,
)
from sessions.ids import new_id
from sessions.journal import Journal, JournalItem
from sessions.records import EntryRecord, EventRecord, InputRecord, RunRecord, SessionRecord
from sessions.schema import SessionStatus
from sessions.session_events import SessionEvent, open_reply
from sessions.store import NewEntry, Store

__all__ = [
    "INTERRUPTED_TEXT",
    "ORPHANED_TOOL_TEXT",
    "RESUMABLE_INPUTS",
    "cut_off_messages",
    "orphaned_tool_calls",
    "recover",
    "run_status_for",
]

log = structlog.get_logger("sessions.recovery")

INTERRUPTED_TEXT = "The gateway stopped during the run; the reply was cut off here."
ORPHANED_TOOL_TEXT = "The run stopped before this tool call finished; its outcome is unknown."
RESUMABLE_INPUTS = ("queued", "steered", "followup")
ModelRef = tuple[str, str, str]
"""(api, provider, model id) of an assistant message."""


def run_status_for(termination_reason: str) -> str:
    """The run record's status for a termination reason."""
    if termination_reason == "no_tool_calls":
        return "done"
    if termination_reason == "error":
        return "error"
    if termination_reason in ("gateway_shutdown", "interrupted"):
        return "interrupted"
    return "aborted"


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
    for run in await store.running_runs():
        try:
            await _close_run(store, journal, run)
        except Exception:
            still_open.add(run.session_id)
            log.exception("could not close an interrupted run", run_id=run.id)
    await _close_stale_running_inputs(store)
    await _interrupt_stale_sessions(store, journal, skip=still_open)
    pending: dict[str, list[InputRecord]] = defaultdict(list)
    for record in await store.inputs_with_status(list(RESUMABLE_INPUTS)):
        pending[record.session_id].append(record)
    return dict(pending)


async def _close_run(store: Store, journal: Journal, run: RunRecord) -> None:
    session = await store.get_session(run.session_id)
    if session is None:
        await store.finish_run(run.id, status="interrupted", termination_reason="interrupted")
        return
    events = await _run_events(store, session.id, run.id)
    finished = next((e for e in reversed(events) if e.type == "agent.finished"), None)
    if finished is not None:
        # The end was recorded; only the run record missed it.
        reason = str(finished.payload.get("terminationReason") or "interrupted")
        status = run_status_for(reason)
        error = finished.payload.get("errorMessage")
        result = {"runId": run.id, "status": _outcome_of(status), "terminationReason": reason}
        if error:
            result["errorMessage"] = error
        await store.finish_run(run.id, status=status, termination_reason=reason, error=error, result=result)
        await _finish_started_inputs(store, session.id, run.id, "done" if status == "done" else "interrupted")
        return
    await _append_cut_off(store, journal, session, run.id, events)
    await store.finish_run(
        run.id,
        status="interrupted",
        termination_reason="interrupted",
        error=INTERRUPTED_TEXT,
        result={
            "runId": run.id,
            "status": "aborted",
            "terminationReason": "interrupted",
            "errorMessage": INTERRUPTED_TEXT,
        },
    )
    await _finish_started_inputs(store, session.id, run.id, "interrupted")
    log.warning("closed a run interrupted by a gateway stop", run_id=run.id, session_id=session.id)


async def _append_cut_off(
    store: Store, journal: Journal, session: SessionRecord, run_id: str, events: list[EventRecord]
) -> None:
    partial_text, partial_id = open_reply(events)
    entries = await store.transcript(session.id)
    messages = _messages(entries)
    closing = cut_off_messages(
        orphaned_tool_calls(messages), partial_text, _last_model(entries, session), INTERRUPTED_TEXT
    )
    ids = [new_id() for _ in closing[:-1]] + [partial_id or new_id()]
    drafts: list[tuple[str, dict[str, Any]]] = [
        ("message.completed", {"messageId": entry_id, "message": message.dump()})
        for entry_id, message in zip(ids, closing, strict=True)
    ]
    drafts.append(
        (
            "agent.finished",
            {
                "terminationReason": "interrupted",
                "stopReason": "aborted",
                "errorMessage": INTERRUPTED_TEXT,
                **_run_totals(events),
            },
        )
    )
    drafts.append(("status.changed", {"status": "interrupted"}))
    key = session.keys[0] if session.keys else None
    numbered = [
        SessionEvent(session.id, session.last_seq + offset, name, data, run_id=run_id, session_key=key)
        for offset, (name, data) in enumerate(drafts, start=1)
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


def _run_totals(events: list[EventRecord]) -> dict[str, int]:
    """The totals `agent.finished` carries (clients need them to render the end of a run), as far
    as the run's logged events tell: turns started, tokens of its completed assistant messages,
    and the time from its first event to its last."""
    tokens = 0
    for event in events:
        message = event.payload.get("message") if event.type == "message.completed" else None
        if isinstance(message, dict) and message.get("role") == "assistant":
            usage = message.get("usage")
            total = usage.get("totalTokens") if isinstance(usage, dict) else None
            if isinstance(total, int):
                tokens += total
    stamps = [ts for ts in (event.payload.get("ts") for event in events) if isinstance(ts, int)]
    return {
        "totalTurns": sum(1 for event in events if event.type == "turn.started"),
        "totalTokens": tokens,
        "durationMs": max(stamps) - min(stamps) if stamps else 0,
    }


def _entry(entry_id: str, message: AgentMessage) -> NewEntry:
    return NewEntry(kind="message", payload=message.dump(), id=entry_id)


async def _finish_started_inputs(store: Store, session_id: str, run_id: str, status: str) -> None:
    """Inputs the run had started get the run's outcome; queued ones never reached the model
    and stay resumable."""
    for record in await store.inputs_with_status(["running"], session_id=session_id):
        if record.run_id == run_id:
            reason = "the gateway stopped during the run" if status == "interrupted" else None
            await store.update_input(record.idempotency_key, status=status, reason=reason)


async def _close_stale_running_inputs(store: Store) -> None:
    """Inputs marked running whose run already ended (the crash hit before they were settled)."""
    for record in await store.inputs_with_status(["running"]):
        run = await store.get_run(record.run_id) if record.run_id else None
        if run is None:
            # Never reached a run: run it now.
            await store.update_input(record.idempotency_key, status="queued")
        elif run.status != "running":
            final = "done" if run.status in ("done", "error", "aborted") else "interrupted"
            await store.update_input(record.idempotency_key, status=final)


async def _interrupt_stale_sessions(store: Store, journal: Journal, *, skip: set[str]) -> None:
    """Sessions still marked running with no open run (a crash between marking the session and
    recording its run, or after the run record was closed) become interrupted."""
    stale: list[SessionRecord] = []
    offset = 0
    while True:
        page, _total = await store.list_sessions(status="running", limit=500, offset=offset)
        stale.extend(s for s in page if s.id not in skip)
        if len(page) < 500:
            break
        offset += len(page)
    for session in stale:
        key = session.keys[0] if session.keys else None
        event = SessionEvent(
            session.id, session.last_seq + 1, "status.changed", {"status": "interrupted"}, session_key=key
        )
        try:
            await journal.commit(
                JournalItem(session.id, events=[event], session_fields={"status": "interrupted"})
            )
        except Exception:
            log.exception("could not mark a stale running session interrupted", session_id=session.id)


async def _run_events(store: Store, session_id: str, run_id: str) -> list[EventRecord]:
    out: list[EventRecord] = []
    after = 0
    while True:
        batch = await store.read_events(session_id, after_seq=after, limit=2000)
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


def _outcome_of(run_status: str) -> str:
    return {"done": "ok", "error": "error"}.get(run_status, "aborted")
