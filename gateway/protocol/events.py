"""Session events on the wire, rendered from the one session-event model.

A committed `sessions.SessionEvent` (an envelope plus one typed payload) goes out in up to three
shapes, each rendered only when some connection takes it (the bridge asks the hub):

- the native `session.<name>` event, `{sessionId, sessionKey, sessionSeq, runId?, ts, ...fields}`
  with the payload's camelCase fields (`native_json`: the envelope spliced in front of the
  payload's JSON text, which the event carries already encoded); replays of stored events render
  the same way;
- `session.message` for each committed message (`committed_message`);
- OpenClaw's `agent` / `chat` events (shapes in `gateway.protocol.compat`), which need per-run
  state and are paced (`gateway.protocol.delta_pacing`): `EventRenderer` keeps both.

Nothing here does I/O or reads the clock: timestamps come from the event, the time used for
pacing from the caller.
"""

from __future__ import annotations

import heapq
from typing import Any

import msgspec

from gateway.protocol.compat import (
    RUN_PAYLOADS,
    CompatPayloads,
    RunStream,
    is_text_delta,
    render_compat,
    render_text_delta,
)
from gateway.protocol.delta_pacing import DeltaClock, DeltaPacing
from gateway.protocol.frames import dumps
from sessions import (
    AgentFinished,
    MessageCompleted,
    MessageDelta,
    MessageStarted,
    SessionEvent,
    agent_from_key,
)

__all__ = ["CompatFrames", "EventRenderer", "committed_message", "native", "native_json"]


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


def native_json(event: SessionEvent) -> str:
    """The native payload of `event` as JSON text, exactly `dumps(native(event)[1])`, built around
    the payload's own JSON text (`SessionEvent.data_json`, encoded once for the event log)."""
    head = f'{{"sessionId":{dumps(event.session_id)},"sessionKey":{dumps(event.session_key)}'
    head += f',"sessionSeq":{event.seq:d}'
    if event.run_id is not None:
        head += f',"runId":{dumps(event.run_id)}'
    head += f',"ts":{event.ts:d}'
    data = event.data_json()
    return head + "}" if data == "{}" else head + "," + data[1:]


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


class CompatFrames(msgspec.Struct, frozen=True):
    """OpenClaw frames of one session, ready to serialise (oldest first)."""

    session_id: str
    payloads: tuple[CompatPayloads, ...]


class _Run(msgspec.Struct):
    stream: RunStream
    clock: DeltaClock = msgspec.field(default_factory=DeltaClock)
    held_until: float | None = None
    """When the held text delta is due (None: nothing held)."""


class EventRenderer:
    """Renders committed session events as OpenClaw `agent` / `chat` payloads, paced.

    Feed it every session's events in `seq` order (`compat`). It keeps one `RunStream` per run
    from the run's first event to its `agent.finished` (a run cut off without one is closed by
    recovery with an `agent.finished` of its own). Text deltas are held back by `pacing`; the
    caller asks `next_deadline` when to call `flush_due` for the ones whose turn has come.
    """

    def __init__(self, pacing: DeltaPacing | None = None) -> None:
        self.pacing = pacing or DeltaPacing()
        self._runs: dict[str, _Run] = {}
        self._deadlines: list[tuple[float, str]] = []
        """(due, run id) of held deltas; entries whose run no longer holds at that time are stale."""

    @property
    def open_runs(self) -> int:
        """Runs whose OpenClaw stream is open (seen started, not yet finished)."""
        return len(self._runs)

    def compat(self, event: SessionEvent, *, now: float, taken: bool = True) -> tuple[CompatPayloads, ...]:
        """The OpenClaw payloads to send for `event` now, oldest first: a held delta's whole text
        when the event makes it due, then the event's own. `taken` False (no connection takes
        OpenClaw frames of this session) keeps the run's state and renders nothing."""
        run_id = event.run_id
        if run_id is None or not isinstance(event.data, RUN_PAYLOADS):
            return ()
        run = self._runs.get(run_id)
        if run is None:
            key = event.session_key or ""
            stream = RunStream(
                run_id=run_id, session_key=key, session_id=event.session_id, agent_id=agent_from_key(key)
            )
            run = self._runs[run_id] = _Run(stream)
        if isinstance(event.data, AgentFinished):
            del self._runs[run_id]
        if is_text_delta(event):
            return self._text_delta(run, event, now, taken)
        out: list[CompatPayloads] = []
        held = self._release(run, now, taken)
        if held is not None:
            out.append(held)
        if isinstance(event.data, MessageStarted):
            run.clock.restart()
        rendered = render_compat(event, run.stream)
        if rendered is not None and taken:
            out.append(rendered)
        return tuple(out)

    def _text_delta(
        self, run: _Run, event: SessionEvent, now: float, taken: bool
    ) -> tuple[CompatPayloads, ...]:
        stream = run.stream
        data = event.data
        assert isinstance(data, MessageDelta)
        stream.append_text(data.delta, event.ts)
        if not taken:
            stream.mark_sent()
            run.held_until = None
            return ()
        if run.held_until is None and not self.pacing.allows(run.clock, now):
            run.held_until = self.pacing.next_at(run.clock)
            heapq.heappush(self._deadlines, (run.held_until, stream.run_id))
        if run.held_until is not None and now < run.held_until:
            return ()
        held = self._release(run, now, taken)
        return (held,) if held is not None else ()

    def _release(self, run: _Run, now: float, taken: bool) -> CompatPayloads | None:
        """Render the text the run's deltas have not carried yet (nothing when none)."""
        run.held_until = None
        if not run.stream.unsent:
            return None
        if not taken:
            run.stream.mark_sent()
            return None
        run.clock.sent(now)
        return render_text_delta(run.stream)

    def next_deadline(self) -> float | None:
        """When the earliest held delta is due (None: none is held)."""
        deadlines = self._deadlines
        while deadlines:
            due, run_id = deadlines[0]
            run = self._runs.get(run_id)
            if run is not None and run.held_until == due:
                return due
            heapq.heappop(deadlines)
        return None

    def flush_due(self, now: float) -> list[CompatFrames]:
        """The held deltas due at `now`, each with all the text its run streamed meanwhile."""
        out: list[CompatFrames] = []
        while (due := self.next_deadline()) is not None and due <= now:
            _, run_id = heapq.heappop(self._deadlines)
            run = self._runs[run_id]
            held = self._release(run, now, True)
            if held is not None:
                out.append(CompatFrames(run.stream.session_id or "", (held,)))
        return out
