"""Following a session's native events, sans I/O: which frames to show, and when a run is over.

`ResumeCursor` keeps the last `sessionSeq` shown. Fed every frame a connection receives, it
says whether to show it (`SHOW`), drop it (`SKIP`: another session, a non-native event, or a
repeat after a resume) or resubscribe because numbers are missing (`GAP`: the hub dropped deltas
for a slow reader). Resubscribing with `afterSeq = cursor.last_seq` then yields exactly the
missing events, so a reader loses and repeats nothing across gaps and reconnects.

`RunFollower` tells which events belong to the run a `sessions send` input ended up in: the run
named after the input's idempotency key, or the run the input joined (steered or queued as a
follow-up) — found when the input's user message is committed with that run's id.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class Verdict(enum.Enum):
    SHOW = "show"
    SKIP = "skip"
    GAP = "gap"


@dataclass
class ResumeCursor:
    session_id: str | None = None
    """The session followed; set by the first subscribe answer (a key may later point elsewhere)."""
    last_seq: int | None = None
    """The last `sessionSeq` shown; None until the first subscribe answer when not given."""
    resyncing: bool = False
    """A resubscribe after a gap is under way: later frames past the gap are dropped silently."""

    def subscribed(self, answer: Mapping[str, Any]) -> None:
        """Record a `sessions.events.subscribe` answer."""
        session_id = answer.get("sessionId")
        if isinstance(session_id, str):
            self.session_id = session_id
        if self.last_seq is None:
            last = answer.get("lastSeq")
            self.last_seq = last if isinstance(last, int) else 0

    def caught_up(self, seq: int) -> bool:
        """Whether every event up to `seq` has been shown (or stood for by a snapshot)."""
        return self.last_seq is not None and self.last_seq >= seq

    def verdict(self, frame: Mapping[str, Any]) -> Verdict:
        name = frame.get("event")
        payload = frame.get("payload")
        if not isinstance(name, str) or not name.startswith("session.") or not isinstance(payload, dict):
            return Verdict.SKIP
        if self.session_id is not None and payload.get("sessionId") != self.session_id:
            return Verdict.SKIP
        seq = payload.get("sessionSeq")
        if not isinstance(seq, int) or isinstance(seq, bool):
            return Verdict.SKIP
        last = self.last_seq
        if last is not None and seq <= last:
            return Verdict.SKIP
        # A snapshot stands for everything up to its seq (the pruned deltas included).
        if last is not None and seq > last + 1 and name != "session.snapshot":
            if self.resyncing:
                return Verdict.SKIP
            self.resyncing = True
            return Verdict.GAP
        self.resyncing = False
        self.last_seq = seq
        return Verdict.SHOW


def message_text(message: Mapping[str, Any]) -> str:
    """The text blocks of a message, joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        str(block.get("text", ""))
        for block in content
        if isinstance(block, dict) and block.get("type") == "text"
    )


@dataclass
class RunFollower:
    input_key: str
    """The idempotency key `sessions send` sent its message with (also the run id it starts)."""
    run_ids: set[str] = field(default_factory=set)
    finished: dict[str, Any] | None = None
    """The `session.agent.finished` payload of the run, once it arrived."""
    reply: str = ""
    """The text of the run's last assistant message."""
    assistant_messages: int = 0
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.run_ids.add(self.input_key)

    def mine(self, name: str, payload: Mapping[str, Any]) -> bool:
        """Whether this native event belongs to the run; records what the outcome needs."""
        run_id = payload.get("runId")
        message = payload.get("message")
        if (
            name == "session.message.completed"
            and isinstance(run_id, str)
            and isinstance(message, dict)
            and message.get("role") == "user"
            and self._is_input(message)
        ):
            self.run_ids.add(run_id)
        if run_id not in self.run_ids:
            return False
        if name == "session.message.completed" and isinstance(message, dict):
            if message.get("role") == "assistant":
                self.reply = message_text(message)
                self.assistant_messages += 1
        elif name == "session.tool.finished":
            self.tool_calls.append(
                {
                    "toolName": payload.get("toolName"),
                    "isError": bool(payload.get("isError")),
                    "durationMs": payload.get("durationMs"),
                }
            )
        elif name == "session.agent.finished":
            self.finished = dict(payload)
        return True

    def _is_input(self, message: Mapping[str, Any]) -> bool:
        merged = message.get("mergedKeys")
        return message.get("idempotencyKey") == self.input_key or (
            isinstance(merged, list) and self.input_key in merged
        )

    def outcome(self) -> dict[str, Any]:
        """The run's result for `--json` and the exit code (needs `finished`)."""
        # Imported here: the sessions package is heavy, and gatewayctl needs it only now.
        from sessions.termination import TerminationReason

        finished = self.finished or {}
        reason = str(finished.get("terminationReason") or "")
        known = TerminationReason.parse(reason)
        status = known.outcome.value if known is not None else "error"
        out: dict[str, Any] = {
            "runId": finished.get("runId") or self.input_key,
            "status": status,
            "text": self.reply,
            "terminationReason": reason or None,
            "stopReason": finished.get("stopReason"),
        }
        for name in ("errorMessage", "usage", "totalTurns", "totalTokens", "durationMs"):
            if name in finished:
                out[name] = finished[name]
        out["toolCalls"] = self.tool_calls
        return out


def outcome_from_wait(answer: Mapping[str, Any], input_key: str) -> dict[str, Any]:
    """The run's result from `agent.wait`, for a run whose end event never reached us."""
    out: dict[str, Any] = {
        "runId": answer.get("runId") or input_key,
        "status": answer.get("status") or "error",
        "text": answer.get("text") or "",
        "terminationReason": answer.get("terminationReason"),
        "stopReason": answer.get("stopReason"),
    }
    for name in ("errorMessage", "usage"):
        if name in answer:
            out[name] = answer[name]
    return out
