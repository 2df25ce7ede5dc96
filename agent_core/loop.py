"""The agent loop: prompt -> model -> tools -> model ... until nothing is left to do.

A faithful port of pi-agent-core 0.73.1 `agent-loop.ts`. Two layers:

- `run_agent_loop` / `run_agent_loop_continue` drive one run and hand every event to `emit`
  (sync or async; each call is awaited before the loop goes on, so a slow sink slows the loop).
  They return the messages the run added.
- `agent_loop` / `agent_loop_continue` run the same loop in a task owned by the returned
  `AgentEventStream`. Unlike pi, whose stream never ends when the loop raises, our stream ends by
  raising the loop's exception to its consumer.

The loop never raises for model failures: a stream function reports those as an assistant message
with `stop_reason` `"error"` or `"aborted"`, which ends the run. It raises for programming errors in
the hooks (`convert_to_llm`, `transform_context`, a sink) and for invalid `continue` input.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import importlib
from collections.abc import Coroutine, Sequence
from typing import Any, cast

from agent_core._emitter import AgentEventSink, Emitter
from agent_core._tool_exec import execute_tool_calls
from agent_core.abort import AbortSignal
from agent_core.agent_types import (
    AgentContext,
    AgentLoopConfig,
    AgentOptions,
    MessageSource,
    ShouldStopAfterTurnContext,
)
from agent_core.awaitables import maybe_await
from agent_core.errors import AgentCoreError, ContinueError
from agent_core.event_stream import AssistantMessageEventStream, EventStream
from agent_core.events import (
    AgentEndEvent,
    AgentEvent,
    AgentStartEvent,
    DoneEvent,
    ErrorEvent,
    MessageEndEvent,
    MessageStartEvent,
    MessageUpdateEvent,
    StartEvent,
    TurnEndEvent,
    TurnStartEvent,
)
from agent_core.llm import Context, Model, StreamFn, StreamOptions, Tool
from agent_core.messages import AgentMessage, AssistantMessage, ToolResultMessage, tool_calls_of

__all__ = [
    "AgentEventSink",
    "AgentEventStream",
    "agent_loop",
    "agent_loop_continue",
    "run_agent_loop",
    "run_agent_loop_continue",
]


# --- entry points -----------------------------------------------------------------------------


async def run_agent_loop(  # noqa: PLR0917 (pi's positional signature)
    prompts: Sequence[AgentMessage],
    context: AgentContext,
    config: AgentLoopConfig,
    emit: AgentEventSink,
    signal: AbortSignal | None = None,
    stream_fn: StreamFn | None = None,
) -> list[AgentMessage]:
    """Run the loop for new `prompts` on top of `context`; return the messages the run added.

    `context` is not modified: the loop works on a copy of its message list.
    """
    emitter = Emitter(emit)
    new_messages: list[AgentMessage] = list(prompts)
    current = AgentContext(
        system_prompt=context.system_prompt,
        messages=[*context.messages, *prompts],
        tools=context.tools,
    )
    await emitter(AgentStartEvent())
    await emitter(TurnStartEvent())
    for prompt in prompts:
        await emitter(MessageStartEvent(message=prompt))
        await emitter(MessageEndEvent(message=prompt))
    await _run_loop(current, new_messages, config=config, signal=signal, emit=emitter, stream_fn=stream_fn)
    return new_messages


async def run_agent_loop_continue(
    context: AgentContext,
    config: AgentLoopConfig,
    emit: AgentEventSink,
    signal: AbortSignal | None = None,
    stream_fn: StreamFn | None = None,
) -> list[AgentMessage]:
    """Continue from an existing transcript (its last message must not be an assistant message).

    Raises `ContinueError` for an empty transcript or an assistant tail. Existing messages are not
    re-emitted and are not part of the result.
    """
    _check_continuable(context)
    emitter = Emitter(emit)
    new_messages: list[AgentMessage] = []
    current = AgentContext(
        system_prompt=context.system_prompt, messages=list(context.messages), tools=context.tools
    )
    await emitter(AgentStartEvent())
    await emitter(TurnStartEvent())
    await _run_loop(current, new_messages, config=config, signal=signal, emit=emitter, stream_fn=stream_fn)
    return new_messages


def agent_loop(
    prompts: Sequence[AgentMessage],
    context: AgentContext,
    config: AgentLoopConfig,
    signal: AbortSignal | None = None,
    stream_fn: StreamFn | None = None,
) -> AgentEventStream:
    """Start `run_agent_loop` in a task and return the stream of its events.

    Must be called with a running event loop. The stream completes on `agent_end` with the new
    messages as its result; if the loop raises, iteration and `result()` raise that exception.
    """
    stream = AgentEventStream()
    stream._run(run_agent_loop(prompts, context, config, stream.push, signal, stream_fn))
    return stream


def agent_loop_continue(
    context: AgentContext,
    config: AgentLoopConfig,
    signal: AbortSignal | None = None,
    stream_fn: StreamFn | None = None,
) -> AgentEventStream:
    """Like `agent_loop`, continuing from `context`. Raises `ContinueError` at once (before any
    task starts) for an empty transcript or an assistant tail."""
    _check_continuable(context)
    stream = AgentEventStream()
    stream._run(run_agent_loop_continue(context, config, stream.push, signal, stream_fn))
    return stream


def _check_continuable(context: AgentContext) -> None:
    if not context.messages:
        raise ContinueError("Cannot continue: no messages in context")
    last = context.messages[-1]
    if last.role == "assistant":
        raise ContinueError(f"Cannot continue from message role: {last.role}")


def _is_agent_end(event: AgentEvent) -> bool:
    return event.type == "agent_end"


def _agent_end_messages(event: AgentEvent) -> list[AgentMessage]:
    return event.messages if isinstance(event, AgentEndEvent) else []


class AgentEventStream(EventStream[AgentEvent, list[AgentMessage]]):
    """The events of one loop run. The stream owns the task that runs the loop (see
    `EventStream` for when that task is cancelled and waited for): `aclose()`, leaving
    ``async with``, or abandoning an iteration before `agent_end` stops the loop."""

    def __init__(self) -> None:
        super().__init__(_is_agent_end, _agent_end_messages)

    def _run(self, run: Coroutine[Any, Any, list[AgentMessage]]) -> None:
        # A stream closed before its task ever ran never awaits `run`: close it instead.
        self.start(self._drive(run), name="agent-loop", on_unfinished=lambda _task: run.close())

    async def _drive(self, run: Coroutine[Any, Any, list[AgentMessage]]) -> None:
        try:
            messages = await run
        except asyncio.CancelledError:
            self.fail(AgentCoreError("The agent loop was cancelled"))
            raise
        except Exception as exc:
            self.fail(exc)
            return
        self.end(messages)


# --- the double loop --------------------------------------------------------------------------


async def _run_loop(
    context: AgentContext,
    new_messages: list[AgentMessage],
    *,
    config: AgentLoopConfig,
    signal: AbortSignal | None,
    emit: Emitter,
    stream_fn: StreamFn | None,
) -> None:
    first_turn = True
    pending = await _poll(config.get_steering_messages)
    while True:
        has_more_tool_calls = True
        while has_more_tool_calls or pending:
            if first_turn:
                first_turn = False
            else:
                await emit(TurnStartEvent())
                await _refresh_tools(context, config.options)
            for message in pending:
                await emit(MessageStartEvent(message=message))
                await emit(MessageEndEvent(message=message))
                context.messages.append(message)
                new_messages.append(message)
            pending = []

            message = await _stream_assistant_response(context, config, signal, emit, stream_fn)
            new_messages.append(message)
            if message.stop_reason in ("error", "aborted"):
                await emit(TurnEndEvent(message=message, tool_results=[]))
                await emit(AgentEndEvent(messages=new_messages))
                return

            tool_calls = tool_calls_of(message)
            tool_results: list[ToolResultMessage] = []
            has_more_tool_calls = False
            if tool_calls:
                batch = await execute_tool_calls(
                    context, message, tool_calls, options=config.options, signal=signal, emit=emit
                )
                tool_results = batch.messages
                has_more_tool_calls = not batch.terminate
                context.messages.extend(tool_results)
                new_messages.extend(tool_results)

            await emit(TurnEndEvent(message=message, tool_results=tool_results))
            should_stop = config.options.should_stop_after_turn
            if should_stop is not None:
                stop_context = ShouldStopAfterTurnContext(
                    message=message, tool_results=tool_results, context=context, new_messages=new_messages
                )
                if await maybe_await(should_stop(stop_context)):
                    await emit(AgentEndEvent(messages=new_messages))
                    return
            pending = await _poll(config.get_steering_messages)

        follow_ups = await _poll(config.get_follow_up_messages)
        if not follow_ups:
            break
        pending = follow_ups
    await emit(AgentEndEvent(messages=new_messages))


async def _refresh_tools(context: AgentContext, options: AgentOptions) -> None:
    if options.refresh_tools is None:
        return
    tools = await maybe_await(options.refresh_tools())
    if tools is not None:
        context.tools = list(tools)


async def _poll(source: MessageSource | None) -> list[AgentMessage]:
    if source is None:
        return []
    return list(await maybe_await(source()) or [])


# --- one model call ---------------------------------------------------------------------------


async def _stream_assistant_response(
    context: AgentContext,
    config: AgentLoopConfig,
    signal: AbortSignal | None,
    emit: Emitter,
    stream_fn: StreamFn | None,
) -> AssistantMessage:
    """Call the model once, mirror its stream as message events, and return the final message.

    Only the model's view goes through `transform_context` and `convert_to_llm`; the loop's own
    context keeps every message. The partial message lives in `context.messages` while streaming.
    The response stream is closed before this returns or raises: when the sink raises mid-stream,
    the provider's producer is cancelled and has finished (its HTTP response closed) by then.
    """
    options = config.options
    messages = context.messages
    if options.transform_context is not None:
        messages = list(await maybe_await(options.transform_context(messages, signal)))
    llm_messages = await maybe_await(options.convert_to_llm(messages))
    llm_context = Context(
        system_prompt=context.system_prompt,
        messages=list(llm_messages),
        tools=_llm_tools(context),
    )
    call_options = await _call_options(config.model, options, signal)
    stream_function = stream_fn if stream_fn is not None else _default_stream_fn()
    response: AssistantMessageEventStream = await maybe_await(
        stream_function(config.model, llm_context, call_options)
    )
    async with response:
        return await _mirror(response, context, emit)


async def _mirror(
    response: AssistantMessageEventStream, context: AgentContext, emit: Emitter
) -> AssistantMessage:
    # As pi's loop: message_start and message_update carry a shallow copy of the partial (its
    # content list is the provider's own, which goes on growing), message_end the final message.
    partial: AssistantMessage | None = None
    async for event in response:
        if isinstance(event, StartEvent):
            partial = event.partial
            context.messages.append(partial)
            await emit(MessageStartEvent(message=copy.copy(partial)))
        elif isinstance(event, _COMPLETING):
            break
        elif partial is not None:
            partial = event.partial
            context.messages[-1] = partial
            await emit(MessageUpdateEvent(message=copy.copy(partial), assistant_message_event=event))
    final = await response.result()
    if partial is not None:
        context.messages[-1] = final
    else:
        context.messages.append(final)
        await emit(MessageStartEvent(message=copy.copy(final)))
    await emit(MessageEndEvent(message=final))
    return final


_COMPLETING = (DoneEvent, ErrorEvent)  # a tuple: `A | B` would build a union object per event


def _llm_tools(context: AgentContext) -> list[Tool] | None:
    if context.tools is None:
        return None
    return [Tool(name=t.name, description=t.description, parameters=t.parameters) for t in context.tools]


async def _call_options(model: Model, options: AgentOptions, signal: AbortSignal | None) -> StreamOptions:
    """The `StreamOptions` of one model call: a fresh copy of `options.stream` (a stream function
    may change it) with the run's signal and the key `get_api_key` gives, if any."""
    api_key: str | None = None
    if options.get_api_key is not None:
        api_key = await maybe_await(options.get_api_key(model.provider))
    return dataclasses.replace(options.stream, signal=signal, api_key=api_key or options.stream.api_key)


def _default_stream_fn() -> StreamFn:
    # Imported on first use: the providers package is optional for callers that pass their own
    # stream function, and importing it eagerly would pull in the HTTP stack.
    providers = importlib.import_module("agent_core.providers")
    return cast(StreamFn, providers.stream_simple)
