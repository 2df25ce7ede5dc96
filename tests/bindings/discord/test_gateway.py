"""The Discord Gateway state machine, fed frames directly (no sockets)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from bindings.discord.gateway import (
    ConnectPlan,
    DiscordGatewayProtocol,
    Dispatch,
    GatewayTimings,
    Ready,
    Resumed,
    connect_url,
)
from bindings.errors import GatewayProtocolError, StateTransitionError
from bindings.state import ConnectionState

GATEWAY = "wss://gateway.example/"
RESUME = "wss://resume.example/"
INTENTS = 1 | 512 | 4096 | 32768


def state_of(proto: DiscordGatewayProtocol) -> ConnectionState:
    """The protocol's state, read afresh (keeps the type checker from narrowing it)."""
    return proto.state


def frame(op: int, d: Any = None, t: str | None = None, s: int | None = None) -> str:
    return json.dumps({"op": op, "d": d, "t": t, "s": s})


def sent(proto: DiscordGatewayProtocol) -> list[dict[str, Any]]:
    return [json.loads(f) for f in proto.data_to_send()]


def ready_frame(seq: int = 1) -> str:
    data = {
        "session_id": "sess-1",
        "resume_gateway_url": RESUME,
        "user": {"id": "1000"},
        "application": {"id": "9"},
    }
    return frame(0, data, "READY", seq)


def connected(seed: int = 1) -> DiscordGatewayProtocol:
    """A protocol that identified and received READY (seq 1) at t=0."""
    proto = DiscordGatewayProtocol(token="tok", intents=INTENTS, rng=random.Random(seed))
    proto.start(GATEWAY)
    proto.connection_made(0.0)
    proto.receive(frame(10, {"heartbeat_interval": 1000}), 0.0)
    proto.data_to_send()
    proto.receive(ready_frame(), 0.0)
    return proto


def test_hello_identifies_with_intents_and_schedules_a_jittered_heartbeat() -> None:
    proto = DiscordGatewayProtocol(token="tok", intents=INTENTS, rng=random.Random(7))
    proto.start(GATEWAY)
    plan = proto.next_connection()
    assert plan == ConnectPlan(url="wss://gateway.example/?v=10&encoding=json", delay_s=0.0, resume=False)
    proto.connection_made(10.0)
    assert proto.receive(frame(10, {"heartbeat_interval": 41250}), 10.0) == []
    [identify] = sent(proto)
    assert identify["op"] == 2
    assert identify["d"]["token"] == "tok"
    assert identify["d"]["intents"] == 37377
    assert set(identify["d"]["properties"]) == {"os", "browser", "device"}
    jitter = random.Random(7).random()
    assert proto.next_deadline() == pytest.approx(10.0 + 41.25 * jitter)
    assert state_of(proto) is ConnectionState.CONNECTING, "not ready before READY"


def test_ready_only_then_ready_and_events_carry_seq() -> None:
    proto = DiscordGatewayProtocol(token="tok", intents=INTENTS)
    proto.start(GATEWAY)
    proto.connection_made(0.0)
    proto.receive(frame(10, {"heartbeat_interval": 1000}), 0.0)
    [event] = proto.receive(ready_frame(), 0.1)
    assert event == Ready(session_id="sess-1", user_id="1000", resume_url=RESUME, application_id="9")
    assert state_of(proto) is ConnectionState.READY
    [dispatch] = proto.receive(frame(0, {"id": "5"}, "MESSAGE_CREATE", 2), 0.2)
    assert dispatch == Dispatch(name="MESSAGE_CREATE", seq=2, data={"id": "5"})
    assert proto.seq == 2


def test_heartbeats_carry_the_last_seq_and_a_missing_ack_means_zombie() -> None:
    proto = connected()
    proto.receive(frame(0, {}, "GUILD_CREATE", 7), 0.0)
    deadline = proto.next_deadline()
    assert deadline is not None
    proto.tick(deadline)
    assert sent(proto) == [{"op": 1, "d": 7}]
    proto.receive(frame(11), deadline + 0.1)
    proto.tick(deadline + 1.0)
    assert sent(proto) == [{"op": 1, "d": 7}]
    assert proto.close_requested() is None
    # no ACK for that one: at the next beat the connection is a zombie
    proto.tick(deadline + 2.0)
    assert sent(proto) == []
    close = proto.close_requested()
    assert close is not None and close.code not in (1000, 1001)
    assert proto.next_deadline() is None
    proto.connection_lost(close.code, close.reason)
    assert state_of(proto) is ConnectionState.RESUMING
    plan = proto.next_connection()
    assert plan is not None and plan.resume and plan.url.startswith(RESUME)
    proto.connection_made(50.0)
    proto.receive(frame(10, {"heartbeat_interval": 1000}), 50.0)
    assert sent(proto) == [{"op": 6, "d": {"token": "tok", "session_id": "sess-1", "seq": 7}}]
    [event] = proto.receive(frame(0, None, "RESUMED", 8), 50.1)
    assert event == Resumed(seq=8)
    assert state_of(proto) is ConnectionState.READY


def test_server_heartbeat_request_is_answered_at_once() -> None:
    proto = connected()
    proto.receive(frame(1), 0.5)
    assert sent(proto) == [{"op": 1, "d": 1}]


def test_reconnect_opcode_closes_and_resumes() -> None:
    proto = connected()
    proto.receive(frame(7), 1.0)
    close = proto.close_requested()
    assert close is not None and close.code == 4000
    proto.connection_lost(close.code)
    plan = proto.next_connection()
    assert plan is not None and plan.resume and plan.delay_s == 0.0


def test_invalid_session_not_resumable_waits_then_identifies() -> None:
    proto = connected()
    proto.receive(frame(9, False), 1.0)
    close = proto.close_requested()
    assert close is not None
    proto.connection_lost(close.code)
    plan = proto.next_connection()
    assert plan is not None and not plan.resume
    assert 1.0 <= plan.delay_s <= 5.0
    assert plan.url.startswith(GATEWAY)
    assert proto.session_id is None and proto.seq is None
    assert state_of(proto) is ConnectionState.CONNECTING
    proto.connection_made(10.0)
    proto.receive(frame(10, {"heartbeat_interval": 1000}), 10.0)
    assert sent(proto)[0]["op"] == 2


def test_invalid_session_resumable_resumes() -> None:
    proto = connected()
    proto.receive(frame(9, True), 1.0)
    close = proto.close_requested()
    assert close is not None
    proto.connection_lost(close.code)
    plan = proto.next_connection()
    assert plan is not None and plan.resume


def test_dropped_connection_resumes_and_new_session_codes_identify() -> None:
    proto = connected()
    proto.connection_lost(None)
    plan = proto.next_connection()
    assert plan is not None and plan.resume and plan.delay_s == 0.0
    proto.connection_made(1.0)
    proto.receive(frame(10, {"heartbeat_interval": 1000}), 1.0)
    proto.data_to_send()
    proto.receive(frame(0, None, "RESUMED", 2), 1.0)
    proto.connection_lost(4009, "Session timed out")
    plan = proto.next_connection()
    assert plan is not None and not plan.resume and proto.session_id is None


@pytest.mark.parametrize("code", [4004, 4010, 4011, 4012, 4013, 4014])
def test_fatal_close_codes_stop_for_good(code: int) -> None:
    proto = connected()
    proto.connection_lost(code, "nope")
    assert state_of(proto) is ConnectionState.CLOSED
    assert proto.next_connection() is None
    assert proto.fatal is not None and proto.fatal.code == code


def test_no_hello_closes_the_connection() -> None:
    proto = DiscordGatewayProtocol(token="tok", intents=INTENTS, timings=GatewayTimings(hello_timeout_s=5.0))
    proto.start(GATEWAY)
    proto.connection_made(0.0)
    assert proto.next_deadline() == 5.0
    proto.tick(4.9)
    assert proto.close_requested() is None
    proto.tick(5.0)
    assert proto.close_requested() is not None


def test_connections_that_keep_failing_back_off() -> None:
    timings = GatewayTimings(reconnect_initial_s=1.0, reconnect_max_s=8.0)
    proto = DiscordGatewayProtocol(token="tok", intents=INTENTS, timings=timings, rng=random.Random(3))
    proto.start(GATEWAY)
    delays = []
    for _ in range(6):
        proto.connect_failed()
        plan = proto.next_connection()
        assert plan is not None
        delays.append(plan.delay_s)
    assert delays[0] <= 1.0 and delays[-1] <= 8.0
    assert delays[-1] > delays[0]


def test_frames_out_of_order_are_refused() -> None:
    proto = connected()
    with pytest.raises(StateTransitionError, match="expected state connecting"):
        proto.receive(ready_frame(3), 1.0)
    with pytest.raises(GatewayProtocolError):
        proto.receive("not json", 1.0)
    with pytest.raises(GatewayProtocolError):
        proto.receive(frame(10, {"heartbeat_interval": 5}), 1.0)


def test_connect_url_sets_version_and_encoding() -> None:
    assert connect_url("wss://g.example") == "wss://g.example/?v=10&encoding=json"
    assert connect_url("ws://127.0.0.1:9/resume?v=9") == "ws://127.0.0.1:9/resume?v=10&encoding=json"
