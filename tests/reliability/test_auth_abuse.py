"""Abuse of authentication against the live daemon: wrong and missing tokens, connections calling
every method their scopes do not allow, browser connections from another site, replayed signed
webhook requests (Slack Events API and Discord Interactions mounted under `/bindings/`), and
repeated failures from one address (slowed down, never locking the operator out)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from gateway.client import ConnectError, GatewayClient
from gateway.protocol.methods import METHODS, Scope, expand_scopes
from tests.daemon import Daemon, start_daemon
from tests.reliability._support import connected, log_records

SLACK_SECRET = "reliability-signing-secret"
DISCORD_KEY = Ed25519PrivateKey.generate()
DISCORD_PUBLIC_HEX = DISCORD_KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
DEAD_API = "http://127.0.0.1:9/"  # discard port: the bindings' outbound calls fail fast
BINDINGS = f"""
[bindings.slack.work]
mode = "events"
api_base_url = "{DEAD_API}"

[bindings.discord.main]
mode = "interactions"
api_base_url = "{DEAD_API}"
application_id = "123"
"""
BINDING_ENV = {
    "SLACK_BOT_TOKEN": "xoxb-test",
    "SLACK_SIGNING_SECRET": SLACK_SECRET,
    "DISCORD_BOT_TOKEN": "discord-test",
    "DISCORD_PUBLIC_KEY": DISCORD_PUBLIC_HEX,
}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    running = start_daemon(tmp_path_factory.mktemp("auth"), config=BINDINGS, env=BINDING_ENV)
    try:
        yield running
    finally:
        running.stop()


async def _refused(daemon: Daemon, **kwargs: Any) -> ConnectError:
    client = GatewayClient(daemon.url, **kwargs)
    with pytest.raises(ConnectError) as caught:
        await client.connect()
    await client.aclose()
    return caught.value


async def test_wrong_or_missing_token_is_refused(daemon: Daemon) -> None:
    wrong = await _refused(daemon, token=daemon.token[:-1] + ("A" if daemon.token[-1] != "A" else "B"))
    assert wrong.code == "INVALID_REQUEST" and wrong.details["code"] == "AUTH_TOKEN_MISMATCH", wrong.details
    missing = await _refused(daemon)
    assert missing.code == "INVALID_REQUEST" and missing.details["code"] == "AUTH_TOKEN_MISSING", (
        missing.details
    )
    password = await _refused(daemon, password="not-the-secret")
    assert password.details["code"] in ("AUTH_TOKEN_MISMATCH", "AUTH_PASSWORD_MISMATCH"), password.details


# Params that pass validation for most methods, so a missing scope is what decides the answer.
PLAUSIBLE: dict[str, Any] = {
    "key": "agent:main:scopes",
    "sessionKey": "agent:main:scopes",
    "message": "hi",
    "idempotencyKey": "scopes-1",
    "runId": "scopes-1",
    "sessionId": "00000000-0000-0000-0000-000000000000",
    "code": "ABCDEF",
    "label": "x",
}


@pytest.mark.parametrize(
    "granted",
    [("operator.read",), ("operator.write",), ("operator.admin",)],
    ids=["read-only", "read-write", "admin"],
)
async def test_every_method_without_its_scope_is_forbidden(daemon: Daemon, granted: tuple[str, ...]) -> None:
    allowed = expand_scopes(granted)
    wrong: list[str] = []
    async with connected(daemon, scopes=granted, caps=()) as client:
        assert sorted(client.hello["auth"]["scopes"]) == sorted(granted)
        for method, spec in sorted(METHODS.items()):
            fields = {f.alias or name for name, f in spec.params.model_fields.items()}
            params = {k: v for k, v in PLAUSIBLE.items() if k in fields} if fields else {}
            response = await client.request(method, params, timeout=20)
            if method == "agent" and response.get("_final") is not None:
                await response["_final"]
            error = response.get("error") or {}
            forbidden = error.get("code") == "FORBIDDEN"
            if spec.scope in allowed:
                if forbidden:
                    wrong.append(f"{method}: forbidden although {spec.scope} was granted")
            elif not (forbidden and error["details"]["code"] == "MISSING_SCOPE"):
                wrong.append(f"{method} (needs {spec.scope}) answered {response}")
            elif error["details"]["missingScope"] != spec.scope:
                wrong.append(f"{method}: names {error['details']['missingScope']}, needs {spec.scope}")
    assert not wrong, "\n".join(wrong)
    if Scope.ADMIN not in allowed:
        assert any(spec.scope not in allowed for spec in METHODS.values())


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "http://localhost.evil.example", "null", "http://127.0.0.1:1"]
)
async def test_browser_connection_from_another_origin_is_refused(daemon: Daemon, origin: str) -> None:
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(daemon.url, origin=origin, open_timeout=5):  # type: ignore[arg-type]
            pass
    assert refused.value.response.status_code == 403
    own = f"http://127.0.0.1:{daemon.port}"
    async with websockets.connect(daemon.url, origin=own, open_timeout=5) as ws:  # type: ignore[arg-type]
        assert json.loads(await ws.recv())["event"] == "connect.challenge"


def _slack_request(body: bytes, timestamp: int, secret: str = SLACK_SECRET) -> dict[str, str]:
    base = b"v0:" + str(timestamp).encode() + b":" + body
    signature = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {
        "x-slack-request-timestamp": str(timestamp),
        "x-slack-signature": signature,
        "content-type": "application/json",
    }


async def test_replayed_or_forged_slack_webhook_is_refused(daemon: Daemon) -> None:
    url = f"{daemon.http_url}/bindings/slack/work/events"
    body = json.dumps({"type": "url_verification", "challenge": "c-123"}).encode()
    now = int(time.time())
    async with httpx.AsyncClient(timeout=10) as http:
        fresh = await http.post(url, content=body, headers=_slack_request(body, now))
        assert fresh.status_code == 200 and fresh.json() == {"challenge": "c-123"}, fresh.text
        stale = await http.post(url, content=body, headers=_slack_request(body, now - 360))
        assert stale.status_code == 401, stale.text
        future = await http.post(url, content=body, headers=_slack_request(body, now + 360))
        assert future.status_code == 401, future.text
        tampered = await http.post(
            url, content=body.replace(b"c-123", b"c-999"), headers=_slack_request(body, now)
        )
        assert tampered.status_code == 401, tampered.text
        forged = await http.post(url, content=body, headers=_slack_request(body, now, secret="guessed"))
        assert forged.status_code == 401, forged.text
        unsigned = await http.post(url, content=body, headers={"content-type": "application/json"})
        assert unsigned.status_code == 401, unsigned.text


def _discord_request(body: bytes, timestamp: int, key: Ed25519PrivateKey = DISCORD_KEY) -> dict[str, str]:
    signature = key.sign(str(timestamp).encode() + body).hex()
    return {
        "x-signature-ed25519": signature,
        "x-signature-timestamp": str(timestamp),
        "content-type": "application/json",
    }


async def test_replayed_or_forged_discord_interaction_is_refused(daemon: Daemon) -> None:
    url = f"{daemon.http_url}/bindings/discord/main/interactions"
    body = json.dumps({"type": 1, "id": "ping-1", "application_id": "123"}).encode()
    now = int(time.time())
    async with httpx.AsyncClient(timeout=10) as http:
        fresh = await http.post(url, content=body, headers=_discord_request(body, now))
        assert fresh.status_code == 200 and fresh.json() == {"type": 1}, fresh.text
        replayed = await http.post(url, content=body, headers=_discord_request(body, now - 3600))
        assert replayed.status_code == 401, "a signed interaction captured an hour ago was accepted"
        tampered = await http.post(
            url, content=body.replace(b"ping-1", b"ping-2"), headers=_discord_request(body, now)
        )
        assert tampered.status_code == 401, tampered.text
        forged = await http.post(
            url, content=body, headers=_discord_request(body, now, key=Ed25519PrivateKey.generate())
        )
        assert forged.status_code == 401, forged.text


async def _wrong_guess_forwarded_for(daemon: Daemon, forwarded_for: str) -> str:
    """A wrong token sent with an `X-Forwarded-For` header; the refusal's detail code."""
    headers = {"X-Forwarded-For": forwarded_for}
    async with websockets.connect(daemon.url, additional_headers=headers, open_timeout=10) as ws:
        await ws.recv()  # the challenge
        params = {
            "minProtocol": 4,
            "maxProtocol": 4,
            "client": {"id": "guess", "version": "1", "platform": "linux", "mode": "cli"},
            "role": "operator",
            "auth": {"token": "wrong-token"},
        }
        await ws.send(json.dumps({"type": "req", "id": "c", "method": "connect", "params": params}))
        answer = json.loads(await ws.recv())
        return str(answer["error"]["details"]["code"])


async def test_wrong_tokens_are_slowed_down_but_never_lock_the_operator_out(gateway_home: Path) -> None:
    daemon = start_daemon(gateway_home)  # default delays: 0.25 s, doubling, at most 5 s
    try:
        # Ten wrong tokens from the operator's own address, all at once; half of them claim to
        # be forwarded for another address, which must not reset or split the count.
        direct, forwarded = await asyncio.gather(
            asyncio.gather(*(_refused(daemon, token="wrong-token") for _ in range(5))),
            asyncio.gather(*(_wrong_guess_forwarded_for(daemon, "203.0.113.9") for _ in range(5))),
        )
        assert {f.details["code"] for f in direct} | set(forwarded) == {"AUTH_TOKEN_MISMATCH"}
        # One more wrong guess waits the longest delay; meanwhile the operator gets in at once.
        guess = asyncio.create_task(_refused(daemon, token="wrong-token"))
        await asyncio.sleep(0.5)
        async with connected(daemon) as client:
            assert (await client.call("health"))["ok"]
            assert client.hello["auth"]["scopes"] == ["operator.read", "operator.write", "operator.admin"]
        assert not guess.done(), "the right token waited behind a wrong guess"
        started = time.monotonic()
        assert (await guess).details["code"] == "AUTH_TOKEN_MISMATCH"
        assert time.monotonic() - started > 3.0  # it was still waiting out its 5 s
    finally:
        daemon.stop()
    records = log_records(daemon)
    failures = [r for r in records if r.get("event") == "authentication failed"]
    delays = [r for r in records if r.get("event") == "slowing down failed authentications"]
    assert len(failures) == 11 and {r["address"] for r in failures} == {"127.0.0.1"}
    assert {r["reason"] for r in failures} == {"AUTH_TOKEN_MISMATCH"}
    assert sorted(r["delay_s"] for r in delays) == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0]
    assert {r["address"] for r in delays} == {"127.0.0.1"}
