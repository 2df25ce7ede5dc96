"""Closing what a crash left open.

Runs still marked `running` when the daemon starts were cut off. For each: the completed messages
are already transcript entries; tool calls of the last assistant message that never got a result
get an error result (so the transcript stays valid for every provider); the reply that was being
streamed becomes an assistant entry with `stopReason: "aborted"` holding the text streamed so far
(recovered from the event log); the run, its inputs and the session are marked `interrupted`. The
run is not repeated (its tools may have had side effects). Inputs that were accepted but had not
started are returned so the manager can run them.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import structlog

from agent_core import AssistantMessage, TextContent, ToolCall, ToolResultMessage, parse_message
from sessions.ids import new_id
from sessions.journal import Journal, JournalItem
from sessions.session_events import EventPublisher, SessionEvent
from sessions.store import InputRecord, NewEntry, Store

log = structlog.get_logger("sessions.recovery")

INTERRUPTED_TEXT = "The gateway stopped during the run; the reply was cut off here."
ORPHANED_TOOL_TEXT = "The gateway stopped before this tool call finished; its outcome is unknown."
RESUMABLE_INPUTS = ("queued", "steered", "followup")


async def recover(store: Store, journal: Journal, publisher: EventPublisher) -> dict[str, list[InputRecord]]:
    for run in await store.running_runs():
        try:
            await _close_run(store, journal, run.id, run.session_id)
        except Exception:
            log.exception("could not close an interrupted run", run_id=run.id)
    pending: dict[str, list[InputRecord]] = defaultdict(list)
    for record in await store.inputs_with_status(list(RESUMABLE_INPUTS)):
        pending[record.session_id].append(record)
    for records in pending.values():
        records.sort(key=lambda r: r.created_at)
    return dict(pending)


async def _close_run(store: Store, journal: Journal, run_id: str, session_id: str) -> None:
    session = await store.get_session(session_id)
    if session is None:
        await store.finish_run(run_id, status="interrupted", termination_reason="interrupted")
        return
    events = await _run_events(store, session_id, run_id)
    partial_text, partial_id, _open = _partial(events)
    entries = await store.transcript(session_id)
    orphans = _orphaned_tool_calls(entries)
    model = _last_model(entries, session)
    new_entries: list[NewEntry] = []
    drafts: list[tuple[str, dict[str, Any]]] = []
    for call in orphans:
        result = ToolResultMessage(
            tool_call_id=call.id,
            tool_name=call.name,
            content=[TextContent(text=ORPHANED_TOOL_TEXT)],
            is_error=True,
        )
        entry_id = new_id()
        new_entries.append(NewEntry(kind="message", payload=result.dump(), id=entry_id))
        drafts.append(("message.completed", {"messageId": entry_id, "message": result.dump()}))
    partial_id = partial_id or new_id()
    aborted = AssistantMessage(
        content=[TextContent(text=partial_text)] if partial_text else [],
        api=model[0],
        provider=model[1],
        model=model[2],
        stop_reason="aborted",
        error_message=INTERRUPTED_TEXT,
    )
    new_entries.append(NewEntry(kind="message", payload=aborted.dump(), id=partial_id))
    drafts.append(("message.completed", {"messageId": partial_id, "message": aborted.dump()}))
    drafts.append(
        (
            "agent.finished",
            {"terminationReason": "interrupted", "stopReason": "aborted", "errorMessage": INTERRUPTED_TEXT},
        )
    )
    drafts.append(("status.changed", {"status": "interrupted"}))
    seq = session.last_seq
    key = session.keys[0] if session.keys else None
    numbered = []
    for name, data in drafts:
        seq += 1
        numbered.append(SessionEvent(session_id, seq, name, data, run_id=run_id, session_key=key))
    await journal.commit(
        JournalItem(
            session_id, entries=new_entries, events=numbered, session_fields={"status": "interrupted"}
        )
    )
    await store.finish_run(
        run_id,
        status="interrupted",
        termination_reason="interrupted",
        error=INTERRUPTED_TEXT,
        result={
            "runId": run_id,
            "status": "aborted",
            "terminationReason": "interrupted",
            "errorMessage": INTERRUPTED_TEXT,
        },
    )
    for record in await store.inputs_with_status(["running"], session_id=session_id):
        if record.run_id == run_id:
            await store.update_input(record.idempotency_key, status="interrupted", reason="gateway stopped")
    log.warning("closed a run interrupted by a gateway stop", run_id=run_id, session_id=session_id)


async def _run_events(store: Store, session_id: str, run_id: str) -> list[Any]:
    out: list[Any] = []
    after = 0
    while True:
        batch = await store.read_events(session_id, after_seq=after, limit=2000)
        if not batch:
            return out
        out.extend(e for e in batch if e.run_id == run_id)
        after = batch[-1].seq


def _partial(events: list[Any]) -> tuple[str, str | None, bool]:
    """Text streamed for the assistant message that was open when the run stopped."""
    open_id: str | None = None
    text: list[str] = []
    for event in events:
        payload = event.payload if isinstance(event.payload, dict) else json.loads(event.payload)
        if event.type == "message.started" and payload.get("role") == "assistant":
            open_id = payload.get("messageId")
            text = []
        elif event.type == "message.delta" and payload.get("messageId") == open_id:
            if payload.get("kind") == "text":
                text.append(payload.get("delta", ""))
        elif event.type == "message.completed" and payload.get("messageId") == open_id:
            open_id = None
            text = []
    return "".join(text), open_id, open_id is not None


def _orphaned_tool_calls(entries: list[Any]) -> list[ToolCall]:
    """Tool calls of the last assistant message that have no result after it."""
    messages = []
    for entry in entries:
        if entry.kind == "message":
            payload = entry.payload if isinstance(entry.payload, dict) else json.loads(entry.payload)
            messages.append(parse_message(payload))
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AssistantMessage):
            answered = {m.tool_call_id for m in messages[index + 1 :] if isinstance(m, ToolResultMessage)}
            return [b for b in message.content if isinstance(b, ToolCall) and b.id not in answered]
        if message.role == "user":
            return []
    return []


def _last_model(entries: list[Any], session: Any) -> tuple[str, str, str]:
    for entry in reversed(entries):
        if entry.kind == "message":
            payload = entry.payload if isinstance(entry.payload, dict) else json.loads(entry.payload)
            if payload.get("role") == "assistant":
                return (
                    payload.get("api", "unknown"),
                    payload.get("provider", "unknown"),
                    payload.get("model", "unknown"),
                )
    provider, _, model_id = (session.model or "unknown/unknown").partition("/")
    return "unknown", provider, model_id or "unknown"
