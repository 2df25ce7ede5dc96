"""The faux provider's machinery: pi's usage estimate and block-by-block streaming with pacing
and per-chunk abort checks (shared by scripted registrations and the built-in models). The
pacing itself is the pacer's (`agent_core.providers._pacer`): one scheduler for every stream."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeAlias

import msgspec

from agent_core.event_stream import AssistantMessageEventStream
from agent_core.events import (
    AssistantMessageEvent,
    ErrorEvent,
    StartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    completing_event,
)
from agent_core.llm import Context, StreamOptions
from agent_core.messages import (
    AssistantMessage,
    Cost,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCall,
    Usage,
    UserMessage,
    now_ms,
)
from agent_core.providers._common import ABORTED_MESSAGE
from agent_core.providers._pacer import Steps, running_pacer

FauxBlock: TypeAlias = TextContent | ThinkingContent | ToolCall


# --- usage estimate ----------------------------------------------------------------------------


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def content_text(content: str | Sequence[TextContent | ImageContent]) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        block.text if isinstance(block, TextContent) else f"[image:{block.mime_type}:{len(block.data)}]"
        for block in content
    )


def _assistant_text(content: Sequence[FauxBlock]) -> str:
    parts = []
    for block in content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ThinkingContent):
            parts.append(block.thinking)
        else:
            parts.append(f"{block.name}:{compact_json(block.arguments)}")
    return "\n".join(parts)


def _message_text(message: Message) -> str:
    if isinstance(message, UserMessage):
        return content_text(message.content)
    if isinstance(message, AssistantMessage):
        return _assistant_text(message.content)
    return "\n".join([message.tool_name, *(content_text([block]) for block in message.content)])


def serialize_context(context: Context) -> str:
    """The text whose length estimates the prompt: system prompt, messages, tools."""
    parts: list[str] = []
    if context.system_prompt:
        parts.append(f"system:{context.system_prompt}")
    parts.extend(f"{message.role}:{_message_text(message)}" for message in context.messages)
    if context.tools:
        parts.append("tools:" + compact_json([tool.dump() for tool in context.tools]))
    return "\n\n".join(parts)


def _common_prefix(a: str, b: str) -> int:
    limit = min(len(a), len(b))
    index = 0
    while index < limit and a[index] == b[index]:
        index += 1
    return index


def with_usage_estimate(
    message: AssistantMessage,
    context: Context,
    options: StreamOptions | None,
    prompt_cache: dict[str, str] | None = None,
) -> AssistantMessage:
    """`message` with pi's faux usage estimate (cost 0)."""
    prompt = serialize_context(context)
    prompt_tokens = estimate_tokens(prompt)
    output_tokens = estimate_tokens(_assistant_text(message.content))
    input_tokens, cache_read, cache_write = prompt_tokens, 0, 0
    session_id = options.session_id if options is not None else None
    if prompt_cache is not None and session_id and (options is None or options.cache_retention != "none"):
        previous = prompt_cache.get(session_id)
        if previous:
            cached = _common_prefix(previous, prompt)
            cache_read = estimate_tokens(previous[:cached])
            cache_write = estimate_tokens(prompt[cached:])
            input_tokens = max(0, prompt_tokens - cache_read)
        else:
            cache_write = prompt_tokens
        prompt_cache[session_id] = prompt
    usage = Usage(
        input=input_tokens,
        output=output_tokens,
        cache_read=cache_read,
        cache_write=cache_write,
        total_tokens=input_tokens + output_tokens + cache_read + cache_write,
        cost=Cost(),
    )
    return msgspec.structs.replace(message, usage=usage)


# --- streaming ---------------------------------------------------------------------------------


class Pacing(msgspec.Struct, kw_only=True, dict=True):
    split: Callable[[str], list[str]]
    delay_s: Callable[[str], float]
    split_arguments: Callable[[str], list[str]] | None = None
    initial_delay_s: float = 0.0


class Streamer:
    """Streams one finished message block by block (shared by scripted and built-in models).

    `steps` is the stream as pacer steps (`agent_core.providers._pacer`): it pushes events and
    yields the wait before each chunk; the abort signal is checked after every wait. The events
    share one live partial message (as pi's providers do), which grows as chunks are added; only
    a finished tool call's arguments go into a new one (see `_block`).
    """

    def __init__(
        self, stream: AssistantMessageEventStream, message: AssistantMessage, options: StreamOptions
    ) -> None:
        self.stream = stream
        self.message = message
        self.signal = options.signal
        self.on_event = options.on_event
        self.partial = msgspec.structs.replace(message, content=[])

    async def run(self, pacing: Pacing) -> None:
        """Stream the message, paced by the running loop's pacer."""
        await running_pacer().drive(self.steps(pacing), self.signal)

    def push(self, event: AssistantMessageEvent) -> None:
        if self.on_event is not None:
            self.on_event()
        self.stream.push(event)

    def aborted(self) -> bool:
        if self.signal is None or not self.signal.aborted:
            return False
        final = msgspec.structs.replace(
            self.partial, stop_reason="aborted", error_message=ABORTED_MESSAGE, timestamp=now_ms()
        )
        self.push(ErrorEvent(reason="aborted", error=final))
        self.stream.end(final)
        return True

    def steps(self, pacing: Pacing) -> Steps:
        if self.aborted():
            return
        self.push(StartEvent(partial=self.partial))
        if pacing.initial_delay_s > 0:
            yield pacing.initial_delay_s
        for index, block in enumerate(self.message.content):
            if self.aborted():
                return
            if not (yield from self._block(index, block, pacing)):
                return
        self.push(completing_event(self.message))
        self.stream.end(self.message)

    def _pause(self, chunk: str, pacing: Pacing) -> Generator[float, None, bool]:
        """Wait before `chunk`; False (after pushing the aborted error) when the signal fired."""
        yield pacing.delay_s(chunk)
        return not self.aborted()

    def _block(self, index: int, block: FauxBlock, pacing: Pacing) -> Generator[float, None, bool]:
        partial = self.partial
        if isinstance(block, ThinkingContent):
            live = ThinkingContent(
                thinking="", thinking_signature=block.thinking_signature, redacted=block.redacted
            )
            partial.content.append(live)
            self.push(ThinkingStartEvent(content_index=index, partial=partial))
            for chunk in pacing.split(block.thinking):
                if not (yield from self._pause(chunk, pacing)):
                    return False
                live.thinking += chunk
                self.push(ThinkingDeltaEvent(content_index=index, delta=chunk, partial=partial))
            self.push(ThinkingEndEvent(content_index=index, content=block.thinking, partial=partial))
        elif isinstance(block, TextContent):
            text = TextContent(text="", text_signature=block.text_signature)
            partial.content.append(text)
            self.push(TextStartEvent(content_index=index, partial=partial))
            for chunk in pacing.split(block.text):
                if not (yield from self._pause(chunk, pacing)):
                    return False
                text.text += chunk
                self.push(TextDeltaEvent(content_index=index, delta=chunk, partial=partial))
            self.push(TextEndEvent(content_index=index, content=block.text, partial=partial))
        else:
            call = ToolCall(id=block.id, name=block.name, arguments={})
            partial.content.append(call)
            self.push(ToolCallStartEvent(content_index=index, partial=partial))
            split = pacing.split_arguments or pacing.split
            for chunk in split(compact_json(block.arguments)):
                if not (yield from self._pause(chunk, pacing)):
                    return False
                self.push(ToolCallDeltaEvent(content_index=index, delta=chunk, partial=partial))
            # Whoever holds the partial of a delta still sees `arguments == {}` (pi's faux keeps
            # them empty until toolcall_end): the rest of the stream gets a new partial.
            content = list(partial.content)
            content[index] = msgspec.structs.replace(call, arguments=block.arguments)
            self.partial = msgspec.structs.replace(partial, content=content)
            self.push(ToolCallEndEvent(content_index=index, tool_call=copy.copy(block), partial=self.partial))
        return True


def fail_stream(
    stream: AssistantMessageEventStream, message: AssistantMessage, on_event: Callable[[], None] | None
) -> None:
    if on_event is not None:
        on_event()
    stream.push(ErrorEvent(reason="error", error=message))
    stream.end(message)
