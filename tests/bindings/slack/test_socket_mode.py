"""The Socket Mode state machine, fed frames directly."""

from __future__ import annotations

import json

import pytest

from bindings.errors import GatewayProtocolError, StateTransitionError
from bindings.slack.socket_mode import Disconnect, Envelope, Hello, SocketModeProtocol
from bindings.state import ConnectionState

HELLO = json.dumps({"type": "hello", "num_connections": 1})


def state_of(proto: SocketModeProtocol) -> ConnectionState:
    """The protocol's state, read afresh (keeps the type checker from narrowing it)."""
    return proto.state


def envelope(envelope_id: str, retry_attempt: int = 0) -> str:
    payload = {"type": "event_callback", "event_id": "Ev1", "event": {"type": "message"}}
    return json.dumps(
        {"envelope_id": envelope_id, "type": "events_api", "payload": payload, "retry_attempt": retry_attempt}
    )


def opened() -> SocketModeProtocol:
    proto = SocketModeProtocol(hello_timeout_s=10.0)
    proto.start()
    proto.connection_made(0.0)
    return proto


def test_ready_only_after_hello() -> None:
    proto = opened()
    assert state_of(proto) is ConnectionState.CONNECTING
    assert proto.receive(HELLO, 0.1) == [Hello(num_connections=1)]
    assert state_of(proto) is ConnectionState.READY


def test_envelopes_are_acked_when_the_binding_asks_and_only_on_their_connection() -> None:
    proto = opened()
    proto.receive(HELLO, 0.0)
    [event] = proto.receive(envelope("e-1"), 1.0)
    assert proto.data_to_send() == []  # nothing until the event is recorded
    assert isinstance(event, Envelope)
    assert (event.envelope_id, event.type, event.retry_attempt) == ("e-1", "events_api", 0)
    assert event.payload["event_id"] == "Ev1"
    [retried] = proto.receive(envelope("e-2", retry_attempt=1), 2.0)
    assert isinstance(retried, Envelope) and retried.retry_attempt == 1
    assert proto.unacked == 2
    assert proto.ack("e-2") and proto.ack("e-1")
    assert proto.data_to_send() == [json.dumps({"envelope_id": "e-2"}), json.dumps({"envelope_id": "e-1"})]
    assert not proto.ack("e-1")  # once
    assert not proto.ack("e-unknown")
    proto.receive(envelope("e-3"), 3.0)
    proto.connection_lost()
    proto.connection_made(4.0)
    assert not proto.ack("e-3")  # its connection ended: Slack delivers it again
    assert proto.data_to_send() == [] and proto.acks_sent == 2


@pytest.mark.parametrize("reason", ["refresh_requested", "warning"])
def test_disconnect_closes_and_resumes(reason: str) -> None:
    proto = opened()
    proto.receive(HELLO, 0.0)
    assert proto.receive(json.dumps({"type": "disconnect", "reason": reason}), 1.0) == [
        Disconnect(reason=reason)
    ]
    assert proto.close_requested() is not None
    proto.connection_lost()
    assert state_of(proto) is ConnectionState.RESUMING
    proto.connection_made(2.0)
    assert proto.close_requested() is None
    proto.receive(HELLO, 2.1)
    assert state_of(proto) is ConnectionState.READY


def test_link_disabled_stops() -> None:
    proto = opened()
    proto.receive(HELLO, 0.0)
    proto.receive(json.dumps({"type": "disconnect", "reason": "link_disabled"}), 1.0)
    proto.connection_lost()
    assert state_of(proto) is ConnectionState.CLOSED


def test_no_hello_in_time_closes() -> None:
    proto = opened()
    assert proto.next_deadline() == 10.0
    proto.tick(9.0)
    assert proto.close_requested() is None
    proto.tick(10.0)
    assert proto.close_requested() is not None
    proto.connection_lost()
    assert state_of(proto) is ConnectionState.CONNECTING


def test_bad_frames_are_refused() -> None:
    proto = opened()
    with pytest.raises(GatewayProtocolError):
        proto.receive("{", 0.0)
    with pytest.raises(GatewayProtocolError):
        proto.receive("[1]", 0.0)
    proto.receive(HELLO, 0.0)
    with pytest.raises(StateTransitionError, match="expected state connecting or resuming"):
        proto.receive(HELLO, 0.1)
