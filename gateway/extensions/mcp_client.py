"""One live connection to one MCP server, through the official SDK's `ClientSession`.

This is the only module that speaks to the `mcp` package's client side and its transports; SDK,
anyio and httpx errors are translated here (`describe_failure`, `McpConnection.call`) and never
reach the registry's callers.

`connect(target)` is an async context manager run by the server's supervisor task: it starts the
transport (the server's process over stdio, or streamable HTTP), initialises the session, lists
the tools and yields an `McpConnection`, which any task may then call. The connection lives until
the context ends; `lost` is set as soon as the server's stream ends (the process exited, the
HTTP transport failed), and calls in flight then fail at once instead of waiting for a timeout.

The stdio transport is our own (rather than the SDK's `stdio_client`) so that the process gets
exactly the environment `mcp_launch` built, its stderr goes to the server's log file, and its
exit status is known: `ProcessReport` tells the supervisor the pid and how it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import anyio
import httpx
import structlog
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import ClientSession, types
from mcp.shared.exceptions import McpError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from gateway import __version__
from gateway.extensions.errors import McpConnectionLostError, McpTimeoutError, McpToolError

log = structlog.get_logger("gateway.extensions.mcp")

MAX_LINE_BYTES = 32 * 1024 * 1024
"""The longest JSON-RPC line a stdio server may write; a longer one ends the connection."""
STOP_GRACE_S = 2.0
"""How long a stdio server has to exit after its stdin closes, and again after SIGTERM."""
PING_TIMEOUT_S = 5.0
HTTP_TIMEOUT = httpx.Timeout(30.0, read=300.0)
CLIENT_INFO = types.Implementation(name="agent-gateway", version=__version__)

Incoming = SessionMessage | Exception
ProgressFn = Callable[[float, float | None, str | None], None]


@dataclass(frozen=True, kw_only=True)
class StdioTarget:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    stderr_path: Path
    """The server's stderr is appended here."""


@dataclass(frozen=True, kw_only=True)
class HttpTarget:
    url: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class ProcessReport:
    """What the supervisor learns about a stdio server's process."""

    pid: int | None = None
    returncode: int | None = None


class McpConnection:
    """An initialised session with one server (see the module docstring)."""

    def __init__(self, session: ClientSession, *, server: str, lost: asyncio.Event) -> None:
        self._session = session
        self.server = server
        self.lost = lost
        self.tools: tuple[types.Tool, ...] = ()
        self.tools_stale = False
        """Set when the server said its tool list changed (`notifications/tools/list_changed`)."""
        self.server_name = ""

    async def list_tools(self) -> tuple[types.Tool, ...]:
        """Fetch every tool (all pages); keeps and returns them. Raises McpToolError."""
        self.tools_stale = False
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self._guarded(self._session.list_tools(params=params), None, "listing its tools")
            tools += page.tools
            cursor = page.nextCursor
            if not cursor:
                break
        self.tools = tuple(tools)
        return self.tools

    async def call(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float, on_progress: ProgressFn | None
    ) -> types.CallToolResult:
        """Call tool `name`. Raises McpTimeoutError after `timeout_s`, McpConnectionLostError when
        the server goes away meanwhile, McpToolError when it answers with a protocol error."""

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            if on_progress is not None:
                on_progress(progress, total, message)

        request = self._session.call_tool(name, arguments, progress_callback=progress)
        result: types.CallToolResult = await self._guarded(request, timeout_s, f"calling {name}")
        return result

    async def alive(self) -> bool:
        """Ping the server. One that does not answer within `PING_TIMEOUT_S` is taken as gone:
        `lost` is set, so the supervisor reconnects. (A streamable HTTP server that went away
        mid-answer, or restarted and forgot the session, shows only this way.)"""
        try:
            await self._guarded(self._session.send_ping(), PING_TIMEOUT_S, "answering a ping")
        except McpToolError:
            self.lost.set()
            return False
        return True

    async def _guarded(self, request: Any, timeout_s: float | None, doing: str) -> Any:
        work = asyncio.ensure_future(request)
        gone = asyncio.ensure_future(self.lost.wait())
        try:
            done, _ = await asyncio.wait({work, gone}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (work, gone):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
        if work in done:
            try:
                return work.result()
            except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
                raise McpConnectionLostError(f"MCP server {self.server} went away while {doing}") from exc
            except McpError as exc:
                if exc.error.code == types.CONNECTION_CLOSED:
                    raise McpConnectionLostError(f"MCP server {self.server} went away while {doing}") from exc
                raise McpToolError(f"MCP server {self.server} refused {doing}: {exc.error.message}") from exc
            except Exception as exc:
                raise McpToolError(
                    f"MCP server {self.server} failed {doing}: {describe_failure(exc)}"
                ) from exc
        if gone in done:
            raise McpConnectionLostError(f"MCP server {self.server} went away while {doing}")
        raise McpTimeoutError(f"MCP server {self.server} did not answer within {timeout_s:g} s while {doing}")

    async def _on_message(
        self, message: Any
    ) -> None:  # RequestResponder | ServerNotification | Exception, as the SDK hands them over
        if isinstance(message, types.ServerNotification):
            if isinstance(message.root, types.ToolListChangedNotification):
                self.tools_stale = True
                log.info("MCP server's tool list changed", server=self.server)
        elif isinstance(message, Exception):
            log.warning("MCP transport error", server=self.server, error=describe_failure(message))


@asynccontextmanager
async def connect(
    target: StdioTarget | HttpTarget, *, server: str, startup_timeout_s: float, report: ProcessReport
) -> AsyncIterator[McpConnection]:
    """Start the transport, initialise and list the tools (within `startup_timeout_s`), yield the
    connection. Raises whatever failed (describe it with `describe_failure`). Run it in one task
    from start to end (the SDK's task groups require it)."""
    lost = asyncio.Event()
    async with AsyncExitStack() as stack:
        if isinstance(target, StdioTarget):
            read, write = await stack.enter_async_context(_stdio(target, report))
        else:
            client = await stack.enter_async_context(
                httpx.AsyncClient(headers=target.headers, timeout=HTTP_TIMEOUT, follow_redirects=False)
            )
            from mcp.client.streamable_http import streamable_http_client

            read, write, _ = await stack.enter_async_context(
                streamable_http_client(target.url, http_client=client)
            )
        inbound, session_reader = anyio.create_memory_object_stream[Incoming](0)
        tasks = await stack.enter_async_context(anyio.create_task_group())
        tasks.start_soon(_forward, read, inbound, lost)
        holder: list[McpConnection] = []

        async def on_message(message: Any) -> None:
            if holder:
                await holder[0]._on_message(message)

        session = await stack.enter_async_context(
            ClientSession(session_reader, write, message_handler=on_message, client_info=CLIENT_INFO)
        )
        connection = McpConnection(session, server=server, lost=lost)
        holder.append(connection)
        with anyio.fail_after(startup_timeout_s):
            initialized = await session.initialize()
            connection.server_name = f"{initialized.serverInfo.name} {initialized.serverInfo.version}".strip()
            await connection.list_tools()
        try:
            yield connection
        finally:
            lost.set()
            tasks.cancel_scope.cancel()


async def _forward(
    read: MemoryObjectReceiveStream[Incoming], inbound: MemoryObjectSendStream[Incoming], lost: asyncio.Event
) -> None:
    """Pass the transport's messages on to the session; set `lost` when the stream ends."""
    try:
        async with read, inbound:
            async for item in read:
                await inbound.send(item)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    finally:
        lost.set()


@asynccontextmanager
async def _stdio(
    target: StdioTarget, report: ProcessReport
) -> AsyncIterator[tuple[MemoryObjectReceiveStream[Incoming], MemoryObjectSendStream[SessionMessage]]]:
    """The server's process, newline-delimited JSON-RPC on its stdin and stdout."""
    errlog = await asyncio.to_thread(_open_log, target.stderr_path)
    with errlog:
        process = await anyio.open_process(
            target.argv, env=target.env, cwd=target.cwd, stderr=errlog, start_new_session=True
        )
    report.pid, report.returncode = process.pid, None
    read_send, read = anyio.create_memory_object_stream[Incoming](0)
    write, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_read_lines, process, read_send)
            tasks.start_soon(_write_lines, process, write_receive)
            try:
                yield read, write
            finally:
                await _stop(process)
                tasks.cancel_scope.cancel()
    finally:
        report.returncode = process.returncode
        for stream in (read, read_send, write, write_receive):
            await stream.aclose()


def _open_log(path: Path) -> BinaryIO:
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "ab")  # closed by the caller once the process has it


async def _read_lines(process: Process, out: MemoryObjectSendStream[Incoming]) -> None:
    if process.stdout is None:
        raise RuntimeError("the server's stdout is not piped")
    buffer = bytearray()
    async with out:
        try:
            async for chunk in process.stdout:
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end]).strip()
                    del buffer[: end + 1]
                    if line:
                        await _deliver(line, out)
                if len(buffer) > MAX_LINE_BYTES:
                    log.warning("MCP server wrote a line over the limit; disconnecting", limit=MAX_LINE_BYTES)
                    return
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            return


async def _deliver(line: bytes, out: MemoryObjectSendStream[Incoming]) -> None:
    try:
        message = types.JSONRPCMessage.model_validate_json(line)
    except ValidationError:
        # A server that prints to stdout (a banner, a stray print) would break a stricter client;
        # the line is skipped and logged.
        log.warning("MCP server wrote a line that is not JSON-RPC", line=line[:200].decode(errors="replace"))
        return
    await out.send(SessionMessage(message))


async def _write_lines(process: Process, messages: MemoryObjectReceiveStream[SessionMessage]) -> None:
    if process.stdin is None:
        raise RuntimeError("the server's stdin is not piped")
    try:
        async with messages:
            async for message in messages:
                data = message.message.model_dump_json(by_alias=True, exclude_none=True) + "\n"
                await process.stdin.send(data.encode())
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        return


async def _stop(process: Process) -> None:
    """Close stdin, give the server `STOP_GRACE_S` to exit, then SIGTERM and SIGKILL its process
    group. Shielded: a stop that was cancelled still reaps the process."""
    with anyio.CancelScope(shield=True):
        if process.stdin is not None:
            with contextlib.suppress(Exception):
                await process.stdin.aclose()
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, sig)
            with anyio.move_on_after(STOP_GRACE_S):
                await process.wait()
                break
        with anyio.move_on_after(STOP_GRACE_S):
            await process.aclose()


def describe_failure(exc: BaseException) -> str:
    """One line for a failure to start, initialise or talk to a server."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, McpError):
        if exc.error.code == types.CONNECTION_CLOSED:
            return "the server closed the connection"
        return exc.error.message
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code} from {exc.request.url}"
    if isinstance(exc, httpx.TransportError):
        text = str(exc) or type(exc).__name__
        try:
            return f"cannot reach {exc.request.url}: {text}"
        except RuntimeError:
            return f"cannot reach the server: {text}"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def stderr_tail(path: Path, *, limit: int = 4096) -> str | None:
    """The last non-empty line the server wrote to stderr, if any."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            data = handle.read()
    except OSError:
        return None
    lines = [line.strip() for line in data.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else None
