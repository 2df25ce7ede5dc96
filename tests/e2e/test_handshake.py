"""The handshake and the calls the real OpenClaw CLI makes, against the real daemon."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websockets

from gateway.client import GatewayClient
from tests.daemon import Daemon, start_daemon
from tests.e2e.helpers import (
    MAIN,
    Raw,
    connect_params,
    load_capture,
    module_daemon,
    shape_problems,
)

CONFIG = """
[gateway]
handshake_timeout_s = 1.0
allowed_origins = ["https://dash.example.com"]
max_payload = 131072
request_rate_per_s = 10
request_burst = 10
"""


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with module_daemon(tmp_path_factory, "handshake", config=CONFIG) as daemon:
        yield daemon


async def test_the_challenge_comes_first_without_seq(gw: Daemon) -> None:
    raw = await Raw.open(gw.url)
    challenge = await raw.recv()
    assert challenge["type"] == "event" and challenge["event"] == "connect.challenge"
    assert "seq" not in challenge
    uuid.UUID(challenge["payload"]["nonce"])
    assert abs(challenge["payload"]["ts"] - time.time() * 1000) < 10_000
    await raw.aclose()


HELLO_KEYS = {
    "": ["type", "protocol", "server", "features", "snapshot", "auth", "policy"],
    "server": ["version", "connId"],
    "features": ["methods", "events"],
    "snapshot": ["presence", "health", "stateVersion", "uptimeMs", "sessionDefaults"],
    "auth": ["method", "role", "scopes"],
    "policy": ["maxPayload", "maxBufferedBytes", "tickIntervalMs"],
}
ANSWER_KEYS = {
    "health": ["ok", "ts", "durationMs", "channels", "channelOrder", "defaultAgentId", "agents", "sessions"],
    "sessions.list": [
        "ts",
        "path",
        "count",
        "totalCount",
        "limitApplied",
        "nextOffset",
        "hasMore",
        "defaults",
        "sessions",
    ],
    "chat.send": ["runId", "status"],
    "chat.history": [
        "sessionKey",
        "sessionId",
        "messages",
        "pendingInputs",
        "hasMore",
        "totalMessages",
        "sessionInfo",
    ],
}
ROW_KEYS = [
    "key",
    "sessionId",
    "kind",
    "agentId",
    "displayName",
    "createdAt",
    "updatedAt",
    "archived",
    "hasActiveRun",
    "activeRunIds",
    "effectiveQueueMode",
    "model",
    "modelProvider",
    "inputTokens",
    "outputTokens",
    "totalTokens",
]


def _hello_problems(ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    problems = []
    for section, keys in HELLO_KEYS.items():
        a = ours[section] if section else ours
        b = theirs[section] if section else theirs
        problems += shape_problems(a, b, keys, f"hello-ok{'.' + section if section else ''}")
    return problems


def _method(frames: list[dict[str, Any]]) -> str:
    return str([r["frame"] for r in frames if r["dir"] == "C->S"][-1]["method"])


async def test_replaying_the_real_cli_gets_answers_shaped_like_openclaw(gw: Daemon) -> None:
    records = load_capture()
    conns: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        conns.setdefault(record["conn"], []).append(record)
    problems: list[str] = []
    # sessions.list last, so that it lists the session chat.send created.
    order = sorted(conns.values(), key=lambda frames: _method(frames) == "sessions.list")
    for frames in order:
        sent = [r["frame"] for r in frames if r["dir"] == "C->S"]
        got = [r["frame"] for r in frames if r["dir"] == "S->C" and r["frame"]["type"] == "res"]
        connect, call = sent
        connect["params"]["auth"]["token"] = gw.token
        raw = await Raw.open(gw.url)
        assert (await raw.recv())["event"] == "connect.challenge"
        await raw.send(connect)
        hello = await raw.recv()
        assert hello["id"] == connect["id"] and hello["ok"], hello
        captured_hello = [f for f in got if f["payload"].get("type") == "hello-ok"]
        if captured_hello:
            problems += _hello_problems(hello["payload"], captured_hello[0]["payload"])
        # Least privilege as the CLI asks for it: exactly the requested scopes.
        assert hello["payload"]["auth"]["scopes"] == connect["params"]["scopes"]
        if call["method"] == "chat.history":
            async with GatewayClient(gw.url, token=gw.token) as helper:
                await helper.call("agent.wait", {"runId": "idem-1", "timeoutMs": 10_000})
        await raw.send(call)
        while True:
            answer = await raw.recv()
            if answer["type"] == "res":
                break
        assert answer["id"] == call["id"] and answer["ok"], answer
        ours, theirs = answer["payload"], got[-1]["payload"]
        method = call["method"]
        problems += shape_problems(ours, theirs, ANSWER_KEYS[method], method)
        if method == "sessions.list":
            assert ours["sessions"], "the session chat.send created is listed"
            problems += shape_problems(ours["sessions"][0], theirs["sessions"][0], ROW_KEYS, "row")
        if method == "chat.history":
            info_keys = [k for k in ROW_KEYS if k not in ("inputTokens", "outputTokens")]
            problems += shape_problems(ours["sessionInfo"], theirs["sessionInfo"], info_keys, "sessionInfo")
            user = ours["messages"][0]
            problems += shape_problems(user, theirs["messages"][0], ["role", "timestamp"], "message")
            assert user["role"] == "user" and user["idempotencyKey"].startswith("idem-1")
            assert [m["role"] for m in ours["messages"]] == ["user", "assistant"]
        if method == "chat.send":
            assert ours == {"runId": "idem-1", "status": "started"}
        await raw.aclose()
    assert not problems, "\n".join(problems)


async def _refused(daemon: Daemon, params: dict[str, Any]) -> tuple[dict[str, Any], int | None, str]:
    raw = await Raw.open(daemon.url)
    answer = await raw.handshake(params)
    code, reason = await raw.closed()
    return answer, code, reason


async def test_protocol_mismatch_closes_1002(gw: Daemon) -> None:
    answer, code, _ = await _refused(gw, connect_params(gw.token, min_protocol=5, max_protocol=6))
    assert answer["ok"] is False
    assert answer["error"]["code"] == "INVALID_REQUEST"
    assert answer["error"]["details"]["code"] == "PROTOCOL_MISMATCH"
    assert answer["error"]["details"]["expectedProtocol"] == 4
    assert code == 1002


@pytest.mark.parametrize(
    ("token", "detail"), [("wrong-token", "AUTH_TOKEN_MISMATCH"), (None, "AUTH_TOKEN_MISSING")]
)
async def test_bad_or_missing_token_closes_1008(gw: Daemon, token: str | None, detail: str) -> None:
    answer, code, reason = await _refused(gw, connect_params(token))
    assert answer["error"]["code"] == "INVALID_REQUEST"
    assert answer["error"]["details"]["code"] == detail
    assert code == 1008 and reason.startswith("unauthorized")


async def test_first_frame_not_connect_closes_1008(gw: Daemon) -> None:
    raw = await Raw.open(gw.url)
    await raw.recv()
    await raw.send({"type": "req", "id": "h1", "method": "health", "params": {}})
    answer = await raw.recv()
    assert answer["id"] == "h1" and answer["ok"] is False
    assert answer["error"]["message"] == "invalid handshake: first request must be connect"
    assert (await raw.closed())[0] == 1008


async def test_oversize_frame_before_connect_closes_1009(gw: Daemon) -> None:
    raw = await Raw.open(gw.url)
    await raw.recv()
    await raw.send("x" * (65 * 1024))
    assert (await raw.closed())[0] == 1009


async def test_a_silent_client_is_closed_after_the_handshake_timeout(gw: Daemon) -> None:
    raw = await Raw.open(gw.url)
    await raw.recv()
    started = time.monotonic()
    code, _ = await raw.closed(timeout=5)
    assert code == 1008
    assert 0.8 < time.monotonic() - started < 4


async def test_unknown_method_is_answered_and_the_connection_stays(gw: Daemon) -> None:
    async with GatewayClient(gw.url, token=gw.token) as client:
        answer = await client.request("no.such.method", {})
        assert answer["ok"] is False
        assert answer["error"] == {"code": "INVALID_REQUEST", "message": "unknown method: no.such.method"}
        assert (await client.call("health"))["ok"] is True


@pytest.mark.parametrize(
    ("method", "params", "scope"),
    [
        ("chat.send", {"sessionKey": MAIN, "message": "x", "idempotencyKey": "ro-1"}, "operator.write"),
        ("sessions.reset", {"key": MAIN}, "operator.admin"),
        ("config.reload", {}, "operator.admin"),
        ("chat.inject", {"sessionKey": MAIN, "message": "x"}, "operator.admin"),
    ],
)
async def test_a_read_only_connection_cannot_write(
    gw: Daemon, method: str, params: dict[str, Any], scope: str
) -> None:
    async with GatewayClient(gw.url, token=gw.token, scopes=("operator.read",)) as client:
        assert client.hello["auth"]["scopes"] == ["operator.read"]
        answer = await client.request(method, params)
        assert answer["ok"] is False
        error = answer["error"]
        assert error["code"] == "FORBIDDEN"
        assert error["message"] == f"missing scope: {scope}"
        assert error["details"] == {"code": "MISSING_SCOPE", "missingScope": scope, "requiredScopes": [scope]}
        assert (await client.call("sessions.list"))["count"] >= 0


async def test_browser_origins(gw: Daemon) -> None:
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        await Raw.open(gw.url, origin="http://evil.example")
    assert refused.value.response.status_code == 403
    for origin in (gw.http_url, "https://dash.example.com"):
        raw = await Raw.open(gw.url, origin=origin)
        answer = await raw.handshake(connect_params(gw.token))
        assert answer["ok"], (origin, answer)
        await raw.aclose()


async def test_repeated_auth_failures_are_slowed_and_the_right_token_gets_in(gateway_home: Path) -> None:
    config = "[gateway]\nauth_failure_delay_s = 0.2\nauth_failure_max_delay_s = 0.4\n"
    daemon = start_daemon(gateway_home, config=config)
    try:
        for _ in range(3):
            started = time.monotonic()
            answer, code, _ = await _refused(daemon, connect_params("wrong"))
            assert answer["error"]["details"]["code"] == "AUTH_TOKEN_MISMATCH" and code == 1008
            assert time.monotonic() - started >= 0.2  # each refusal waited its delay
        # Never locked out: the right token is admitted after any number of failures.
        raw = await Raw.open(daemon.url)
        answer = await raw.handshake(connect_params(daemon.token))
        assert answer["ok"], answer
        await raw.aclose()
    finally:
        assert daemon.stop() == 0, daemon.logs()


async def test_pipelined_requests_after_connect_are_all_answered(gw: Daemon) -> None:
    raw = await Raw.open(gw.url)
    await raw.recv()
    await raw.send({"type": "req", "id": "c", "method": "connect", "params": connect_params(gw.token)})
    for n in range(5):
        await raw.send({"type": "req", "id": f"p{n}", "method": "health", "params": {}})
    ids: set[str] = set()
    async with asyncio.timeout(10):
        while len(ids) < 6:
            frame = await raw.recv()
            if frame["type"] == "res":
                assert frame["ok"], frame
                ids.add(frame["id"])
    assert ids == {"c", "p0", "p1", "p2", "p3", "p4"}
    await raw.aclose()


async def test_oversize_frame_after_connect_closes_1009(gw: Daemon) -> None:
    raw = await Raw.open(gw.url)
    hello = await raw.handshake(connect_params(gw.token))
    assert hello["payload"]["policy"]["maxPayload"] == 131072
    # Under the limit is fine (the pre-connect limit no longer applies) ...
    big = {"sessionKey": MAIN, "message": "x" * 100_000, "idempotencyKey": "big-ok"}
    assert (await raw.request("chat.send", big))["ok"] is True
    # ... over it closes the connection.
    await raw.send({"type": "req", "id": "big", "method": "health", "params": {"pad": "x" * 140_000}})
    assert (await raw.closed())[0] == 1009


async def test_requests_over_the_rate_limit_are_refused_retryably(gw: Daemon) -> None:
    raw = await Raw.open(gw.url)
    await raw.handshake(connect_params(gw.token))
    for n in range(30):
        await raw.send({"type": "req", "id": f"q{n}", "method": "health", "params": {}})
    answers: dict[str, dict[str, Any]] = {}
    async with asyncio.timeout(10):
        while len(answers) < 30:
            frame = await raw.recv()
            if frame["type"] == "res":
                answers[frame["id"]] = frame
    refused = [a for a in answers.values() if not a["ok"]]
    assert 10 <= 30 - len(refused) <= 20
    for answer in refused:
        assert answer["error"]["code"] == "UNAVAILABLE"
        assert answer["error"]["retryable"] is True and answer["error"]["retryAfterMs"] > 0
    await asyncio.sleep(max(a["error"]["retryAfterMs"] for a in refused[:1]) / 1000 + 0.1)
    assert (await raw.request("health"))["ok"] is True
    await raw.aclose()
