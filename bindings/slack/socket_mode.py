"""Slack's Socket Mode as a sans-I/O state machine.

Every connection starts from a fresh, single-use `wss://` URL that `apps.connections.open` (with
the app-level token) returns; the shell fetches it. On the socket, Slack sends `hello` (we are
`ready` only then), envelopes (`events_api`, `slash_commands`, `interactive`) that must each be
acknowledged with `{"envelope_id": ...}` within 3 s (Slack redelivers what is not), and
`disconnect` frames, which are routine: `refresh_requested` and `warning` mean "reconnect now
with a new URL", `link_disabled` means Socket Mode was turned off for the app and we stop.

The protocol does not acknowledge by itself: the binding calls `ack(envelope_id)` once the event
is recorded (or known to need nothing), so an event the daemon did not record is redelivered
rather than lost. An envelope can only be acknowledged on the connection that delivered it; one
left unacknowledged when its connection ends is Slack's to deliver again.

Retried deliveries (`retry_attempt > 0`) are passed on like first ones; deduplication by the
inner `event_id` is the binding's job, because a retry whose first delivery never arrived must
still be processed.

The shell feeds it like the Discord protocol: `start()`, then per connection `connection_made`,
`receive`, `tick` at `next_deadline()`, `connection_lost`; it sends `data_to_send()` after every
call and closes the socket when `close_requested()` is set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from bindings.errors import GatewayProtocolError
from bindings.state import ConnectionState, StateMachine


@dataclass(frozen=True, kw_only=True)
class Hello:
    num_connections: int | None = None


@dataclass(frozen=True, kw_only=True)
class Envelope:
    envelope_id: str
    type: str
    payload: dict[str, Any] = field(default_factory=dict)
    retry_attempt: int = 0
    retry_reason: str | None = None
    accepts_response_payload: bool = False


@dataclass(frozen=True, kw_only=True)
class Disconnect:
    reason: str


SocketEvent: TypeAlias = Hello | Envelope | Disconnect


@dataclass(frozen=True, kw_only=True)
class CloseRequest:
    code: int
    reason: str


class SocketModeProtocol:
    def __init__(self, *, hello_timeout_s: float = 30.0) -> None:
        self._hello_timeout_s = hello_timeout_s
        self.machine = StateMachine()
        self.acks_sent = 0
        self._stopping = False
        self._reset()

    def _reset(self) -> None:
        self._outgoing: list[str] = []
        self._close: CloseRequest | None = None
        self._hello_deadline: float | None = None
        self._got_hello = False
        self._unacked: set[str] = set()

    @property
    def state(self) -> ConnectionState:
        return self.machine.state

    @property
    def got_hello(self) -> bool:
        """Whether the current (or last) connection said `hello`."""
        return self._got_hello

    def start(self) -> None:
        self.machine.transition(ConnectionState.CONNECTING, expected=(ConnectionState.CLOSED,))
        self._stopping = False

    def stop(self) -> None:
        self._stopping = True
        if self.state is not ConnectionState.CLOSED:
            self.machine.transition(ConnectionState.CLOSED)

    def connection_made(self, now: float) -> None:
        self._reset()
        self._hello_deadline = now + self._hello_timeout_s

    def connection_lost(self) -> None:
        """The socket closed. Unless stopping, the next connection resumes (with a new URL)."""
        if self._stopping or self.state is ConnectionState.CLOSED:
            self.stop()
        elif self.state is ConnectionState.READY:
            self.machine.transition(ConnectionState.RESUMING)

    def receive(self, text: str | bytes, now: float) -> list[SocketEvent]:
        try:
            frame = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise GatewayProtocolError(f"not a Socket Mode frame: {str(text)[:120]!r}") from exc
        if not isinstance(frame, dict):
            raise GatewayProtocolError("Socket Mode frame is not an object")
        if "envelope_id" in frame:
            return [self._on_envelope(frame)]
        kind = frame.get("type")
        if kind == "hello":
            self.machine.transition(
                ConnectionState.READY, expected=(ConnectionState.CONNECTING, ConnectionState.RESUMING)
            )
            self._got_hello = True
            self._hello_deadline = None
            return [Hello(num_connections=_as_int(frame.get("num_connections")))]
        if kind == "disconnect":
            reason = str(frame.get("reason") or "unknown")
            if reason == "link_disabled":
                self._stopping = True
            self._close = CloseRequest(code=1000, reason=f"disconnect: {reason}")
            return [Disconnect(reason=reason)]
        return []

    def _on_envelope(self, frame: dict[str, Any]) -> Envelope:
        envelope_id = str(frame["envelope_id"])
        self._unacked.add(envelope_id)
        payload = frame.get("payload")
        return Envelope(
            envelope_id=envelope_id,
            type=str(frame.get("type", "")),
            payload=payload if isinstance(payload, dict) else {},
            retry_attempt=_as_int(frame.get("retry_attempt")) or 0,
            retry_reason=frame.get("retry_reason"),
            accepts_response_payload=bool(frame.get("accepts_response_payload")),
        )

    @property
    def unacked(self) -> int:
        """Envelopes of the current connection not acknowledged yet."""
        return len(self._unacked)

    def ack(self, envelope_id: str) -> bool:
        """Queue the acknowledgement of an envelope of the current connection. False when
        there is nothing to acknowledge (already done, or the envelope came on a connection that
        has ended)."""
        if envelope_id not in self._unacked:
            return False
        self._unacked.discard(envelope_id)
        self._outgoing.append(json.dumps({"envelope_id": envelope_id}))
        self.acks_sent += 1
        return True

    def tick(self, now: float) -> None:
        if self._close is None and self._hello_deadline is not None and now >= self._hello_deadline:
            self._close = CloseRequest(code=1000, reason="no hello received")

    def next_deadline(self) -> float | None:
        return None if self._close is not None else self._hello_deadline

    def data_to_send(self) -> list[str]:
        out, self._outgoing = self._outgoing, []
        return out

    def close_requested(self) -> CloseRequest | None:
        return self._close


def _as_int(value: Any) -> int | None:
    """A number field of a frame; a value of another type counts as absent (Slack sends numbers,
    and a malformed field must not take the connection down)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None
