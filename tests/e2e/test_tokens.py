"""Named, scoped tokens end to end: `gatewayctl tokens` against a real gatewayd, and clients
connecting with what it printed."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.client import ConnectError, GatewayClient
from tests.daemon import Daemon
from tests.e2e.helpers import module_daemon

CTL = [sys.executable, "-m", "gateway.cli.gatewayctl"]
EVERYTHING = ("operator.read", "operator.write", "operator.admin")


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with module_daemon(tmp_path_factory, "tokens") as daemon:
        yield daemon


def ctl(daemon: Daemon, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    proc = subprocess.run(
        [*CTL, "--url", daemon.url, "--token", token or daemon.token, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc
    return proc


def stored_tokens(daemon: Daemon) -> list[tuple[Any, ...]]:
    with sqlite3.connect(daemon.home / "gateway.db") as db:
        return list(db.execute("SELECT name, secret_sha256, scopes FROM gateway_tokens ORDER BY name"))


async def test_a_read_only_token_stays_read_only_and_revoking_it_closes_its_socket(gw: Daemon) -> None:
    made = await asyncio.to_thread(ctl, gw, "tokens", "create", "viewer", "--scopes", "operator.read")
    assert made.returncode == 0, made
    secret = made.stdout.strip()
    assert secret.startswith("gwt_") and "only time" in made.stderr
    # Only the hash is kept.
    assert stored_tokens(gw) == [("viewer", hashlib.sha256(secret.encode()).hexdigest(), "operator.read")]
    assert secret not in (gw.home / "gateway.db").read_bytes().decode("latin-1")

    async with GatewayClient(gw.url, token=secret, scopes=EVERYTHING) as viewer:
        assert viewer.hello["auth"]["scopes"] == ["operator.read"]  # asked for admin, got read
        assert (await viewer.call("sessions.list"))["count"] >= 0
        for method, params, scope in (
            (
                "chat.send",
                {"sessionKey": "agent:main:t", "message": "x", "idempotencyKey": "t1"},
                "operator.write",
            ),
            ("tokens.create", {"name": "mine", "scopes": ["operator.admin"]}, "operator.admin"),
        ):
            refused = await viewer.request(method, params)
            assert refused["ok"] is False and refused["error"]["code"] == "FORBIDDEN", refused
            assert refused["error"]["details"]["missingScope"] == scope
        listed = json.loads((await asyncio.to_thread(ctl, gw, "--json", "tokens", "list")).stdout)
        assert [(t["name"], t["scopes"], t["connections"]) for t in listed["tokens"]] == [
            ("viewer", ["operator.read"], 1)
        ]

        revoked = await asyncio.to_thread(ctl, gw, "tokens", "revoke", "viewer")
        assert revoked.returncode == 0 and "closed 1 connection using it" in revoked.stdout, revoked
        await asyncio.wait_for(viewer.closed.wait(), 5)
        assert (viewer.close_code, viewer.close_reason) == (1008, "token revoked")

    with pytest.raises(ConnectError) as refused_again:
        await GatewayClient(gw.url, token=secret).connect()
    assert refused_again.value.details["code"] == "AUTH_TOKEN_MISMATCH"
    assert stored_tokens(gw) == []


async def test_token_commands_need_admin_and_an_admin_token_may_revoke_itself(gw: Daemon) -> None:
    made = await asyncio.to_thread(ctl, gw, "tokens", "create", "ci", "--scopes", "operator.admin")
    secret = made.stdout.strip()
    reader = await asyncio.to_thread(ctl, gw, "tokens", "create", "reader", "--scopes", "operator.read")
    denied = await asyncio.to_thread(ctl, gw, "tokens", "list", token=reader.stdout.strip())
    assert denied.returncode == 4 and "operator.admin" in denied.stderr, denied
    bad = await asyncio.to_thread(ctl, gw, "tokens", "create", "x", "--scopes", "root")
    assert bad.returncode == 2 and "unknown scope 'root'" in bad.stderr, bad
    again = await asyncio.to_thread(ctl, gw, "tokens", "create", "ci", "--scopes", "operator.read")
    assert again.returncode == 1 and "exists" in again.stderr, again
    human = await asyncio.to_thread(ctl, gw, "tokens", "list", token=secret)
    assert "ci" in human.stdout and "operator.admin" in human.stdout, human
    itself = await asyncio.to_thread(ctl, gw, "tokens", "revoke", "ci", token=secret)
    assert itself.returncode == 0 and "revoked token ci" in itself.stdout, itself
    gone = await asyncio.to_thread(ctl, gw, "tokens", "revoke", "ci")
    assert gone.returncode == 1 and "no token named 'ci'" in gone.stderr, gone
    async with GatewayClient(gw.url, token=gw.token) as admin:
        assert [t["name"] for t in (await admin.call("tokens.list"))["tokens"]] == ["reader"]
        answer = await admin.call("tokens.revoke", {"name": "reader"})
        assert answer == {"name": "reader", "revoked": True, "closedConnections": 0}
        assert (await admin.call("tokens.list"))["tokens"] == []
