"""The ``openai-completions`` API: OpenAI Chat Completions, streamed.

Every server that speaks this API works through it: OpenAI itself, and Ollama, vLLM, llama.cpp,
LM Studio, OpenRouter, Groq, ... by setting the model's `base_url` (default
``https://api.openai.com/v1``) and, where needed, `headers` (the model's, then the call's) and
`compat` flags (camelCase keys, as pi's: ``supportsStore``, ``supportsDeveloperRole``,
``supportsReasoningEffort``, ``supportsUsageInStreaming``, ``maxTokensField``,
``requiresToolResultName``, ``requiresAssistantAfterToolResult``, ``requiresThinkingAsText``,
``supportsStrictMode``, ``requiresApiKey``). Unset flags are detected from the provider name and
base URL.

Stream semantics follow pi-ai 0.73.1: `start` only once the response has arrived (an HTTP error
is a lone `error` event); one text block and one thinking block per message; tool calls matched by
index then id; and every ``*_end`` event is emitted after the body ends, in content order.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any, TypeAlias

from agent_core.errors import ProviderError
from agent_core.event_stream import AssistantMessageEventStream
from agent_core.events import (
    AssistantMessageEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from agent_core.json_stream import IncrementalJson, as_arguments
from agent_core.llm import Context, Model, StreamOptions
from agent_core.messages import (
    AssistantMessage,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    Usage,
)
from agent_core.providers._common import (
    base_max_tokens,
    clamp_reasoning,
    key_missing,
    snapshot,
    stream_from,
    with_options,
)
from agent_core.providers._openai_request import (
    DEFAULT_BASE_URL,
    Compat,
    OpenAICompletionsOptions,
    base_url_of,
    build_request_body,
    compact_json,
    convert_messages,
    convert_tools,
    detect_compat,
    format_http_error,
    request_headers,
)
from agent_core.providers._sse import ServerSentEvent
from agent_core.providers._sse_exchange import SSERequest, produce_sse
from agent_core.usage import make_usage

API = "openai-completions"
_REASONING_FIELDS = ("reasoning_content", "reasoning", "reasoning_text")


# --- response ---------------------------------------------------------------------------------


def map_finish_reason(reason: str | None) -> tuple[StopReason, str | None]:
    if reason in (None, "stop", "end"):
        return "stop", None
    if reason == "length":
        return "length", None
    if reason in ("tool_calls", "function_call"):
        return "toolUse", None
    return "error", f"Provider finish_reason: {reason}"


def parse_usage(raw: dict[str, Any], model: Model) -> Usage:
    """Usage of a chunk: cached prompt tokens are reads, the rest of the prompt is input."""
    prompt = raw.get("prompt_tokens") or 0
    details = raw.get("prompt_tokens_details") or {}
    cache_read = details.get("cached_tokens")
    if cache_read is None:
        cache_read = raw.get("prompt_cache_hit_tokens") or 0
    cache_write = details.get("cache_write_tokens") or 0
    if cache_write:
        cache_read = max(0, cache_read - cache_write)
    return make_usage(
        model,
        input=max(0, prompt - cache_read - cache_write),
        output=raw.get("completion_tokens") or 0,
        cache_read=cache_read,
        cache_write=cache_write,
    )


_EventFactory: TypeAlias = Callable[[AssistantMessage], AssistantMessageEvent]


class ChunkAssembler:
    """Builds the assistant message from parsed chunks, pushing events as pi does (sans I/O).

    Holds the per-response state (open blocks, tool calls by index and id, argument parsers)
    until `finish()`. The events of one chunk share one snapshot of the message taken after the
    whole chunk is applied: that is what pi's consumers observe (its events share the live
    message, and a consumer runs only between chunks), and what the recorded traces show.
    """

    def __init__(self, model: Model, output: AssistantMessage, stream: AssistantMessageEventStream) -> None:
        self.model = model
        self.output = output
        self.stream = stream
        self.done = False
        self._text: TextContent | None = None
        self._thinking: ThinkingContent | None = None
        self._by_index: dict[int, ToolCall] = {}
        self._by_id: dict[str, ToolCall] = {}
        self._args: dict[int, IncrementalJson] = {}
        self._pending_details: dict[str, Any] = {}
        self._batch: list[_EventFactory] = []

    def _index(self, block: object) -> int:
        return next(i for i, b in enumerate(self.output.content) if b is block)

    def _append(self, block: TextContent | ThinkingContent | ToolCall) -> int:
        self.output.content.append(block)
        return len(self.output.content) - 1

    def _emit(self, factory: _EventFactory) -> None:
        self._batch.append(factory)

    def _flush(self) -> None:
        if not self._batch:
            return
        partial = snapshot(self.output)
        batch, self._batch = self._batch, []
        for factory in batch:
            self.stream.push(factory(partial))

    def feed_sse(self, event: ServerSentEvent) -> None:
        """Handle one SSE event. Raises `ProviderError` on an error event or unparsable data."""
        if self.done:
            return
        data = event.data
        if data.strip() == "[DONE]":
            self.done = True
            return
        if not data and event.event is None:
            return
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            raise ProviderError(f"Could not parse stream chunk as JSON: {data[:500]}") from exc
        if event.event == "error" or (isinstance(chunk, dict) and chunk.get("error")):
            error = chunk.get("error", chunk) if isinstance(chunk, dict) else chunk
            message = error.get("message") if isinstance(error, dict) else None
            raise ProviderError(message if isinstance(message, str) and message else compact_json(error))
        if isinstance(chunk, dict):
            self.feed_chunk(chunk)

    def feed_chunk(self, chunk: dict[str, Any]) -> None:
        """Apply one ``chat.completion.chunk`` and push its events."""
        try:
            self._apply_chunk(chunk)
        finally:
            self._flush()

    def _apply_chunk(self, chunk: dict[str, Any]) -> None:
        output = self.output
        if not output.response_id and isinstance(chunk.get("id"), str) and chunk["id"]:
            output.response_id = chunk["id"]
        chunk_model = chunk.get("model")
        if (
            isinstance(chunk_model, str)
            and chunk_model not in ("", self.model.id)
            and not output.response_model
        ):
            output.response_model = chunk_model
        if isinstance(chunk.get("usage"), dict):
            output.usage = parse_usage(chunk["usage"], self.model)
        choices = chunk.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):
            return
        if not chunk.get("usage") and isinstance(choice.get("usage"), dict):
            output.usage = parse_usage(choice["usage"], self.model)
        if choice.get("finish_reason"):
            output.stop_reason, message = map_finish_reason(choice["finish_reason"])
            if message:
                output.error_message = message
        delta = choice.get("delta")
        if isinstance(delta, dict):
            self._feed_delta(delta)

    def _feed_delta(self, delta: dict[str, Any]) -> None:
        content = delta.get("content")
        if isinstance(content, str) and content:
            self._text_delta(content)
        field = next((f for f in _REASONING_FIELDS if isinstance(delta.get(f), str) and delta[f]), None)
        if field is not None:
            self._thinking_delta(field, delta[field])
        tool_calls = delta.get("tool_calls")
        if isinstance(tool_calls, list):
            for tool_call in tool_calls:
                if isinstance(tool_call, dict):
                    self._tool_call_delta(tool_call)
        details = delta.get("reasoning_details")
        if isinstance(details, list):
            for detail in details:
                self._reasoning_detail(detail)

    def _text_delta(self, text: str) -> None:
        if self._text is None:
            self._text = TextContent(text="")
            index = self._append(self._text)
            self._emit(lambda p: TextStartEvent(content_index=index, partial=p))
        self._text.text += text
        at = self._index(self._text)
        self._emit(lambda p: TextDeltaEvent(content_index=at, delta=text, partial=p))

    def _thinking_delta(self, field: str, text: str) -> None:
        if self._thinking is None:
            self._thinking = ThinkingContent(thinking="", thinking_signature=field)
            index = self._append(self._thinking)
            self._emit(lambda p: ThinkingStartEvent(content_index=index, partial=p))
        self._thinking.thinking += text
        at = self._index(self._thinking)
        self._emit(lambda p: ThinkingDeltaEvent(content_index=at, delta=text, partial=p))

    def _tool_call_delta(self, delta: dict[str, Any]) -> None:
        stream_index = delta.get("index") if isinstance(delta.get("index"), int) else None
        call_id: str = delta["id"] if isinstance(delta.get("id"), str) else ""
        function: dict[str, Any] = delta["function"] if isinstance(delta.get("function"), dict) else {}
        name: str = function["name"] if isinstance(function.get("name"), str) else ""
        block = self._by_index.get(stream_index) if stream_index is not None else None
        if block is None and call_id:
            block = self._by_id.get(call_id)
        if block is None:
            block = ToolCall(id=call_id, name=name, arguments={})
            pending = self._pending_details.pop(call_id, None) if call_id else None
            if pending is not None:
                block.thought_signature = compact_json(pending)
            index = self._append(block)
            self._args[id(block)] = IncrementalJson()
            self._emit(lambda p: ToolCallStartEvent(content_index=index, partial=p))
        if stream_index is not None:
            self._by_index.setdefault(stream_index, block)
        if call_id:
            self._by_id[call_id] = block
            if not block.id:
                block.id = call_id
        if name and not block.name:
            block.name = name
        arguments = function.get("arguments")
        text = arguments if isinstance(arguments, str) else ""
        if text:
            block.arguments = as_arguments(self._args[id(block)].feed(text))
        at = self._index(block)
        self._emit(lambda p: ToolCallDeltaEvent(content_index=at, delta=text, partial=p))

    def _reasoning_detail(self, detail: Any) -> None:
        if not (isinstance(detail, dict) and detail.get("type") == "reasoning.encrypted"):
            return
        if not (detail.get("id") and detail.get("data")):
            return
        calls = (b for b in self.output.content if isinstance(b, ToolCall) and b.id == detail["id"])
        match = next(calls, None)
        if match is not None:
            match.thought_signature = compact_json(detail)
        else:
            self._pending_details[detail["id"]] = detail

    def complete(self) -> bool:
        return self.done

    def finish(self) -> str | None:
        """Close every block, in content order (pi 0.73.1 closes them only at the end)."""
        for index, block in enumerate(self.output.content):
            self._emit(_end_event(index, block, self._args.pop(id(block), None)))
        self._flush()
        return None


def _end_event(
    index: int, block: TextContent | ThinkingContent | ToolCall, parser: IncrementalJson | None
) -> _EventFactory:
    if isinstance(block, TextContent):
        return lambda p: TextEndEvent(content_index=index, content=block.text, partial=p)
    if isinstance(block, ThinkingContent):
        return lambda p: ThinkingEndEvent(content_index=index, content=block.thinking, partial=p)
    if parser is not None:
        block.arguments = as_arguments(parser.value())
    final = copy.copy(block)
    return lambda p: ToolCallEndEvent(content_index=index, tool_call=final, partial=p)


# --- entry points -----------------------------------------------------------------------------


def stream_openai_completions(
    model: Model, context: Context, options: StreamOptions | None = None
) -> AssistantMessageEventStream:
    """Stream one assistant message. Never raises: failures are an `error` event."""
    return stream_from(_produce, model, context, options)


def stream_simple_openai_completions(
    model: Model, context: Context, options: StreamOptions | None = None
) -> AssistantMessageEventStream:
    """`stream_openai_completions` with pi's simple defaults: an API key is required (a missing
    one is an `error` event where pi throws), the output cap defaults to min(model max, 32000) and
    `options.reasoning` becomes ``reasoning_effort``."""
    base = options if options is not None else StreamOptions()
    missing = key_missing(model, base, base_url_of(model))
    if missing is not None:
        return missing
    effort = clamp_reasoning(model, base.reasoning)
    opts = with_options(
        OpenAICompletionsOptions,
        base,
        max_tokens=base_max_tokens(model, base),
        reasoning_effort=effort or getattr(base, "reasoning_effort", None),
    )
    return stream_openai_completions(model, context, opts)


async def _produce(
    model: Model, context: Context, options: StreamOptions, stream: AssistantMessageEventStream
) -> None:
    request = SSERequest(
        base_url=base_url_of(model),
        url=f"{base_url_of(model)}/chat/completions",
        headers=lambda api_key, body: request_headers(model, options, api_key),
        body=lambda: build_request_body(model, context, options, detect_compat(model)),
        format_error=format_http_error,
    )
    await produce_sse(model, options, stream, request, lambda output: ChunkAssembler(model, output, stream))


__all__ = [
    "API",
    "DEFAULT_BASE_URL",
    "ChunkAssembler",
    "Compat",
    "OpenAICompletionsOptions",
    "build_request_body",
    "convert_messages",
    "convert_tools",
    "detect_compat",
    "format_http_error",
    "map_finish_reason",
    "parse_usage",
    "stream_openai_completions",
    "stream_simple_openai_completions",
]
