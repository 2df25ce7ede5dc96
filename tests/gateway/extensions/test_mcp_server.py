"""`McpServer`: started when first needed, restarted with backoff after a crash, stopped when
idle or closed; its tools answer a clear error meanwhile."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.background import Background
from gateway.extensions.errors import (
    McpConnectionLostError,
    McpStartError,
    McpStateError,
    McpUnavailableError,
)
from gateway.extensions.mcp_client import StdioTarget
from gateway.extensions.mcp_config import McpServerConfig
from gateway.extensions.mcp_server import McpServer, Prepared, ServerState
from tests.gateway.extensions.support import NOTES, HttpNotes, free_port, stdio_target


async def _nothing() -> None:
    return None


def _config(**overrides: Any) -> McpServerConfig:
    fields: dict[str, Any] = {"name": "notes", "command": sys.executable, "args": [str(NOTES), "stdio"]}
    return McpServerConfig(**{**fields, **overrides})


@pytest.fixture
async def background() -> AsyncIterator[Background]:
    tasks = Background("test")
    yield tasks
    await tasks.aclose()


def make(
    tmp_path: Path, background: Background, *, target: StdioTarget | None = None, **config: Any
) -> tuple[McpServer, list[int]]:
    """A server of the notes test server over stdio (or `target`); `prepared` counts its starts."""
    prepared: list[int] = []

    async def prepare() -> Prepared:
        prepared.append(1)
        return Prepared(target=target or stdio_target(tmp_path), runner="test", cleanup=_nothing)

    backoff = config.pop("backoff_s", 30.0)
    server = McpServer(
        _config(**config), agent_id="main", prepare=prepare, background=background, backoff_s=backoff
    )
    return server, prepared


async def eventually(check: Callable[[], bool], timeout: float = 15.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


async def test_a_server_starts_when_first_needed(tmp_path: Path, background: Background) -> None:
    server, prepared = make(tmp_path, background)
    assert server.state == ServerState.STOPPED and not prepared
    tools = await server.available_tools()
    assert server.state == ServerState.READY and prepared == [1]
    assert "add" in {tool.name for tool in tools}
    answer = await server.call("add", {"a": 40, "b": 2}, on_progress=None)
    assert answer.content[0].text == "42"  # type: ignore[union-attr]
    assert server.pid is not None
    await server.aclose()
    assert server.state == ServerState.CLOSED


async def test_a_crash_backs_off_answers_a_clear_error_and_restarts(
    tmp_path: Path, background: Background
) -> None:
    server, _ = make(tmp_path, background)
    await server.available_tools()
    first_pid = server.pid
    with pytest.raises(McpConnectionLostError):
        await server.call("crash", {}, on_progress=None)
    await eventually(lambda: server.state == ServerState.BACKOFF)
    assert server.error is not None
    assert "exited with status 3" in server.error
    assert "crashing on purpose" in server.error
    # Meanwhile its tools are still known, and answer why they cannot run.
    assert "add" in {tool.name for tool in server.tools}
    with pytest.raises(
        McpUnavailableError, match=r"restarting after a failure: the server exited .* retries in"
    ):
        await server.call("add", {"a": 1, "b": 1}, on_progress=None)
    assert server.status()["retryInMs"] > 20_000
    await server.restart()  # an operator does not wait for the backoff
    assert server.state == ServerState.READY and server.restarts == 1
    assert server.pid != first_pid and server.error is None
    assert (await server.call("add", {"a": 1, "b": 1}, on_progress=None)).content[0].text == "2"  # type: ignore[union-attr]


async def test_the_backoff_retries_by_itself(tmp_path: Path, background: Background) -> None:
    server, prepared = make(tmp_path, background, backoff_s=0.2)
    await server.available_tools()
    with pytest.raises(McpConnectionLostError):
        await server.call("crash", {}, on_progress=None)
    await eventually(lambda: server.state == ServerState.READY and len(prepared) == 2)
    assert server.restarts == 1


async def test_a_restart_replaces_a_running_server(tmp_path: Path, background: Background) -> None:
    server, prepared = make(tmp_path, background)
    await server.available_tools()
    pid = server.pid
    await server.restart()
    assert server.state == ServerState.READY and server.pid != pid and len(prepared) == 2
    assert pid is not None and not _alive(pid)


async def test_an_idle_server_stops_and_starts_again_when_needed(
    tmp_path: Path, background: Background
) -> None:
    server, prepared = make(tmp_path, background, idle_timeout_s=0.3)
    await server.available_tools()
    pid = server.pid
    await eventually(lambda: server.state == ServerState.STOPPED)
    assert pid is not None and not _alive(pid)
    answer = await server.call("add", {"a": 2, "b": 2}, on_progress=None)
    assert answer.content[0].text == "4" and len(prepared) == 2  # type: ignore[union-attr]


async def test_a_server_that_cannot_start_says_why(tmp_path: Path, background: Background) -> None:
    async def refuse() -> Prepared:
        raise McpStartError("MCP server notes: env_from.KEY names MISSING, which is not set")

    server = McpServer(_config(), agent_id="main", prepare=refuse, background=background, backoff_s=30)
    assert await server.available_tools() == ()
    assert server.state == ServerState.BACKOFF
    with pytest.raises(McpUnavailableError, match=r"env_from.KEY names MISSING"):
        await server.call("add", {}, on_progress=None)


async def test_a_server_that_never_answers_times_out_at_start(tmp_path: Path, background: Background) -> None:
    silent = StdioTarget(
        argv=[sys.executable, "-c", "import time; time.sleep(60)"],
        env={"PATH": os.environ["PATH"]},
        cwd=tmp_path,
        stderr_path=tmp_path / "silent.log",
    )
    server, _ = make(tmp_path, background, target=silent, startup_timeout_s=0.5)
    assert await server.available_tools() == ()
    assert server.state == ServerState.BACKOFF
    assert server.error is not None and "no answer in time" in server.error


async def test_a_closed_server_answers_that_it_is_gone(tmp_path: Path, background: Background) -> None:
    server, _ = make(tmp_path, background)
    await server.available_tools()
    pid = server.pid
    await server.aclose()
    assert pid is not None and not _alive(pid)
    with pytest.raises(McpUnavailableError, match="no longer configured"):
        await server.call("add", {"a": 1, "b": 1}, on_progress=None)


async def test_an_illegal_transition_names_the_states_it_expected(
    tmp_path: Path, background: Background
) -> None:
    server, _ = make(tmp_path, background)
    with pytest.raises(McpStateError, match="is stopped; it can become ready only from starting"):
        server._move(ServerState.READY)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return False


async def test_an_http_server_that_went_away_is_noticed_and_reconnected(
    tmp_path: Path, background: Background
) -> None:
    http = HttpNotes(free_port(), tmp_path / "http.log")
    http.start()
    try:
        server, _ = make(tmp_path, background, target=None, backoff_s=0.2, timeout_s=2)
        server._prepare = _http_prepare(http)
        await server.available_tools()
        # Its answer never comes (the process died mid-answer): the timeout, then a ping, tell.
        with pytest.raises(McpConnectionLostError, match="went away"):
            await server.call("crash", {}, on_progress=None)
        assert http.wait_exit() == 3
        await eventually(lambda: server.state == ServerState.BACKOFF)
        http.start()
        await eventually(lambda: server.state == ServerState.READY, timeout=30)
        assert server.restarts >= 1
        assert (await server.call("add", {"a": 2, "b": 2}, on_progress=None)).content[0].text == "4"  # type: ignore[union-attr]
    finally:
        http.stop()


def _http_prepare(http: HttpNotes) -> Any:
    async def prepare() -> Prepared:
        return Prepared(target=http.target(), runner="http", cleanup=_nothing)

    return prepare
