"""Layer 7: every tool honours the run's abort signal.

A tool refuses to start when the run is already aborted; when the run is aborted while the tool
runs, the tool is given `grace_s` to clean up after its own abort handling (the signal reaches it
too), then it is cancelled and the call fails with a clear message.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from msgspec.structs import replace

from agent_core import AbortSignal, AgentTool, AgentToolResult, ToolUpdateCallback

ABORTED_BEFORE = "The run was aborted before this tool started."
ABORTED_DURING = "The run was aborted while this tool was running."


def abort_layer(
    tools: list[AgentTool], *, signal: AbortSignal | None, grace_s: float = 5.0
) -> list[AgentTool]:
    return [_wrap(tool, signal, grace_s) for tool in tools]


def _wrap(tool: AgentTool, run_signal: AbortSignal | None, grace_s: float) -> AgentTool:
    inner = tool.execute

    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        active = AbortSignal.any(signal, run_signal)
        if active.aborted:
            raise RuntimeError(ABORTED_BEFORE)
        work = asyncio.ensure_future(inner(tool_call_id, params, active, on_update))
        aborted = asyncio.ensure_future(active.wait())
        try:
            done, _ = await asyncio.wait({work, aborted}, return_when=asyncio.FIRST_COMPLETED)
            if work in done:
                return work.result()
            # Aborted: let the tool react to the signal, then cut it off.
            finished, _ = await asyncio.wait({work}, timeout=grace_s)
            if not finished:
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await work
            elif not work.cancelled() and work.exception() is None:
                return work.result()
            raise RuntimeError(ABORTED_DURING)
        finally:
            aborted.cancel()
            if not work.done():
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await work

    return replace(tool, execute=execute)
