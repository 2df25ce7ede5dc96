"""One MCP server of one agent, supervised: started when first needed, restarted with backoff
after a crash, stopped after idling or with the daemon.

    stopped --(needed, restart)--> starting --(initialised, tools listed)--> ready
    starting --(failed)--> backoff        ready --(connection lost)--> backoff
    backoff --(delay over, restart)--> starting
    ready | backoff --(idle, stop)--> stopped
    any --(aclose)--> closed

A supervisor task, owned by the registry's `Background`, runs from `starting` until `stopped` or
`closed` and holds the connection (the SDK's task groups must be entered and left in one task).
Other tasks only read the state and call through the live connection. While the server is not
`ready`, its tools answer `McpUnavailableError` at once, with the reason and when it retries.
The backoff doubles from `backoff_s` up to `max_backoff_s`; it starts over once a connection
stayed up for `BACKOFF_RESET_S`. The last known tool list is kept across restarts, so a crashed
server's tools stay visible (and answer that error) until it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import structlog
from mcp import types

from gateway.background import Background
from gateway.extensions.errors import (
    McpConnectionLostError,
    McpStartError,
    McpStateError,
    McpToolError,
    McpUnavailableError,
)
from gateway.extensions.mcp_client import (
    HttpTarget,
    McpConnection,
    ProcessReport,
    ProgressFn,
    StdioTarget,
    connect,
    describe_failure,
    stderr_tail,
)
from gateway.extensions.mcp_config import McpServerConfig

log = structlog.get_logger("gateway.extensions.mcp")

BACKOFF_RESET_S = 30.0
STARTUP_MARGIN_S = 5.0
"""How much longer than `startup_timeout_s` a caller waits for a start (process stop included)."""


class ServerState(StrEnum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    BACKOFF = "backoff"
    CLOSED = "closed"


_ALLOWED: dict[ServerState, frozenset[ServerState]] = {
    ServerState.STOPPED: frozenset({ServerState.STARTING, ServerState.CLOSED}),
    ServerState.STARTING: frozenset(
        {ServerState.READY, ServerState.BACKOFF, ServerState.STOPPED, ServerState.CLOSED}
    ),
    ServerState.READY: frozenset(
        {ServerState.STARTING, ServerState.BACKOFF, ServerState.STOPPED, ServerState.CLOSED}
    ),
    ServerState.BACKOFF: frozenset({ServerState.STARTING, ServerState.STOPPED, ServerState.CLOSED}),
    ServerState.CLOSED: frozenset(),
}
_SETTLED = frozenset({ServerState.READY, ServerState.BACKOFF, ServerState.STOPPED, ServerState.CLOSED})


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """How to reach the server this time, and what to undo once it has stopped."""

    target: StdioTarget | HttpTarget
    runner: str
    cleanup: Callable[[], Awaitable[None]]


Prepare = Callable[[], Awaitable[Prepared]]
"""Builds the server's target (`mcp_launch` for stdio). Raises McpStartError."""


class McpServer:
    """See the module docstring. `key` is `(agent id, server name)`."""

    def __init__(
        self,
        config: McpServerConfig,
        *,
        agent_id: str,
        prepare: Prepare,
        background: Background,
        backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.agent_id = agent_id
        self._prepare = prepare
        self._background = background
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._clock = clock
        self.state = ServerState.STOPPED
        self.error: str | None = None
        """Why the server last failed or stopped unexpectedly (kept until it is ready again)."""
        self.restarts = 0
        self.tools: tuple[types.Tool, ...] = ()
        """The last tool list the server sent (kept across restarts)."""
        self.pid: int | None = None
        self.runner: str | None = None
        self.retry_at: float | None = None
        self.ready_since: float | None = None
        self.last_used = clock()
        self._in_flight = 0
        self._connection: McpConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._settled = asyncio.Event()
        self._settled.set()
        self._wake = asyncio.Event()
        self._wanted: str | None = None
        """What the supervisor was asked to do next: `restart` or `stop`."""
        self._starts = 0
        self._closing = False
        self._start_waiters: list[tuple[int, asyncio.Event]] = []
        """`(starts when asked, event)`: set once a start after that one has settled."""

    @property
    def name(self) -> str:
        return self.config.name

    # --- state --------------------------------------------------------------------------------

    def _move(self, to: ServerState) -> None:
        if to not in _ALLOWED[self.state]:
            expected = sorted(state.value for state, targets in _ALLOWED.items() if to in targets)
            raise McpStateError(
                f"MCP server {self.name} is {self.state.value}; it can become {to.value} only from "
                f"{' or '.join(expected)}"
            )
        self.state = to
        if to in _SETTLED:
            self._settled.set()
            for waiter in [w for w in self._start_waiters if self._starts > w[0]]:
                waiter[1].set()
                self._start_waiters.remove(waiter)
        else:
            self._settled.clear()

    def unavailable(self) -> McpUnavailableError:
        """The error a tool call gets while the server is not ready."""
        why = f": {self.error}" if self.error else ""
        if self.state == ServerState.BACKOFF and self.retry_at is not None:
            wait = max(0.0, self.retry_at - self._clock())
            return McpUnavailableError(
                f"MCP server {self.name} is restarting after a failure{why}; it retries in {wait:.0f} s"
            )
        if self.state == ServerState.STARTING:
            return McpUnavailableError(f"MCP server {self.name} is starting; try again in a moment")
        if self.state == ServerState.CLOSED or self._closing:
            return McpUnavailableError(f"MCP server {self.name} is no longer configured for this agent")
        return McpUnavailableError(f"MCP server {self.name} is not running{why}")

    # --- what callers do ------------------------------------------------------------------------

    @property
    def tools_stale(self) -> bool:
        """Whether the running server said its tool list changed since it was last read."""
        connection = self._connection
        return connection is not None and connection.tools_stale

    async def available_tools(self) -> tuple[types.Tool, ...]:
        """Start the server if it is stopped and wait (bounded) until it is ready or failed; the
        current tool list (refreshed when the server said it changed), else the last known."""
        self.last_used = self._clock()
        if self.state == ServerState.STOPPED:
            self._spawn()
        await self._wait_settled()
        connection = self._connection
        if self.state == ServerState.READY and connection is not None and connection.tools_stale:
            try:
                self.tools = await connection.list_tools()
            except Exception as exc:
                log.warning("could not refresh an MCP server's tools", server=self.name, error=str(exc))
        return self.tools

    async def call(
        self, tool: str, arguments: dict[str, Any], *, on_progress: ProgressFn | None
    ) -> types.CallToolResult:
        """Call `tool` with the per-call timeout. Raises McpUnavailableError when the server is
        not ready, or what `McpConnection.call` raises."""
        self.last_used = self._clock()
        if self._closing:
            raise self.unavailable()
        if self.state == ServerState.STOPPED:
            self._spawn()
            await self._wait_settled()
        connection = self._connection
        if self.state != ServerState.READY or connection is None:
            raise self.unavailable()
        self._in_flight += 1
        try:
            return await connection.call(
                tool, arguments, timeout_s=self.config.timeout_s, on_progress=on_progress
            )
        except McpToolError as exc:
            # A timeout or an odd answer may mean the server is gone: find out, so that a dead
            # one is replaced instead of failing every call until it idles out.
            if isinstance(exc, McpConnectionLostError) or await connection.alive():
                raise
            raise McpConnectionLostError(f"MCP server {self.name} went away ({exc})") from exc
        finally:
            self._in_flight -= 1
            self.last_used = self._clock()

    async def restart(self) -> None:
        """Stop the server if it runs and start it again now (a failed one retries at once);
        returns once it is ready or failed again (bounded)."""
        if self.state == ServerState.CLOSED or self._closing:
            raise self.unavailable()
        self.last_used = self._clock()
        restarted = asyncio.Event()
        self._start_waiters.append((self._starts, restarted))
        if self.state == ServerState.STOPPED:
            self._spawn()
        else:
            self._ask("restart")
        # The old process first has to stop (bounded by the stop grace), then the new one start.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(restarted.wait(), self.config.startup_timeout_s + 2 * STARTUP_MARGIN_S)

    def retire(self) -> None:
        """Refuse calls from now on (its configuration went away); `aclose` then stops it."""
        self._closing = True

    async def aclose(self) -> None:
        """Stop the server for good (the daemon stops, or its configuration went away)."""
        if self.state == ServerState.CLOSED:
            return
        self._closing = True
        task = self._task
        if task is not None and not task.done():
            self._ask("stop")
            done, _ = await asyncio.wait({task}, timeout=self.config.startup_timeout_s + STARTUP_MARGIN_S)
            if not done:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._move(ServerState.CLOSED)

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "error": self.error,
            "restarts": self.restarts,
            "pid": self.pid,
            "runner": self.runner,
            "retryInMs": (
                int(max(0.0, self.retry_at - self._clock()) * 1000)
                if self.state == ServerState.BACKOFF and self.retry_at is not None
                else None
            ),
        }

    # --- the supervisor -------------------------------------------------------------------------

    def _spawn(self) -> None:
        if self._closing:
            raise self.unavailable()
        self._move(ServerState.STARTING)
        self._starts += 1
        self._wanted = None
        self._task = self._background.spawn(self._supervise(), name=f"mcp-{self.agent_id}-{self.name}")

    def _ask(self, what: str) -> None:
        self._wanted = what
        self._wake.set()

    async def _wait_settled(self) -> None:
        try:
            await asyncio.wait_for(self._settled.wait(), self.config.startup_timeout_s + STARTUP_MARGIN_S)
        except TimeoutError:
            pass

    async def _supervise(self) -> None:
        attempt = 0
        try:
            while True:
                if self.state != ServerState.STARTING:
                    self._move(ServerState.STARTING)
                    self._starts += 1
                outcome, error = await self._run_once()
                if outcome == "stop":
                    self._move(ServerState.STOPPED)
                    return
                if outcome == "restart":
                    attempt = 0
                    self.restarts += 1
                    continue
                if self.ready_since is not None and self._clock() - self.ready_since >= BACKOFF_RESET_S:
                    attempt = 0
                self.ready_since = None
                self.error = error
                delay = min(self._max_backoff_s, self._backoff_s * 2**attempt)
                attempt += 1
                self.retry_at = self._clock() + delay
                self._move(ServerState.BACKOFF)
                log.warning(
                    "MCP server failed", server=self.name, agent=self.agent_id, error=error, retry_in_s=delay
                )
                wanted = await self._idle_or(delay, waiting=True)
                self.retry_at = None
                if wanted in ("stop", "idle"):
                    self._move(ServerState.STOPPED)
                    return
                self.restarts += 1
        finally:
            self._connection = None
            self.pid = None

    async def _run_once(self) -> tuple[str, str | None]:
        """One life of the server: `("stop" | "restart", None)`, or `("lost", why)`."""
        report = ProcessReport()
        try:
            prepared = await self._prepare()
        except McpStartError as exc:
            return "lost", str(exc)
        except Exception as exc:
            log.exception("could not prepare an MCP server", server=self.name)
            return "lost", describe_failure(exc)
        self.runner = prepared.runner
        target = prepared.target
        try:
            async with connect(
                target, server=self.name, startup_timeout_s=self.config.startup_timeout_s, report=report
            ) as connection:
                self._ready(connection, report)
                wanted = await self._idle_or(None, waiting=False, lost=connection.lost)
            if wanted in ("stop", "idle"):
                return "stop", None
            if wanted == "restart":
                return "restart", None
            return "lost", self._lost_reason(target, report, None)
        except Exception as exc:
            return "lost", self._lost_reason(target, report, exc)
        finally:
            self._connection = None
            await prepared.cleanup()

    def _ready(self, connection: McpConnection, report: ProcessReport) -> None:
        self._connection = connection
        self.tools = connection.tools
        self.pid = report.pid
        self.error = None
        self.ready_since = self._clock()
        self.last_used = self.ready_since  # whoever is waiting for this start is about to use it
        self._move(ServerState.READY)
        log.info(
            "MCP server ready",
            server=self.name,
            agent=self.agent_id,
            implementation=connection.server_name,
            tools=[tool.name for tool in connection.tools],
            runner=self.runner,
        )

    def _lost_reason(
        self, target: StdioTarget | HttpTarget, report: ProcessReport, exc: Exception | None
    ) -> str:
        if isinstance(target, HttpTarget):
            return describe_failure(exc) if exc is not None else f"the connection to {target.url} was lost"
        parts = []
        if report.returncode is not None:
            parts.append(f"the server exited with status {report.returncode}")
        elif exc is None:
            parts.append("the server closed its output")
        if exc is not None:
            parts.append(describe_failure(exc))
        last = stderr_tail(target.stderr_path)
        if last:
            parts.append(f"its last words on stderr: {last}")
        return "; ".join(parts)

    async def _idle_or(self, delay: float | None, *, waiting: bool, lost: asyncio.Event | None = None) -> str:
        """Wait until asked (`stop`, `restart`), the connection is lost (`lost`), the delay is over
        (`delay`), or the server has not been used for `idle_timeout_s` (`idle`)."""
        deadline = self._clock() + delay if delay is not None else None
        idle_s = self.config.idle_timeout_s
        while True:
            if self._wanted is not None:
                wanted, self._wanted = self._wanted, None
                self._wake.clear()
                return wanted
            if lost is not None and lost.is_set():
                return "lost"
            now = self._clock()
            if deadline is not None and now >= deadline:
                return "delay"
            idle_at = self.last_used + idle_s if idle_s > 0 and self._in_flight == 0 else None
            if idle_at is not None and now >= idle_at:
                log.info("MCP server idle, stopping", server=self.name, agent=self.agent_id)
                return "idle"
            timeout = min(t for t in (deadline, idle_at, now + 60.0) if t is not None) - now
            waits = [asyncio.ensure_future(self._wake.wait())]
            if lost is not None:
                waits.append(asyncio.ensure_future(lost.wait()))
            try:
                await asyncio.wait(waits, timeout=max(timeout, 0.01), return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()
                await asyncio.gather(*waits, return_exceptions=True)
