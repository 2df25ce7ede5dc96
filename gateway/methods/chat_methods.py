"""Sending, history, abort and waiting: `chat.*`, `agent`, `agent.wait`, `sessions.send`."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from agent_core import ImageContent, TextContent, UserMessage
from gateway.methods.base import Call, MethodError, from_sessions_error, invalid
from gateway.methods.sessions_methods import QUEUE_MODES, resolve_session
from gateway.rows import session_row
from sessions.errors import SessionsError
from sessions.manager import SubmitResult
from sessions.records import RunRecord

MAX_WAIT_MS = 24 * 3600 * 1000
_PENDING_INPUTS = ("queued", "followup", "steered")
"""Input states of messages accepted but not yet part of the transcript."""


def _message_param(call: Call) -> UserMessage:
    message = call.params.get("message")
    attachments = call.params.get("attachments") or []
    if isinstance(message, dict):
        text = message.get("text") or message.get("content")
        if isinstance(text, list):
            text = " ".join(str(b.get("text", "")) for b in text if isinstance(b, dict))
        message = text
    if not isinstance(message, str) or not message.strip():
        raise invalid(call.method, "message must be a non-empty string")
    content: list[TextContent | ImageContent] = [TextContent(text=message)]
    if not isinstance(attachments, list):
        raise invalid(call.method, "attachments must be a list")
    for index, item in enumerate(attachments):
        if not isinstance(item, dict):
            raise invalid(call.method, f"attachments[{index}] must be an object")
        data = item.get("content") or item.get("data")
        mime = item.get("mimeType") or item.get("mime_type")
        if not isinstance(data, str) or not isinstance(mime, str) or not mime.startswith("image/"):
            raise invalid(call.method, f"attachments[{index}] needs base64 content and an image mimeType")
        content.append(ImageContent(data=data, mime_type=mime))
    return UserMessage(content=content)


def _queue_mode(call: Call) -> str | None:
    mode = call.params.get("queueMode")
    if mode is None:
        return None
    if mode not in QUEUE_MODES:
        raise invalid(call.method, f"queueMode must be one of {', '.join(QUEUE_MODES)}")
    return str(mode)


def _source(call: Call) -> dict[str, Any]:
    return {"connId": call.conn.conn_id, "client": call.conn.client.get("id"), "method": call.method}


async def _submit(call: Call, key: str, *, agent_id: str | None = None) -> SubmitResult:
    idem = call.str_param("idempotencyKey")
    assert idem is not None
    if len(idem) > 200:
        raise invalid(call.method, "idempotencyKey must be at most 200 characters")
    message = _message_param(call)
    mode = _queue_mode(call)
    manager = call.state.manager
    try:
        session = await manager.ensure_session(key, agent_id=agent_id)
        result = await manager.submit(
            session=session, message=message, idempotency_key=idem, queue_mode=mode, source=_source(call)
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


async def chat_send(call: Call) -> Any:
    key = call.str_param("sessionKey", "key")
    assert key is not None
    return _answer(await _submit(call, key))


async def sessions_send(call: Call) -> Any:
    key = call.str_param("key", "sessionKey")
    assert key is not None
    if "idempotencyKey" not in call.params:
        from sessions.ids import new_id

        call.params["idempotencyKey"] = new_id()
    return _answer(await _submit(call, key))


async def chat_history(call: Call) -> Any:
    record = await resolve_session(call, key_names=("sessionKey", "key"))
    limit = call.int_param("limit", default=200, minimum=1, maximum=5000)
    cursor = call.params.get("cursor")
    skip = 0
    if cursor is not None:
        try:
            skip = int(str(cursor))
        except ValueError as exc:
            raise invalid(call.method, "cursor must come from a previous chat.history answer") from exc
    try:
        entries = await call.state.store.transcript(record.id)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    messages = []
    for entry in entries:
        if entry.kind != "message":
            continue
        payload = entry.payload if isinstance(entry.payload, dict) else json.loads(entry.payload)
        payload = dict(payload)
        payload["__gateway"] = {"id": entry.id, "sessionId": entry.session_id, "position": entry.position}
        messages.append(payload)
    end = max(0, len(messages) - skip)
    start = max(0, end - limit)
    page = messages[start:end]
    manager = call.state.manager
    pending = await call.state.store.inputs_with_status(list(_PENDING_INPUTS), session_id=record.id)
    answer: dict[str, Any] = {
        "sessionKey": (record.keys or [None])[0],
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
        "totalMessages": len(messages),
        "sessionInfo": session_row(record, manager),
    }
    if start > 0:
        answer["cursor"] = str(skip + len(page))
    in_flight = manager.in_flight(record.id)
    if in_flight is not None:
        answer["inFlightRun"] = in_flight
    return answer


async def chat_abort(call: Call) -> Any:
    record = await resolve_session(call, key_names=("sessionKey", "key"))
    run_id = call.str_param("runId", required=False)
    aborted = await call.state.manager.abort(record.id, reason="aborted", run_id=run_id)
    return {"ok": True, "aborted": bool(aborted), "runIds": aborted}


async def chat_inject(call: Call) -> Any:
    record = await resolve_session(call, key_names=("sessionKey", "key"))
    text = call.params.get("message") or call.params.get("text")
    if not isinstance(text, str) or not text:
        raise invalid(call.method, "message must be a non-empty string")
    role = call.params.get("role", "assistant")
    if role not in ("user", "assistant"):
        raise invalid(call.method, "role must be user or assistant")
    try:
        entry_id = await call.state.manager.inject(record.id, text=text, role=role)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    return {"ok": True, "messageId": entry_id}


async def agent(call: Call) -> Any:
    """Answers twice on one id: `accepted` now, the final outcome when the run ends."""
    key = call.str_param("sessionKey", "key", required=False)
    agent_id = call.str_param("agentId", required=False)
    if key is None:
        key = f"agent:{agent_id or 'main'}:main"
    result = await _submit(call, key, agent_id=agent_id)
    if result.status not in ("started", "in_flight"):
        return {**_answer(result), "status": result.status}
    respond = call.respond_later
    state = call.state

    async def finish() -> None:
        outcome = await state.manager.wait_run(result.run_id, None)
        final = _final(result.run_id, outcome, await state.store.get_run(result.run_id))
        if respond is None:
            return
        if final["status"] == "error":
            # As OpenClaw: a failed run's final answer is ok:false with both payload and error.
            message = str(final.get("error") or "the run failed")
            final["summary"] = message
            respond(final, MethodError("UNAVAILABLE", message))
        else:
            respond(final, None)

    task = asyncio.ensure_future(finish())
    state.track(task)
    session = result.session
    return {
        "runId": result.run_id,
        "sessionKey": key,
        "agentId": session.agent_id,
        "status": "accepted",
        "acceptedAt": _now(),
    }


async def agent_wait(call: Call) -> Any:
    run_id = call.str_param("runId")
    assert run_id is not None
    timeout_ms = call.int_param("timeoutMs", default=30_000, minimum=0, maximum=MAX_WAIT_MS)
    outcome = None
    with contextlib.suppress(asyncio.TimeoutError):
        outcome = await call.state.manager.wait_run(run_id, timeout_ms / 1000)
    store = call.state.store
    if outcome is None:
        if await store.get_input(run_id) is None and await store.get_run(run_id) is None:
            raise MethodError("NOT_FOUND", f"unknown run: {run_id}")
        return {"runId": run_id, "status": "timeout"}
    return _final(run_id, outcome, await store.get_run(str(outcome.get("runId") or run_id)))


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
    import time

    return int(time.time() * 1000)
