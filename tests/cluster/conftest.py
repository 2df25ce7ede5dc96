"""Clusters of real `gatewayd` nodes on the real PostgreSQL and Redis.

Each test gets its own PostgreSQL schema and Redis channel prefix, so tests (and parallel test
workers) never see each other's nodes, sessions or messages. The nodes run on loopback ports of
this machine, each with its own state directory, one shared token and a short lease.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.daemon import Daemon, start_daemon
from tests.sessions.conftest import PG_URL, drop_schema, url_with_schema

REDIS_URL = os.environ.get("GATEWAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
TOKEN = "cluster-test-token-0123456789"
LEASE_TTL_S = 2.0


def _redis_up(url: str) -> bool:
    host_port = url.split("//", 1)[1].split("/", 1)[0]
    host, _, port = host_port.partition(":")
    try:
        with socket.create_connection((host, int(port or 6379)), timeout=1):
            return True
    except OSError:
        return False


# CI sets GATEWAY_TEST_REQUIRE_CLUSTER: there a missing PostgreSQL or Redis fails the tests
# instead of skipping them.
needs_cluster = pytest.mark.skipif(
    not os.environ.get("GATEWAY_TEST_REQUIRE_CLUSTER") and (not PG_URL or not _redis_up(REDIS_URL)),
    reason="needs GATEWAY_TEST_DATABASE_URL (PostgreSQL) and Redis at GATEWAY_TEST_REDIS_URL",
)


@dataclass
class Cluster:
    """The nodes of one test's cluster; `start(name)` adds one, `nodes[name]` finds it."""

    base: Path
    database_url: str
    prefix: str
    redis_url: str = REDIS_URL
    nodes: dict[str, Daemon] = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)
    lease_ttl_s: float = LEASE_TTL_S
    extra_config: str = ""

    def config(self) -> str:
        return (
            f'[cluster]\nlease_ttl_s = {self.lease_ttl_s}\nredis_prefix = "{self.prefix}"\n'
            + self.extra_config
        )

    def start(self, name: str, *, env: dict[str, str] | None = None) -> Daemon:
        node_env = {
            "GATEWAY_DATABASE_URL": self.database_url,
            "GATEWAY_REDIS_URL": self.redis_url,
            "GATEWAY_NODE_ID": name,
            "GATEWAY_TOKEN": TOKEN,
            **self.extra_env,
            **(env or {}),
        }
        daemon = start_daemon(self.base / name, env=node_env, config=self.config(), tag=f"-{name}")
        self.nodes[name] = daemon
        return daemon

    def stop_all(self) -> None:
        for daemon in self.nodes.values():
            if daemon.proc.poll() is None:
                daemon.proc.kill()
                daemon.proc.wait()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    assert PG_URL is not None
    schema = f"gw_cluster_{uuid.uuid4().hex[:16]}"
    found = Cluster(tmp_path, url_with_schema(PG_URL, schema), prefix=f"test-{uuid.uuid4().hex[:12]}")
    try:
        yield found
    finally:
        found.stop_all()
        await drop_schema(PG_URL, schema)


class PrivateRedis:
    """A redis-server of the test's own on a free port, which the test may stop and restart."""

    def __init__(self, directory: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.directory = directory
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""],
            cwd=self.directory,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not _redis_up(self.url):
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
