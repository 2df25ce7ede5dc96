"""Extensions in a run's tools: their tools as `AgentTool`s, and the layer that runs their
`before_tool_call` / `after_tool_call` hooks around every tool of the run.

Containment: an extension's tool that raises fails that call (its message is the error result;
the traceback goes to the log). A hook that raises, answers nonsense or takes longer than
`HOOK_TIMEOUT_S` is logged and skipped: the call goes on as if the hook were not there. A
`Block` from a before-hook refuses the call with the hook's reason; a result from an after-hook
replaces the result of a call that succeeded (after a failed call the hooks are told, and the
error stands).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from types import MappingProxyType
from typing import Any, TypeVar

import structlog
from msgspec.structs import replace

from agent_core import (
    AbortSignal,
    AgentTool,
    AgentToolResult,
    TextContent,
    ToolUpdateCallback,
    maybe_await,
)
from gateway.extensions.errors import ExtensionHookError, ExtensionToolError
from gateway.extensions.extension_api import (
    AfterToolHook,
    BeforeToolHook,
    Block,
    ExtensionTool,
    ToolCallEnd,
    ToolCallStart,
    ToolContext,
)

log = structlog.get_logger("gateway.extensions")

HOOK_TIMEOUT_S = 10.0
"""The longest one hook may take before it is skipped."""

T = TypeVar("T")
NOTHING = object()


def extension_tools(
    entries: Iterable[tuple[str, ExtensionTool]], *, session_id: str, agent_id: str
) -> list[AgentTool]:
    """The tools of the loaded extensions (`(extension, tool)` pairs) for one run."""
    return [_agent_tool(extension, tool, session_id, agent_id) for extension, tool in entries]


def _agent_tool(extension: str, tool: ExtensionTool, session_id: str, agent_id: str) -> AgentTool:
    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        def update(text: str) -> None:
            if on_update is not None:
                on_update(AgentToolResult(content=[TextContent(text=str(text))]))

        context = ToolContext(
            session_id=session_id, agent_id=agent_id, tool_call_id=tool_call_id, signal=signal, update=update
        )
        try:
            answer = await tool.handler(dict(params or {}), context)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("extension tool failed", extension=extension, tool=tool.name, exc_info=exc)
            raise ExtensionToolError(
                f"{tool.name} failed: {exc}" if str(exc) else f"{tool.name} failed"
            ) from exc
        if isinstance(answer, str):
            return AgentToolResult(content=[TextContent(text=answer)])
        if isinstance(answer, AgentToolResult):
            return answer
        raise ExtensionToolError(
            f"{tool.name} (extension {extension}) answered {type(answer).__name__}, not text or a result"
        )

    return AgentTool(
        name=tool.name,
        label=tool.name,
        description=tool.description,
        parameters=tool.parameters,
        execute=execute,
        metadata={"origin": f"extension:{extension}"},
    )


def hook_layer(
    tools: list[AgentTool],
    *,
    before: Sequence[tuple[str, BeforeToolHook]],
    after: Sequence[tuple[str, AfterToolHook]],
    session_id: str,
    agent_id: str,
) -> list[AgentTool]:
    """`tools` with the extensions' tool hooks around each (unchanged when there are none)."""
    if not before and not after:
        return tools
    return [_hooked(tool, before, after, session_id, agent_id) for tool in tools]


def _hooked(
    tool: AgentTool,
    before: Sequence[tuple[str, BeforeToolHook]],
    after: Sequence[tuple[str, AfterToolHook]],
    session_id: str,
    agent_id: str,
) -> AgentTool:
    inner = tool.execute

    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        args = MappingProxyType(dict(params)) if isinstance(params, dict) else MappingProxyType({})
        start = ToolCallStart(
            session_id=session_id,
            agent_id=agent_id,
            tool_call_id=tool_call_id,
            tool_name=tool.name,
            args=args,
        )
        for extension, hook in before:
            verdict = await contained(extension, "before_tool_call", partial(hook, start))
            if isinstance(verdict, Block):
                raise ExtensionHookError(
                    f"{tool.name} was blocked by extension {extension}: {verdict.reason}"
                )
            if verdict is not None and verdict is not NOTHING:
                log.warning("extension hook answered neither Block nor None", extension=extension)
        try:
            result = await inner(tool_call_id, params, signal, on_update)
        except Exception as exc:
            failed = AgentToolResult(content=[TextContent(text=str(exc))])
            await _after(after, start, failed, is_error=True)
            raise
        replaced = await _after(after, start, result, is_error=False)
        return replaced if replaced is not None else result

    return replace(tool, execute=execute)


async def _after(
    hooks: Sequence[tuple[str, AfterToolHook]],
    start: ToolCallStart,
    result: AgentToolResult,
    *,
    is_error: bool,
) -> AgentToolResult | None:
    replaced: AgentToolResult | None = None
    for extension, hook in hooks:
        end = ToolCallEnd(
            session_id=start.session_id,
            agent_id=start.agent_id,
            tool_call_id=start.tool_call_id,
            tool_name=start.tool_name,
            args=start.args,
            result=replaced or result,
            is_error=is_error,
        )
        answer = await contained(extension, "after_tool_call", partial(hook, end))
        if isinstance(answer, AgentToolResult) and not is_error:
            replaced = answer
        elif answer is not None and answer is not NOTHING and not isinstance(answer, AgentToolResult):
            log.warning("extension hook answered neither a result nor None", extension=extension)
    return replaced


async def contained(extension: str, hook_name: str, call: Callable[[], Awaitable[T] | T]) -> T | object:
    """Run one hook of `extension`: its answer, or `NOTHING` when it raised or timed out (logged)."""
    try:
        async with asyncio.timeout(HOOK_TIMEOUT_S):
            return await maybe_await(call())
    except asyncio.CancelledError:
        raise
    except TimeoutError:
        log.error(
            "extension hook timed out, skipped", extension=extension, hook=hook_name, timeout_s=HOOK_TIMEOUT_S
        )
    except Exception as exc:
        log.error("extension hook failed, skipped", extension=extension, hook=hook_name, exc_info=exc)
    return NOTHING
