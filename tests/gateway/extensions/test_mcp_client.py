"""`mcp_client` against the real FastMCP test server, over stdio and streamable HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from mcp import types
from mcp.shared.exceptions import McpError

from gateway.extensions.errors import McpConnectionLostError, McpTimeoutError, McpToolError
from gateway.extensions.mcp_client import (
    HttpTarget,
    McpConnection,
    ProcessReport,
    StdioTarget,
    connect,
    describe_failure,
    stderr_tail,
)
from tests.gateway.extensions.support import HttpNotes, free_port, http_notes, stdio_target


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpNotes]:
    with http_notes(tmp_path_factory.mktemp("http-notes")) as server:
        yield server


@pytest.fixture(params=["stdio", "http"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> StdioTarget | HttpTarget:
    if request.param == "stdio":
        return stdio_target(tmp_path)
    server: HttpNotes = request.getfixturevalue("http_server")
    return server.target()


@asynccontextmanager
async def session(
    target: StdioTarget | HttpTarget, report: ProcessReport | None = None
) -> AsyncIterator[McpConnection]:
    async with connect(
        target, server="notes", startup_timeout_s=30, report=report or ProcessReport()
    ) as conn:
        yield conn


async def test_lists_the_tools_and_calls_one_with_arguments(target: StdioTarget | HttpTarget) -> None:
    async with session(target) as conn:
        assert {"add", "fail", "count", "crash", "slow"} <= {tool.name for tool in conn.tools}
        add = next(tool for tool in conn.tools if tool.name == "add")
        assert add.inputSchema["required"] == ["a", "b"]
        result = await conn.call("add", {"a": 2, "b": 3}, timeout_s=10, on_progress=None)
        assert isinstance(result.content[0], types.TextContent) and result.content[0].text == "5"
        assert result.structuredContent == {"result": 5}
        assert not result.isError


async def test_an_error_answer_is_flagged(target: StdioTarget | HttpTarget) -> None:
    async with session(target) as conn:
        result = await conn.call("fail", {"message": "no such note"}, timeout_s=10, on_progress=None)
        assert result.isError
        assert "no such note" in result.content[0].text  # type: ignore[union-attr]


async def test_progress_notifications_reach_the_callback(target: StdioTarget | HttpTarget) -> None:
    seen: list[tuple[float, float | None, str | None]] = []
    async with session(target) as conn:
        result = await conn.call(
            "count", {"steps": 3}, timeout_s=10, on_progress=lambda *args: seen.append(args)
        )
    assert result.content[0].text == "counted to 3"  # type: ignore[union-attr]
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


async def test_a_changed_tool_list_is_flagged_and_listed_again(target: StdioTarget | HttpTarget) -> None:
    async with session(target) as conn:
        assert not conn.tools_stale
        await conn.call("grow", {}, timeout_s=10, on_progress=None)
        for _ in range(200):
            if conn.tools_stale:
                break
            await _sleep(0.01)
        assert conn.tools_stale
        assert "extra" in {tool.name for tool in await conn.list_tools()}
        assert not conn.tools_stale


async def test_a_call_that_takes_too_long_times_out(target: StdioTarget | HttpTarget) -> None:
    async with session(target) as conn:
        with pytest.raises(McpTimeoutError, match=r"did not answer within 0\.5 s while calling slow"):
            await conn.call("slow", {"seconds": 5}, timeout_s=0.5, on_progress=None)
        # The connection is still good.
        answer = await conn.call("add", {"a": 1, "b": 1}, timeout_s=10, on_progress=None)
        assert answer.content[0].text == "2"  # type: ignore[union-attr]


async def test_an_unknown_tool_is_the_servers_answer_not_a_crash(target: StdioTarget | HttpTarget) -> None:
    async with session(target) as conn:
        result = await conn.call("nope", {}, timeout_s=10, on_progress=None)
        assert result.isError


async def test_a_crashed_stdio_server_fails_the_call_and_reports_how_it_ended(tmp_path: Path) -> None:
    report = ProcessReport()
    target = stdio_target(tmp_path)
    async with session(target, report) as conn:
        assert report.pid is not None
        with pytest.raises(McpConnectionLostError, match="went away while calling crash"):
            await conn.call("crash", {}, timeout_s=10, on_progress=None)
        assert conn.lost.is_set()
    assert report.returncode == 3
    assert stderr_tail(target.stderr_path) == "notes server: crashing on purpose"


async def test_a_stdio_server_is_stopped_and_reaped_when_the_connection_ends(tmp_path: Path) -> None:
    report = ProcessReport()
    async with session(stdio_target(tmp_path), report):
        pass
    assert report.returncode is not None


async def test_a_crashed_http_server_ends_the_connection_with_a_clear_reason(tmp_path: Path) -> None:
    with http_notes(tmp_path) as server:
        with pytest.raises(Exception) as failed:  # the transport's task group fails
            async with session(server.target()) as conn:
                await conn.call("crash", {}, timeout_s=10, on_progress=None)
        assert server.wait_exit() == 3
    reason = describe_failure(failed.value)
    assert reason and "\n" not in reason and "Traceback" not in reason


async def test_an_http_server_that_is_not_there_fails_to_connect(tmp_path: Path) -> None:
    target = HttpTarget(url=f"http://127.0.0.1:{free_port()}/mcp")
    with pytest.raises(Exception) as failed:
        async with session(target):
            pass
    assert describe_failure(failed.value).startswith("cannot reach http://127.0.0.1:")


def test_failures_are_described_in_one_line() -> None:
    closed = McpError(types.ErrorData(code=types.CONNECTION_CLOSED, message="Connection closed"))
    assert describe_failure(ExceptionGroup("x", [ExceptionGroup("y", [closed])])) == (
        "the server closed the connection"
    )
    request = httpx.Request("POST", "http://127.0.0.1:9/mcp")
    response = httpx.Response(401, request=request)
    assert describe_failure(httpx.HTTPStatusError("no", request=request, response=response)) == (
        "HTTP 401 from http://127.0.0.1:9/mcp"
    )
    assert describe_failure(ValueError("bad\nthing")) == "ValueError: bad thing"


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


def test_mcp_tool_errors_are_tool_errors() -> None:
    from agent_core import ToolError

    assert issubclass(McpToolError, ToolError)
