"""Pure renderers of session events in OpenClaw's shapes: `agent`, `chat`, `session.message`,
`sessions.changed`, as the captured real frames shape them.

`agent` and `chat` are rendered from the one session-event model (`sessions.SessionEvent` and its
typed payload) and need a little per-run state (the per-run `seq`, the start time, the text so
far and how much of it the deltas sent have carried): a `RunStream`, which the caller creates
when a run starts and drops when it ends (`gateway.protocol.events.EventRenderer` does both).

A text delta may be held back and sent later together with the ones that follow it (pacing, see
`gateway.protocol.delta_pacing`): `append_text` adds a delta's text without rendering it, and
`render_text_delta` renders what the run's deltas have not carried yet as one delta, whose
`delta`/`deltaText` is all of it and whose `text`/`message` is the whole text so far.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from sessions import (
    AgentFinished,
    AgentStarted,
    MessageCompleted,
    MessageDelta,
    MessageStarted,
    SessionEvent,
    TerminationReason,
    ToolFinished,
    ToolStarted,
    ToolUpdated,
)

#: Payload types OpenClaw clients see something of (the others never touch a `RunStream`).
RUN_PAYLOADS = (
    AgentStarted,
    MessageStarted,
    MessageDelta,
    MessageCompleted,
    ToolStarted,
    ToolUpdated,
    ToolFinished,
    AgentFinished,
)


def message_text(message: Mapping[str, Any]) -> str:
    """The text of a message's text content blocks (or its string content), joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        block.get("text", "")
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "text" and isinstance(block.get("text"), str)
    )


class RunStream:
    """Per-run state for the OpenClaw `agent` / `chat` shapes. Create one when a run starts, feed
    it that run's events through `render_compat`, drop it when the run ends.

    `seq` counts the run's `agent` events (1, 2, ...); a `chat` event carries the seq of the
    `agent` event it accompanies, as OpenClaw's do. The text of the assistant message being
    streamed is kept as its deltas (joined when a frame needs it), and `sent` says how much of it
    the deltas rendered so far have carried.
    """

    __slots__ = (
        "_length",
        "_parts",
        "agent_id",
        "last_delta_ts",
        "run_id",
        "sent",
        "seq",
        "session_id",
        "session_key",
        "started_at",
    )

    def __init__(
        self, *, run_id: str, session_key: str, session_id: str | None = None, agent_id: str | None = None
    ) -> None:
        self.run_id = run_id
        self.session_key = session_key
        self.session_id = session_id
        self.agent_id = agent_id
        self.seq = 0
        self.started_at: int | None = None
        self.sent = 0
        """Characters of `text` the deltas rendered so far carried."""
        self.last_delta_ts = 0
        """`ts` of the last text delta appended (what a delayed delta is stamped with)."""
        self._parts: list[str] = []
        self._length = 0

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    @property
    def text(self) -> str:
        """Text of the assistant message being streamed, or of the last completed one."""
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def reset_text(self, text: str) -> None:
        """Start over with `text`, all of it counted as sent (a new message, or a completed one)."""
        self._parts = [text] if text else []
        self._length = self.sent = len(text)

    def append_text(self, delta: str, ts: int) -> None:
        """A text delta of the streaming message, not rendered yet."""
        if delta:
            self._parts.append(delta)
            self._length += len(delta)
        self.last_delta_ts = ts

    @property
    def unsent(self) -> bool:
        """Whether the text has grown past what the rendered deltas carried."""
        return self._length > self.sent

    def mark_sent(self) -> None:
        """Count the whole text as carried without rendering it (nobody takes the frames)."""
        self.sent = self._length


class CompatPayloads(msgspec.Struct, frozen=True):
    """What one session event becomes on the OpenClaw wire."""

    agent: dict[str, Any] | None
    chat: dict[str, Any] | None
    tool: bool = False
    """The `agent` payload is on the tool stream: only connections with cap `tool-events` get it."""
    droppable: bool = False
    """Streaming deltas: may be dropped for a slow consumer (its connection `seq` still counts)."""


def _agent_payload(run: RunStream, stream: str, data: dict[str, Any], ts: int) -> dict[str, Any]:
    payload: dict[str, Any] = {"runId": run.run_id, "sessionKey": run.session_key}
    if run.session_id is not None:
        payload["sessionId"] = run.session_id
    if run.agent_id is not None:
        payload["agentId"] = run.agent_id
    payload.update({"stream": stream, "data": data, "seq": run.next_seq(), "ts": ts})
    return payload


def _chat_payload(run: RunStream, state: str, **rest: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {"runId": run.run_id, "sessionKey": run.session_key}
    if run.agent_id is not None:
        payload["agentId"] = run.agent_id
    payload.update({"seq": run.seq, "state": state})
    payload.update({key: value for key, value in rest.items() if value is not None})
    return payload


def _text_message(text: str, ts: int) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}], "timestamp": ts}


def render_compat(event: SessionEvent, run: RunStream) -> CompatPayloads | None:
    """The OpenClaw `agent` / `chat` payloads for `event`, or None when OpenClaw clients see
    nothing of it (turn boundaries, thinking and tool-call deltas, user messages, status).

    Only events of `run` should be passed; `run` is updated (seq, text so far).
    """
    data = event.data
    ts = event.ts
    if isinstance(data, AgentStarted):
        run.started_at = ts
        return CompatPayloads(
            agent=_agent_payload(run, "lifecycle", {"phase": "start", "startedAt": ts}, ts), chat=None
        )
    if isinstance(data, MessageStarted):
        if data.role == "assistant":
            run.reset_text("")
        return None
    if isinstance(data, MessageDelta):
        if data.kind != "text":
            return None
        run.append_text(data.delta, ts)
        return render_text_delta(run)
    if isinstance(data, MessageCompleted):
        if data.message.get("role") != "assistant":
            return None
        run.reset_text(message_text(data.message))
        return _render_fallback(data.message, run, ts)
    if isinstance(data, ToolStarted):
        tool_data = {
            "phase": "start",
            "name": data.tool_name,
            "toolCallId": data.tool_call_id,
            "args": data.args,
        }
        return CompatPayloads(agent=_agent_payload(run, "tool", tool_data, ts), chat=None, tool=True)
    if isinstance(data, ToolUpdated):
        tool_data = {
            "phase": "update",
            "name": data.tool_name,
            "toolCallId": data.tool_call_id,
            "partialResult": data.partial_result,
        }
        return CompatPayloads(
            agent=_agent_payload(run, "tool", tool_data, ts), chat=None, tool=True, droppable=True
        )
    if isinstance(data, ToolFinished):
        tool_data = {
            "phase": "result",
            "name": data.tool_name,
            "toolCallId": data.tool_call_id,
            "isError": data.is_error,
            "result": data.result,
        }
        return CompatPayloads(agent=_agent_payload(run, "tool", tool_data, ts), chat=None, tool=True)
    if isinstance(data, AgentFinished):
        return _render_finished(data, run, ts)
    return None


def _render_fallback(message: Mapping[str, Any], run: RunStream, ts: int) -> CompatPayloads | None:
    """A reply written by a fallback model (`agent_core.providers.fallback`) is announced as the
    `lifecycle` phase `fallback_step`, naming the model that answered and the one it replaced."""
    diagnostics = message.get("diagnostics")
    step = diagnostics.get("fallback") if isinstance(diagnostics, Mapping) else None
    if not isinstance(step, Mapping):
        return None
    data = {
        "phase": "fallback_step",
        "provider": message.get("provider"),
        "model": message.get("model"),
        "from": step.get("from"),
        "to": step.get("to"),
        "reason": step.get("reason"),
        "error": step.get("error"),
    }
    return CompatPayloads(agent=_agent_payload(run, "lifecycle", data, ts), chat=None)


def is_text_delta(event: SessionEvent) -> bool:
    """Whether `event` is a text delta (the only events whose compat frames may be paced)."""
    data = event.data
    return isinstance(data, MessageDelta) and data.kind == "text"


def render_text_delta(run: RunStream) -> CompatPayloads | None:
    """One `agent` assistant delta and one `chat` delta carrying the text the run's deltas have
    not carried yet, stamped with the last delta's `ts`; None when there is none."""
    if not run.unsent:
        return None
    text = run.text
    delta = text[run.sent :]
    run.sent = len(text)
    ts = run.last_delta_ts
    agent = _agent_payload(run, "assistant", {"text": text, "delta": delta}, ts)
    chat = _chat_payload(run, "delta", deltaText=delta, message=_text_message(text, ts))
    return CompatPayloads(agent=agent, chat=chat, droppable=True)


def _render_finished(data: AgentFinished, run: RunStream, ts: int) -> CompatPayloads:
    times: dict[str, Any] = {}
    if run.started_at is not None:
        times["startedAt"] = run.started_at
    times["endedAt"] = ts
    aborted = data.termination_reason.aborted or data.stop_reason == "aborted"
    failed = not aborted and (
        data.termination_reason is TerminationReason.ERROR
        or data.stop_reason == "error"
        or data.error_message is not None
    )
    message = _text_message(run.text, ts) if run.text else None
    if failed:
        error = data.error_message or f"run ended: {data.termination_reason}"
        error_data = {"phase": "error", **times, "error": error, "executionSettled": True}
        agent = _agent_payload(run, "lifecycle", error_data, ts)
        return CompatPayloads(agent=agent, chat=_chat_payload(run, "error", errorMessage=error))
    if aborted:
        agent = _agent_payload(run, "lifecycle", {"phase": "end", **times, "aborted": True}, ts)
        chat = _chat_payload(
            run,
            "aborted",
            message=message,
            errorMessage=data.error_message,
            stopReason=data.stop_reason or "aborted",
        )
        return CompatPayloads(agent=agent, chat=chat)
    agent = _agent_payload(run, "lifecycle", {"phase": "end", **times}, ts)
    usage = dict(data.usage) if data.usage is not None else None
    chat = _chat_payload(run, "final", message=message, usage=usage, stopReason=data.stop_reason or "stop")
    return CompatPayloads(agent=agent, chat=chat)


# --- session list and transcript events -----------------------------------------------------


def _flatten_row(payload: dict[str, Any], row: Mapping[str, Any] | None) -> dict[str, Any]:
    """OpenClaw repeats the session row's fields at the top level next to `session`."""
    if row is None:
        return payload
    payload["session"] = dict(row)
    for key, value in row.items():
        if key != "key":
            payload.setdefault(key, value)
    return payload


def render_session_message(
    *,
    session_key: str,
    agent_id: str,
    message: Mapping[str, Any],
    message_id: str,
    message_seq: int,
    session_row: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The `session.message` payload for a committed transcript message."""
    payload: dict[str, Any] = {
        "sessionKey": session_key,
        "agentId": agent_id,
        "message": dict(message),
        "messageId": message_id,
        "messageSeq": message_seq,
    }
    return _flatten_row(payload, session_row)


def render_sessions_changed(
    *,
    session_key: str,
    agent_id: str,
    ts: int,
    session_row: Mapping[str, Any] | None,
    reason: str | None = None,
    phase: str | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """The `sessions.changed` payload: `reason` for list changes (`create`, `patch`, `reset`,
    ...), or `phase` + `runId` for run progress."""
    payload: dict[str, Any] = {"sessionKey": session_key, "agentId": agent_id}
    if reason is not None:
        payload["reason"] = reason
    if phase is not None:
        payload["phase"] = phase
    if run_id is not None:
        payload["runId"] = run_id
    payload["ts"] = ts
    return _flatten_row(payload, session_row)
