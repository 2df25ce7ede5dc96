"""The `bash` tool: run a shell command in the workspace through a `CommandRunner`."""

from __future__ import annotations

import asyncio
import signal as signals
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent_core.abort import AbortSignal
from agent_core.agent_types import AgentTool, AgentToolResult, ToolUpdateCallback
from agent_core.errors import ToolError
from agent_core.messages import TextContent
from agent_core.tools.common import as_mapping, check_not_aborted, get_opt_float, get_str
from agent_core.tools.runner import CommandResult, CommandRunner, LocalRunner
from agent_core.tools.truncate import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_LINES,
    Truncation,
    format_size,
    truncate_tail,
)

DEFAULT_UPDATE_INTERVAL_S = 0.1

BASH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "Bash command to execute"},
        "timeout": {
            "type": "number",
            "description": "Timeout in seconds (optional, no default timeout)",
        },
    },
    "required": ["command"],
}


class _UpdateStream:
    """Turns streamed output into throttled partial results carrying the tail seen so far.

    Lives for one call; at most one update per `interval_s`, and a timer flushes output that
    arrived after the last update. Memory is bounded: only the last `max_bytes` characters stay.
    """

    def __init__(
        self, on_update: ToolUpdateCallback, *, interval_s: float, max_lines: int, max_bytes: int
    ) -> None:
        self._on_update = on_update
        self._interval_s = interval_s
        self._max_lines = max_lines
        self._max_bytes = max_bytes
        self._tail = ""
        self._last_emit = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def feed(self, text: str) -> None:
        if self._closed:
            return
        self._tail = (self._tail + text)[-self._max_bytes :]
        now = time.monotonic()
        wait = self._last_emit + self._interval_s - now
        if wait <= 0:
            self._emit()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(wait, self._emit)

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _emit(self) -> None:
        self._timer = None
        self._last_emit = time.monotonic()
        cut = truncate_tail(self._tail, max_lines=self._max_lines, max_bytes=self._max_bytes)
        self._on_update(AgentToolResult(content=[TextContent(text=cut.content)], details={"partial": True}))


def _notice(result: CommandResult, cut: Truncation) -> str | None:
    if not (result.truncated or cut.truncated):
        return None
    shown = f"last {cut.output_lines} lines ({format_size(cut.output_bytes)})"
    if cut.partial_line:
        shown = f"last {format_size(cut.output_bytes)} of the final line"
    return (
        f"[Output truncated: showing the {shown} of {format_size(result.total_bytes)}. "
        "To see more, redirect the output to a file and read it with offset/limit, "
        "or filter it with grep, head or tail.]"
    )


def _format_output(result: CommandResult, max_lines: int, max_bytes: int) -> tuple[str, Truncation]:
    cut = truncate_tail(result.output, max_lines=max_lines, max_bytes=max_bytes)
    text = cut.content.rstrip("\n")
    notice = _notice(result, cut)
    if notice:
        text = f"{text}\n\n{notice}" if text else notice
    return text, cut


def create_bash_tool(
    workspace: Path,
    *,
    runner: CommandRunner | None = None,
    env: Mapping[str, str] | None = None,
    default_timeout_s: float | None = None,
    max_lines: int = DEFAULT_MAX_LINES,
    max_bytes: int = DEFAULT_MAX_BYTES,
    update_interval_s: float = DEFAULT_UPDATE_INTERVAL_S,
) -> AgentTool:
    """`bash {command, timeout?}` run in `workspace` by `runner` (a `LocalRunner` by default).

    Output streams through `on_update`; the result keeps the tail of the output. A non-zero exit,
    a timeout and an abort raise `ToolError` carrying the output tail and what happened.
    """
    command_runner: CommandRunner = runner if runner is not None else LocalRunner()

    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        args = as_mapping(params)
        command = get_str(args, "command")
        timeout_s = get_opt_float(args, "timeout") or default_timeout_s
        check_not_aborted(signal, "Command")
        stream = (
            _UpdateStream(on_update, interval_s=update_interval_s, max_lines=max_lines, max_bytes=max_bytes)
            if on_update is not None
            else None
        )
        try:
            result = await command_runner.run(
                command,
                cwd=workspace,
                env=env,
                timeout_s=timeout_s,
                signal=signal,
                on_output=stream.feed if stream is not None else None,
            )
        finally:
            if stream is not None:
                stream.close()
        text, cut = _format_output(result, max_lines, max_bytes)
        failure = _failure(result)
        if failure is not None:
            raise ToolError(f"{text}\n\n{failure}" if text else failure)
        details: dict[str, Any] = {"exitCode": result.exit_code}
        if result.truncated or cut.truncated:
            details["truncation"] = cut.details()
            details["totalBytes"] = result.total_bytes
        return AgentToolResult(content=[TextContent(text=text or "(no output)")], details=details)

    return AgentTool(
        name="bash",
        label="bash",
        description=(
            "Execute a bash command in the current working directory. Returns stdout and stderr "
            f"combined. Output is truncated to the last {max_lines} lines or "
            f"{format_size(max_bytes)}, whichever is hit first. Optionally provide a timeout in "
            "seconds. A non-zero exit code is reported as an error."
        ),
        parameters=BASH_PARAMETERS,
        execute=execute,
    )


def _failure(result: CommandResult) -> str | None:
    if result.timed_out:
        limit = result.timeout_s
        return f"Command timed out after {limit:g} seconds" if limit else "Command timed out"
    if result.aborted:
        return "Command aborted"
    code = result.exit_code
    if code is None:
        return "Command did not run"
    if code < 0:
        try:
            name = signals.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"Command was killed by signal {name}"
    if code != 0:
        return f"Command exited with code {code}"
    return None
