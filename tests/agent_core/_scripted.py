"""Scripted stream functions and message builders for the loop and Agent tests.

A `ScriptedStream` is a stream function that answers the k-th model call with the k-th scripted
response. A response is a producer coroutine that pushes assistant-message events into the stream
from a task of its own (as a provider does), one loop tick apart. The producer tasks belong to the
`ScriptedStream`; `aclose()` (or leaving `async with`) reaps them.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any

import msgspec

from agent_core import (
    AssistantMessage,
    AssistantMessageEvent,
    AssistantMessageEventStream,
    Context,
    DoneEvent,
    ErrorEvent,
    Model,
    StartEvent,
    StreamOptions,
    TextContent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingContent,
    ToolCall,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    Usage,
    UserMessage,
)

MODEL = Model(id="mock", name="mock", api="openai-responses", provider="openai")

Producer = Callable[[AssistantMessageEventStream, StreamOptions], Awaitable[None]]
OnCall = Callable[[int, Model, Context, StreamOptions], None]


def user(text: str) -> UserMessage:
    return UserMessage(content=text)


def text(value: str) -> TextContent:
    return TextContent(text=value)


def thinking(value: str) -> ThinkingContent:
    return ThinkingContent(thinking=value)


def call(call_id: str, name: str, arguments: dict[str, Any]) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def assistant(
    *content: TextContent | ThinkingContent | ToolCall,
    stop_reason: str = "stop",
    error_message: str | None = None,
    model: Model = MODEL,
    usage: Usage | None = None,
) -> AssistantMessage:
    return AssistantMessage(
        content=list(content),
        api=model.api,
        provider=model.provider,
        model=model.id,
        usage=usage or Usage(),
        stop_reason=stop_reason,
        error_message=error_message,
    )


def _final_event(message: AssistantMessage) -> AssistantMessageEvent:
    if message.stop_reason in ("error", "aborted"):
        return ErrorEvent(reason=message.stop_reason, error=message)
    return DoneEvent(reason=message.stop_reason, message=message)


def done_only(message: AssistantMessage) -> Producer:
    """Push only the completing event (no `start`, no deltas), one tick after the call."""

    async def produce(stream: AssistantMessageEventStream, options: StreamOptions) -> None:
        await asyncio.sleep(0)
        stream.push(_final_event(message))

    return produce


def events(build: Callable[[], Sequence[AssistantMessageEvent]]) -> Producer:
    """Push the events `build()` returns, one tick apart."""

    async def produce(stream: AssistantMessageEventStream, options: StreamOptions) -> None:
        for event in build():
            await asyncio.sleep(0)
            stream.push(event)

    return produce


def until_aborted(model: Model = MODEL) -> Producer:
    """Push `start`, wait for the call's abort signal, then end with an aborted message."""

    async def produce(stream: AssistantMessageEventStream, options: StreamOptions) -> None:
        await asyncio.sleep(0)
        partial = assistant(model=model)
        stream.push(StartEvent(partial=copy.deepcopy(partial)))
        assert options.signal is not None
        await options.signal.wait()
        await asyncio.sleep(0)
        final = msgspec.structs.replace(partial, stop_reason="aborted", error_message="Request was aborted")
        stream.push(ErrorEvent(reason="aborted", error=final))

    return produce


class Partial:
    """Builds a provider-style event sequence, snapshotting the partial message at every event."""

    def __init__(self, final: AssistantMessage) -> None:
        self.final = final
        self.message = msgspec.structs.replace(
            copy.deepcopy(final), content=[], stop_reason="stop", error_message=None
        )
        self.out: list[AssistantMessageEvent] = [StartEvent(partial=self._snapshot())]

    def _snapshot(self) -> AssistantMessage:
        return copy.deepcopy(self.message)

    def text(self, *deltas: str) -> Partial:
        index = len(self.message.content)
        block = TextContent(text="")
        self.message.content.append(block)
        self.out.append(TextStartEvent(content_index=index, partial=self._snapshot()))
        for delta in deltas:
            block.text += delta
            self.out.append(TextDeltaEvent(content_index=index, delta=delta, partial=self._snapshot()))
        self.out.append(TextEndEvent(content_index=index, content=block.text, partial=self._snapshot()))
        return self

    def tool_call(self, call_id: str, name: str, steps: Sequence[tuple[str, dict[str, Any]]]) -> Partial:
        """`steps` are (delta, arguments parsed so far) pairs."""
        index = len(self.message.content)
        block = ToolCall(id=call_id, name=name, arguments={})
        self.message.content.append(block)
        self.out.append(ToolCallStartEvent(content_index=index, partial=self._snapshot()))
        for delta, arguments in steps:
            block.arguments = dict(arguments)
            self.out.append(ToolCallDeltaEvent(content_index=index, delta=delta, partial=self._snapshot()))
        self.out.append(
            ToolCallEndEvent(content_index=index, tool_call=copy.deepcopy(block), partial=self._snapshot())
        )
        return self

    def build(self) -> list[AssistantMessageEvent]:
        return [*self.out, _final_event(self.final)]


def streamed(final: AssistantMessage, shape: Callable[[Partial], Partial]) -> Producer:
    return events(lambda: shape(Partial(final)).build())


def text_reply(*chunks: str, stop_reason: str = "stop", error_message: str | None = None) -> Producer:
    """A streamed text answer: start, text_start, one delta per chunk, text_end, done/error."""
    final = assistant(text("".join(chunks)), stop_reason=stop_reason, error_message=error_message)
    return streamed(final, lambda p: p.text(*chunks))


class ScriptedStream:
    """A stream function answering call k with `responses[k]`; see the module docstring."""

    def __init__(self, *responses: Producer, on_call: OnCall | None = None) -> None:
        self._responses = list(responses)
        self._on_call = on_call
        self._tasks: list[asyncio.Task[None]] = []
        self.calls: list[tuple[Model, Context, StreamOptions]] = []

    def __call__(self, model: Model, context: Context, options: StreamOptions) -> AssistantMessageEventStream:
        self.calls.append((model, context, options))
        if self._on_call is not None:
            self._on_call(len(self.calls), model, context, options)
        if not self._responses:
            raise AssertionError(f"unexpected model call #{len(self.calls)}")
        producer = self._responses.pop(0)
        stream = AssistantMessageEventStream()
        self._tasks.append(asyncio.ensure_future(producer(stream, options)))
        return stream

    @property
    def remaining(self) -> int:
        return len(self._responses)

    async def aclose(self) -> None:
        for task in self._tasks:
            if not task.done():
                task.cancel()
        if self._tasks:
            results = await asyncio.gather(*self._tasks, return_exceptions=True)
            for result in results:
                if isinstance(result, Exception):
                    raise result

    async def __aenter__(self) -> ScriptedStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
