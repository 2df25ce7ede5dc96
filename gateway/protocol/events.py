"""Session events on the wire, rendered from the one session-event model.

A committed `sessions.SessionEvent` (an envelope plus one typed payload) goes out in up to three
shapes:

- the native `session.<name>` event, `{sessionId, sessionKey, sessionSeq, runId?, ts, ...fields}`
  with the payload's camelCase fields (`native`); replays of stored events render the same way;
- `session.message` for each committed message (`committed_message`);
- OpenClaw's `agent` / `chat` events (shapes in `gateway.protocol.compat`), which need per-run
  state: `EventRenderer` keeps it.

Nothing here does I/O or touches the clock: timestamps come from the event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.protocol.compat import RUN_PAYLOADS, CompatPayloads, RunStream, render_compat
from sessions import AgentFinished, MessageCompleted, SessionEvent, agent_from_key

__all__ = ["EventRenderer", "RenderedEvent", "committed_message", "native"]


def native(event: SessionEvent) -> tuple[str, dict[str, Any]]:
    """`(event name, payload)` of the native `session.*` event for `event`."""
    payload: dict[str, Any] = {
        "sessionId": event.session_id,
        "sessionKey": event.session_key,
        "sessionSeq": event.seq,
    }
    if event.run_id is not None:
        payload["runId"] = event.run_id
    payload["ts"] = event.ts
    payload.update(event.data.dump())
    return "session." + event.name, payload


def committed_message(event: SessionEvent) -> dict[str, Any] | None:
    """The `session.message` payload for a `message.completed` event (None for other events)."""
    data = event.data
    if not isinstance(data, MessageCompleted):
        return None
    return {
        "sessionKey": event.session_key,
        "sessionId": event.session_id,
        "messageId": data.message_id,
        "messageSeq": event.seq,
        "message": data.message,
    }


@dataclass(frozen=True, slots=True)
class RenderedEvent:
    """Every wire shape of one session event, ready to serialise."""

    name: str
    """The native event name, `session.<name>`."""
    payload: dict[str, Any]
    """The native payload."""
    droppable: bool
    """A streaming delta: may be dropped for a slow consumer."""
    message: dict[str, Any] | None
    """The `session.message` payload (committed messages only)."""
    openclaw: CompatPayloads | None
    """OpenClaw's `agent` / `chat` payloads (None when OpenClaw clients see nothing of it)."""


class EventRenderer:
    """Renders each committed session event in every wire shape.

    Feed it a session's events in `seq` order. It keeps one `RunStream` per run that OpenClaw
    clients follow, from the run's first event they see to its `agent.finished`; a run cut off
    without one is closed by recovery with an `agent.finished` of its own.
    """

    def __init__(self) -> None:
        self._runs: dict[str, RunStream] = {}

    @property
    def open_runs(self) -> int:
        """Runs whose OpenClaw stream is open (seen started, not yet finished)."""
        return len(self._runs)

    def render(self, event: SessionEvent) -> RenderedEvent:
        name, payload = native(event)
        return RenderedEvent(
            name=name,
            payload=payload,
            droppable=event.droppable,
            message=committed_message(event),
            openclaw=self._openclaw(event),
        )

    def _openclaw(self, event: SessionEvent) -> CompatPayloads | None:
        run_id = event.run_id
        if run_id is None or not isinstance(event.data, RUN_PAYLOADS):
            return None
        run = self._runs.get(run_id)
        if run is None:
            key = event.session_key or ""
            run = self._runs[run_id] = RunStream(
                run_id=run_id, session_key=key, session_id=event.session_id, agent_id=agent_from_key(key)
            )
        if isinstance(event.data, AgentFinished):
            del self._runs[run_id]
        return render_compat(event, run)
