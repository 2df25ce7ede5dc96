"""Execution of the tool calls of one assistant message (pi-agent-core 0.73.1 semantics).

A call goes through three steps:

1. prepare: look the tool up, run `prepare_arguments`, validate, run `before_tool_call`. Any
   failure here is an *immediate* error result; the tool never runs.
2. execute: `tool.execute(id, args, signal, on_update)`. A raise becomes an error result.
3. finalise: `after_tool_call` may override the result field by field; a raise becomes an error
   result.

Sequential batches run the three steps and emit the result message call by call. Parallel batches
prepare every call in source order first (immediate errors emit their `tool_execution_end` during
this preflight), then start every prepared call as a task, then finalise calls in completion order
from the batch coroutine itself, so tools that finish in the same loop iteration all finish before
the first `tool_execution_end`. Result messages are always emitted in source order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from agent_core._emitter import Emitter
from agent_core.abort import AbortSignal
from agent_core.agent_types import (
    AfterToolCallContext,
    AgentContext,
    AgentOptions,
    AgentTool,
    AgentToolResult,
    BeforeToolCallContext,
)
from agent_core.awaitables import maybe_await
from agent_core.events import (
    AgentToolResultData,
    MessageEndEvent,
    MessageStartEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    ToolExecutionUpdateEvent,
)
from agent_core.messages import AssistantMessage, TextContent, ToolCall, ToolResultMessage, now_ms
from agent_core.validation import validate_tool_arguments


class ToolBatch(msgspec.Struct, frozen=True):
    """What a batch produced: result messages in source order, and whether to stop the run."""

    messages: list[ToolResultMessage]
    terminate: bool


class _Prepared(msgspec.Struct):
    tool_call: ToolCall
    tool: AgentTool
    args: object


class _Outcome(msgspec.Struct):
    result: AgentToolResult
    is_error: bool


class _Call(msgspec.Struct):
    """Everything one call needs besides its own tool call."""

    context: AgentContext
    assistant_message: AssistantMessage
    options: AgentOptions
    signal: AbortSignal | None
    emit: Emitter


def error_result(message: str) -> AgentToolResult:
    return AgentToolResult(content=[TextContent(text=message)], details={})


async def execute_tool_calls(
    context: AgentContext,
    assistant_message: AssistantMessage,
    tool_calls: Sequence[ToolCall],
    *,
    options: AgentOptions,
    signal: AbortSignal | None,
    emit: Emitter,
) -> ToolBatch:
    """Run one assistant message's tool calls and emit their events; see the module docstring."""
    call = _Call(context, assistant_message, options, signal, emit)
    if _is_sequential(context, tool_calls, options):
        outcomes, messages = await _run_sequential(call, tool_calls)
    else:
        outcomes = await _run_parallel(call, tool_calls)
        messages = [_result_message(tc, outcome) for tc, outcome in zip(tool_calls, outcomes, strict=True)]
        for message in messages:
            await emit(MessageStartEvent(message=message))
            await emit(MessageEndEvent(message=message))
    terminate = bool(outcomes) and all(outcome.result.terminate is True for outcome in outcomes)
    return ToolBatch(messages=messages, terminate=terminate)


def _is_sequential(context: AgentContext, tool_calls: Sequence[ToolCall], options: AgentOptions) -> bool:
    if options.tool_execution == "sequential":
        return True
    for tool_call in tool_calls:
        tool = _find_tool(context, tool_call.name)
        if tool is not None and tool.execution_mode == "sequential":
            return True
    return False


async def _run_sequential(
    call: _Call, tool_calls: Sequence[ToolCall]
) -> tuple[list[_Outcome], list[ToolResultMessage]]:
    outcomes: list[_Outcome] = []
    messages: list[ToolResultMessage] = []
    for tool_call in tool_calls:
        await _emit_start(call, tool_call)
        prepared = await _prepare(call, tool_call)
        if isinstance(prepared, _Outcome):
            outcome = prepared
        else:
            outcome = await _finalise(call, prepared, await _execute(call, prepared))
        await _emit_end(call, tool_call, outcome)
        message = _result_message(tool_call, outcome)
        await call.emit(MessageStartEvent(message=message))
        await call.emit(MessageEndEvent(message=message))
        outcomes.append(outcome)
        messages.append(message)
    return outcomes, messages


async def _run_parallel(call: _Call, tool_calls: Sequence[ToolCall]) -> list[_Outcome]:
    outcomes: list[_Outcome | None] = [None] * len(tool_calls)
    prepared: list[tuple[int, _Prepared]] = []
    for index, tool_call in enumerate(tool_calls):
        await _emit_start(call, tool_call)
        step = await _prepare(call, tool_call)
        if isinstance(step, _Outcome):
            await _emit_end(call, tool_call, step)
            outcomes[index] = step
        else:
            prepared.append((index, step))

    finished: list[int] = []  # indexes in the order their execution completed

    async def run(index: int, item: _Prepared) -> _Outcome:
        try:
            return await _execute(call, item)
        finally:
            finished.append(index)

    tasks = {asyncio.ensure_future(run(index, item)): (index, item) for index, item in prepared}
    try:
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=lambda t: finished.index(tasks[t][0])):
                index, item = tasks[task]
                outcome = await _finalise(call, item, task.result())
                await _emit_end(call, item.tool_call, outcome)
                outcomes[index] = outcome
    finally:
        await _reap(tasks)
    return [outcome for outcome in outcomes if outcome is not None]


async def _prepare(call: _Call, tool_call: ToolCall) -> _Prepared | _Outcome:
    tool = _find_tool(call.context, tool_call.name)
    if tool is None:
        return _Outcome(error_result(f"Tool {tool_call.name} not found"), is_error=True)
    try:
        prepared_call = tool_call
        if tool.prepare_arguments is not None:
            prepared_args = await maybe_await(tool.prepare_arguments(tool_call.arguments))
            if prepared_args is not tool_call.arguments:
                prepared_call = msgspec.structs.replace(tool_call, arguments=prepared_args)
        args = validate_tool_arguments(tool, prepared_call)
        hook = call.options.before_tool_call
        if hook is not None:
            before = await maybe_await(
                hook(
                    BeforeToolCallContext(
                        assistant_message=call.assistant_message,
                        tool_call=tool_call,
                        args=args,
                        context=call.context,
                    ),
                    call.signal,
                )
            )
            if before is not None and before.block:
                reason = before.reason or "Tool execution was blocked"
                return _Outcome(error_result(reason), is_error=True)
    except Exception as exc:
        return _Outcome(error_result(_error_text(exc)), is_error=True)
    return _Prepared(tool_call=tool_call, tool=tool, args=args)


async def _execute(call: _Call, prepared: _Prepared) -> _Outcome:
    tool_call = prepared.tool_call
    updates: list[asyncio.Task[None]] = []
    settled = False

    def on_update(partial: AgentToolResult) -> None:
        # Updates after the tool settled are dropped (pi 0.73.1 still emitted them).
        if settled:
            return
        event = ToolExecutionUpdateEvent(
            tool_call_id=tool_call.id,
            tool_name=tool_call.name,
            args=tool_call.arguments,
            partial_result=_result_data(partial),
        )
        updates.append(call.emit.start(event))

    try:
        try:
            result = await prepared.tool.execute(tool_call.id, prepared.args, call.signal, on_update)
            outcome = _Outcome(result, is_error=False)
        except Exception as exc:
            outcome = _Outcome(error_result(_error_text(exc)), is_error=True)
        finally:
            settled = True
        if updates:
            await asyncio.gather(*updates)
    finally:
        await _reap(updates)
    return outcome


async def _finalise(call: _Call, prepared: _Prepared, executed: _Outcome) -> _Outcome:
    hook = call.options.after_tool_call
    if hook is None:
        return executed
    try:
        override = await maybe_await(
            hook(
                AfterToolCallContext(
                    assistant_message=call.assistant_message,
                    tool_call=prepared.tool_call,
                    args=prepared.args,
                    result=executed.result,
                    is_error=executed.is_error,
                    context=call.context,
                ),
                call.signal,
            )
        )
    except Exception as exc:
        return _Outcome(error_result(_error_text(exc)), is_error=True)
    if override is None:
        return executed
    original = executed.result
    result = AgentToolResult(
        content=original.content if override.content is None else override.content,
        details=original.details if override.details is None else override.details,
        terminate=original.terminate if override.terminate is None else override.terminate,
    )
    is_error = executed.is_error if override.is_error is None else override.is_error
    return _Outcome(result, is_error)


async def _emit_start(call: _Call, tool_call: ToolCall) -> None:
    await call.emit(
        ToolExecutionStartEvent(tool_call_id=tool_call.id, tool_name=tool_call.name, args=tool_call.arguments)
    )


async def _emit_end(call: _Call, tool_call: ToolCall, outcome: _Outcome) -> None:
    await call.emit(
        ToolExecutionEndEvent(
            tool_call_id=tool_call.id,
            tool_name=tool_call.name,
            result=_result_data(outcome.result),
            is_error=outcome.is_error,
        )
    )


def _result_data(result: AgentToolResult) -> AgentToolResultData:
    return AgentToolResultData(
        content=list(result.content), details=result.details, terminate=result.terminate
    )


def _result_message(tool_call: ToolCall, outcome: _Outcome) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=tool_call.id,
        tool_name=tool_call.name,
        content=list(outcome.result.content),
        details=outcome.result.details,
        is_error=outcome.is_error,
        timestamp=now_ms(),
    )


def _find_tool(context: AgentContext, name: str) -> AgentTool | None:
    for tool in context.tools or ():
        if tool.name == name:
            return tool
    return None


def _error_text(exc: BaseException) -> str:
    return str(exc)


async def _reap(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel and await every task still running: only happens when the batch itself is
    interrupted (cancelled), so that no tool or delivery outlives the loop that started it."""
    running = [task for task in tasks if not task.done()]
    for task in running:
        task.cancel()
    if running:
        await asyncio.gather(*running, return_exceptions=True)
