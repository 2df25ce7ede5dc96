"""Sending, history, abort and waiting: `chat.*`, `agent`, `agent.wait`, `sessions.send`."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from agent_core import ImageContent, TextContent, UserMessage
from gateway.methods.base import Call, MethodError, from_sessions_error, invalid
from gateway.methods.lookup import first_key, session_named, session_of_key
from gateway.protocol import params as p
from gateway.rows import session_row
from sessions import WAITING_INPUT_STATUSES, RunRecord, SessionRecord, SessionsError, SubmitResult
from sessions.ids import new_id

MAX_IDEMPOTENCY_KEY = 200


def _user_message(method: str, text: str, attachments: list[dict[str, Any]] | None) -> UserMessage:
    if not text.strip():
        raise invalid(method, "message must be a non-empty string")
    content: list[TextContent | ImageContent] = [TextContent(text=text)]
    for index, item in enumerate(attachments or []):
        data = item.get("content") or item.get("data")
        mime = item.get("mimeType") or item.get("mime_type")
        if not isinstance(data, str) or not isinstance(mime, str) or not mime.startswith("image/"):
            raise invalid(method, f"attachments[{index}] needs base64 content and an image mimeType")
        content.append(ImageContent(data=data, mime_type=mime))
    return UserMessage(content=content)


async def _submit(
    call: Call,
    key: str,
    message: UserMessage,
    idempotency_key: str,
    *,
    queue_mode: str | None = None,
    agent_id: str | None = None,
) -> SubmitResult:
    if len(idempotency_key) > MAX_IDEMPOTENCY_KEY:
        raise invalid(call.method, f"idempotencyKey must be at most {MAX_IDEMPOTENCY_KEY} characters")
    manager = call.state.manager
    source = {"connId": call.conn.conn_id, "client": call.conn.client.get("id"), "method": call.method}
    try:
        session = await manager.ensure_session(key, agent_id=agent_id)
        # Chat commands are answered by the gateway; templates and skills are expanded.
        result = await call.state.commands.submit(
            key=key,
            session=session,
            message=message,
            idempotency_key=idempotency_key,
            queue_mode=queue_mode,
            source=source,
        )
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    if result.status == "started":
        call.state.bridge.session_changed(session.id, "send")
    return result


def _answer(result: SubmitResult) -> dict[str, Any]:
    out: dict[str, Any] = {"runId": result.run_id, "status": result.status}
    if result.status == "started" and result.disposition != "queued":
        out["queued"] = result.disposition
    if result.result:
        for name in ("terminationReason", "stopReason", "text", "errorMessage", "usage"):
            if name in result.result:
                out[name] = result.result[name]
    return out


async def chat_send(call: Call, params: p.ChatSendParams) -> Any:
    message = _user_message(call.method, params.message, params.attachments)
    result = await _submit(
        call, params.session_key, message, params.idempotency_key, queue_mode=params.queue_mode
    )
    return _answer(result)


async def sessions_send(call: Call, params: p.SessionsSendParams) -> Any:
    message = _user_message(call.method, params.message, params.attachments)
    result = await _submit(call, params.key, message, params.idempotency_key or new_id())
    return _answer(result)


async def chat_history(call: Call, params: p.ChatHistoryParams) -> Any:
    """The transcript, newest `limit` messages first page. A key no session has used yet has an
    empty history (the session appears when the key is first used)."""
    limit = params.limit if params.limit is not None else 200
    skip = 0
    if params.cursor is not None:
        try:
            skip = int(params.cursor)
        except ValueError as exc:
            raise invalid(call.method, "cursor must come from a previous chat.history answer") from exc
    if params.session_id is not None:
        record: SessionRecord | None = await session_named(call, session_id=params.session_id)
    else:
        record = await session_of_key(call, params.session_key)
    if record is None:
        return _empty_history(params.session_key)
    try:
        # Only the page is read from the database; the rest of the transcript is counted.
        entries, total = await call.state.store.transcript.message_page(record.id, skip=skip, limit=limit)
        # Accepted and not part of a run yet, so not in the transcript either.
        pending = await call.state.store.inputs.with_status(WAITING_INPUT_STATUSES, session_id=record.id)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    page = []
    for entry in entries:
        payload = dict(entry.payload)
        payload["__gateway"] = {"id": entry.id, "sessionId": entry.session_id, "position": entry.position}
        page.append(payload)
    end = max(0, total - skip)
    start = max(0, end - limit)
    manager = call.state.manager
    answer: dict[str, Any] = {
        "sessionKey": first_key(record),
        "sessionId": record.id,
        "messages": page,
        "pendingInputs": {
            "items": [
                {"idempotencyKey": i.idempotency_key, "status": i.status, "message": i.payload}
                for i in pending
            ],
            "total": len(pending),
        },
        "hasMore": start > 0,
        "totalMessages": total,
        "sessionInfo": session_row(record, manager),
    }
    if start > 0:
        answer["cursor"] = str(skip + len(page))
    in_flight = manager.in_flight(record.id)
    if in_flight is None and manager.placement is not None:  # a run on another node
        try:
            in_flight = await manager.placement.in_flight(record.id)
        except SessionsError as exc:
            raise from_sessions_error(exc) from exc
    if in_flight is not None:
        answer["inFlightRun"] = in_flight
    return answer


def _empty_history(key: str) -> dict[str, Any]:
    return {
        "sessionKey": key,
        "sessionId": None,
        "messages": [],
        "pendingInputs": {"items": [], "total": 0},
        "hasMore": False,
        "totalMessages": 0,
        "sessionInfo": None,
    }


async def chat_abort(call: Call, params: p.ChatAbortParams) -> Any:
    record = await session_named(call, key=params.session_key, session_id=params.session_id)
    aborted = await call.state.manager.abort(record.id, run_id=params.run_id)
    return {"ok": True, "aborted": bool(aborted), "runIds": aborted}


async def chat_inject(call: Call, params: p.ChatInjectParams) -> Any:
    record = await session_named(call, key=params.session_key)
    try:
        entry_id = await call.state.manager.inject(
            record.id, text=params.message, role=params.role or "assistant"
        )
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    return {"ok": True, "messageId": entry_id}


async def agent(call: Call, params: p.AgentParams) -> Any:
    """Answers twice on one id: `accepted` now, the final outcome when the run ends."""
    if params.session_key == "":
        raise invalid(call.method, "sessionKey must be a non-empty string")
    key = params.session_key or f"agent:{params.agent_id or 'main'}:main"
    message = _user_message(call.method, params.message, params.attachments)
    result = await _submit(call, key, message, params.idempotency_key, agent_id=params.agent_id)
    if result.status not in ("started", "in_flight"):
        return {**_answer(result), "status": result.status}
    respond = call.respond_later
    state = call.state

    async def finish() -> None:
        outcome = await state.manager.wait_run(result.run_id, None)
        final = _final(result.run_id, outcome, await state.store.runs.get(result.run_id))
        if respond is None:
            return
        if final["status"] == "error":
            # As OpenClaw: a failed run's final answer is ok:false with both payload and error.
            message = str(final.get("error") or "the run failed")
            final["summary"] = message
            respond(final, MethodError("UNAVAILABLE", message))
        else:
            respond(final, None)

    state.background.spawn(finish(), name=f"agent-final-{result.run_id}")
    return {
        "runId": result.run_id,
        "sessionKey": key,
        "agentId": result.session.agent_id,
        "status": "accepted",
        "acceptedAt": _now(),
    }


async def agent_wait(call: Call, params: p.AgentWaitParams) -> Any:
    run_id = params.run_id
    timeout_ms = params.timeout_ms if params.timeout_ms is not None else 30_000
    outcome = None
    with contextlib.suppress(asyncio.TimeoutError):
        outcome = await call.state.manager.wait_run(run_id, timeout_ms / 1000)
    store = call.state.store
    try:
        if outcome is None:
            if await store.inputs.get(run_id) is None and await store.runs.get(run_id) is None:
                raise MethodError("NOT_FOUND", f"unknown run: {run_id}")
            return {"runId": run_id, "status": "timeout"}
        return _final(run_id, outcome, await store.runs.get(str(outcome.get("runId") or run_id)))
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc


def _final(run_id: str, outcome: dict[str, Any] | None, run: RunRecord | None = None) -> dict[str, Any]:
    """A run's outcome as `agent.wait` and `agent`'s final answer show it: OpenClaw's
    `{runId, status, startedAt, endedAt, error?}` plus the gateway's details."""
    if outcome is None:
        return {"runId": run_id, "status": "timeout"}
    status = outcome.get("status", "ok")
    if status == "done":
        status = "ok"
    if status == "interrupted":
        status = "aborted"
    answer: dict[str, Any] = {"runId": run_id, "status": status}
    if run is not None:
        answer["startedAt"] = run.started_at
        answer["endedAt"] = run.ended_at
    error = outcome.get("errorMessage") or outcome.get("reason")
    if status == "error" and error:
        answer["error"] = error
    for name in ("terminationReason", "stopReason", "text", "errorMessage", "usage"):
        if name in outcome:
            answer[name] = outcome[name]
    if "text" in outcome:
        answer["result"] = {"text": outcome["text"], "payloads": [{"text": outcome["text"]}]}
    return answer


def _now() -> int:
    return int(time.time() * 1000)
