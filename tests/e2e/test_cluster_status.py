"""A single gatewayd names itself and reports itself alone: `cluster.status`, the `node` and
`cluster` fields of `health`, `hello-ok` and `status`, `gatewayctl cluster status`, and session
rows without `ownerNode`. The real daemon, the real CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from gateway.client import CallError, GatewayClient
from tests.daemon import Daemon, start_daemon
from tests.e2e.helpers import eventually, module_daemon
from tests.sessions.conftest import PG_URL, drop_schema, needs_postgres, url_with_schema

CTL = [sys.executable, "-m", "gateway.cli.gatewayctl"]


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with module_daemon(tmp_path_factory, "cluster-status") as daemon:
        yield daemon


def gatewayctl(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(GATEWAY_URL=daemon.url, GATEWAY_TOKEN=daemon.token, GATEWAY_HOME=str(daemon.home))
    done = subprocess.run([*CTL, *args], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done


async def test_a_single_node_reports_itself_alone(gw: Daemon) -> None:
    async with GatewayClient(gw.url, token=gw.token) as client:
        for index in range(2):
            await client.call("sessions.create", {"key": f"agent:main:cluster-{index}"})
        status = await client.call("status")
        answer = await client.call("cluster.status")
    node_id = f"{socket.gethostname()}-{status['pid']}"
    assert answer["clustered"] is False
    assert answer["node"] == node_id
    assert "sessionsUnowned" not in answer
    [node] = answer["nodes"]
    assert node["nodeId"] == node_id
    assert node["state"] == "running" and node["alive"] is True and node["heartbeatAgeMs"] == 0
    assert node["sessionsOwned"] >= 2  # every stored session is this node's
    assert node["channelAccounts"] == []
    assert node["runs"] == status["runsInFlight"] and node["liveSessions"] == status["liveSessions"]
    assert node["pid"] == status["pid"]
    assert abs(node["startedAt"] - (time.time() * 1000 - status["uptimeMs"])) < 5_000
    assert node["startedAt"] <= status["sessions"]["recent"][0]["updatedAt"]


async def test_health_hello_and_status_name_the_node(gw: Daemon) -> None:
    async with GatewayClient(gw.url, token=gw.token) as client:
        hello_health = client.hello["snapshot"]["health"]
        health = await client.call("health")
        status = await client.call("status")
    node_id = f"{socket.gethostname()}-{status['pid']}"
    single = {"clustered": False, "nodes": 1}
    for where, payload in (("hello-ok", hello_health), ("health", health), ("status", status)):
        assert payload["node"] == node_id, where
        assert payload["cluster"] == single, where


async def test_cluster_status_needs_only_read_access(gw: Daemon) -> None:
    async with GatewayClient(gw.url, token=gw.token) as client:
        reader = (
            await client.call("tokens.create", {"name": "cluster-reader", "scopes": ["operator.read"]})
        )["token"]
    async with GatewayClient(gw.url, token=reader) as client:
        assert (await client.call("cluster.status"))["clustered"] is False
        with pytest.raises(CallError) as refused:
            await client.call("cluster.status", {"verbose": True})
    assert refused.value.code == "INVALID_REQUEST"


async def test_session_rows_carry_no_owner_on_a_single_node(gw: Daemon) -> None:
    async with GatewayClient(gw.url, token=gw.token) as client:
        created = await client.call("sessions.create", {"key": "agent:main:no-owner"})
        described = await client.call("sessions.describe", {"key": "agent:main:no-owner"})
        listed = await client.call("sessions.list", {})
    assert "ownerNode" not in described
    assert all("ownerNode" not in row for row in listed["sessions"])
    assert created["key"] == "agent:main:no-owner"


async def test_gatewayctl_cluster_status_table_and_json(gw: Daemon) -> None:
    async with GatewayClient(gw.url, token=gw.token) as client:

        async def settled() -> bool:
            stored = (await client.call("status"))["sessions"]["count"]
            return bool((await client.call("cluster.status"))["nodes"][0]["sessionsOwned"] == stored)

        await eventually(settled)  # the count is read from memory, refreshed within a second
    table = gatewayctl(gw, "cluster", "status")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    header = next(line for line in lines if "NODE" in line)
    assert [word for word in header.replace("│", " ").split() if word.isupper()] == [
        "NODE",
        "STATE",
        "HEARTBEAT",
        "SESSIONS",
        "CHANNELS",
        "RUNS",
    ]
    answer = json.loads(gatewayctl(gw, "cluster", "status", "--json").stdout)
    node_id = answer["node"]
    [row] = [line for line in lines if node_id in line]
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert cells[0] == f"{node_id} *"
    assert cells[1] == "running"
    assert cells[2] == "-"  # no heartbeat on a single node
    assert int(cells[3]) == answer["nodes"][0]["sessionsOwned"]
    assert cells[4] == "-" and cells[5] == "0"
    assert "a single node, not in a cluster" in table.stdout
    assert answer["clustered"] is False and [n["nodeId"] for n in answer["nodes"]] == [node_id]


@pytest.mark.postgres
@needs_postgres
async def test_a_single_node_on_postgresql_without_redis_is_not_clustered(tmp_path: Path) -> None:
    assert PG_URL is not None
    schema = f"gw_test_{uuid.uuid4().hex[:20]}"
    # A password in the URL (the server trusts loopback and ignores it) is never shown.
    url = url_with_schema(PG_URL, schema).replace("postgres@", "postgres:not-to-be-shown@", 1)
    assert "not-to-be-shown" in url
    env = {"GATEWAY_DATABASE_URL": url, "GATEWAY_CONFIG": ""}
    try:
        async with AsyncExitStack() as stack:
            daemon = start_daemon(tmp_path / "pg", env=env)
            stack.callback(daemon.stop)
            async with GatewayClient(daemon.url, token=daemon.token) as client:
                await client.call("sessions.create", {"key": "agent:main:pg"})
                answer: dict[str, Any] = await client.call("cluster.status")
                health = await client.call("health")
                status = await client.call("status")
                described = await client.call("sessions.describe", {"key": "agent:main:pg"})
        assert answer["clustered"] is False and len(answer["nodes"]) == 1
        assert answer["nodes"][0]["sessionsOwned"] == 1
        assert health["cluster"] == {"clustered": False, "nodes": 1}
        assert health["sessions"]["path"].startswith("postgresql+asyncpg://***@"), health["sessions"]
        assert "not-to-be-shown" not in str(health) and "not-to-be-shown" not in str(status)
        assert "ownerNode" not in described
    finally:
        await drop_schema(PG_URL, schema)
