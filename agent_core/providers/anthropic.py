"""The ``anthropic-messages`` API: Anthropic's Messages API, streamed.

The base URL is the model's (default ``https://api.anthropic.com``; requests go to
``<base>/v1/messages``) with headers ``x-api-key`` and ``anthropic-version``, then the model's and
the call's own headers. Requests follow pi-ai 0.73.1: the system prompt is a text block with
``cache_control``, as are the last tool and the last user block (``cacheRetention`` "long" adds a
one-hour ttl, "none" removes them); tools stream their input eagerly; thinking is disabled,
adaptive (Opus 4.6/4.7, Sonnet 4.6, or ``compat.forceAdaptiveThinking``) or budget-based.

Events map one to one from the SSE stream and blocks close as the server closes them. A stream
that ends without ``message_stop`` is an error, as is an ``event: error`` (its raw data is the
message) and a ``refusal``/``sensitive`` stop.
"""

from __future__ import annotations

import copy
from typing import Any

from agent_core.errors import ProviderError
from agent_core.event_stream import AssistantMessageEventStream
from agent_core.events import (
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
from agent_core.json_stream import IncrementalJson, as_arguments, parse_json_with_repair
from agent_core.llm import Context, Model, ReasoningLevel, StreamOptions
from agent_core.messages import (
    AssistantMessage,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
)
from agent_core.providers._anthropic_request import (
    ANTHROPIC_VERSION,
    DEFAULT_BASE_URL,
    AnthropicOptions,
    base_url_of,
    build_request_body,
    convert_messages,
    convert_tools,
    format_http_error,
    is_adaptive,
    request_headers,
)
from agent_core.providers._common import (
    adjust_max_tokens_for_thinking,
    base_max_tokens,
    key_missing,
    snapshot,
    stream_from,
    with_options,
)
from agent_core.providers._sse import ServerSentEvent
from agent_core.providers._sse_exchange import SSERequest, produce_sse
from agent_core.usage import make_usage

API = "anthropic-messages"
_MESSAGE_EVENTS = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    }
)


# --- response ---------------------------------------------------------------------------------


def map_stop_reason(reason: str) -> StopReason:
    """Raises `ProviderError` for a reason pi does not know."""
    if reason in ("end_turn", "pause_turn", "stop_sequence"):
        return "stop"
    if reason == "max_tokens":
        return "length"
    if reason == "tool_use":
        return "toolUse"
    if reason in ("refusal", "sensitive"):
        return "error"
    raise ProviderError(f"Unhandled stop reason: {reason}")


class EventAssembler:
    """Builds the assistant message from Anthropic stream events, pushing pi's events (sans I/O).

    Blocks are found by the server's ``index``; the mapping and the tool-argument parsers live
    until the block's ``content_block_stop``.
    """

    def __init__(self, model: Model, output: AssistantMessage, stream: AssistantMessageEventStream) -> None:
        self.model = model
        self.output = output
        self.stream = stream
        self.saw_start = False
        self.saw_stop = False
        self._blocks: dict[int, TextContent | ThinkingContent | ToolCall] = {}
        self._args: dict[int, IncrementalJson] = {}

    def complete(self) -> bool:
        return self.saw_stop

    def finish(self) -> str | None:
        if self.saw_start and not self.saw_stop:
            return "Anthropic stream ended before message_stop"
        return None

    def feed_sse(self, sse: ServerSentEvent) -> None:
        """Handle one SSE event. Raises `ProviderError` on ``event: error`` or bad data."""
        if sse.event == "error":
            raise ProviderError(sse.data)
        if sse.event not in _MESSAGE_EVENTS:
            return
        try:
            event = parse_json_with_repair(sse.data)
        except ValueError as exc:
            raw = "\\n".join(sse.raw)
            raise ProviderError(
                f"Could not parse Anthropic SSE event {sse.event}: {exc}; data={sse.data}; raw={raw}"
            ) from exc
        if isinstance(event, dict):
            self.feed_event(event)

    def feed_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message_start":
            self.saw_start = True
            self._message_start(event.get("message") or {})
        elif kind == "message_stop":
            self.saw_stop = True
        elif kind == "content_block_start":
            self._block_start(event)
        elif kind == "content_block_delta":
            self._block_delta(event)
        elif kind == "content_block_stop":
            self._block_stop(event)
        elif kind == "message_delta":
            self._message_delta(event)

    def _position(self, block: object) -> int:
        return next(i for i, b in enumerate(self.output.content) if b is block)

    def _message_start(self, message: dict[str, Any]) -> None:
        if isinstance(message.get("id"), str):
            self.output.response_id = message["id"]
        usage = message.get("usage") or {}
        self.output.usage = make_usage(
            self.model,
            input=usage.get("input_tokens") or 0,
            output=usage.get("output_tokens") or 0,
            cache_read=usage.get("cache_read_input_tokens") or 0,
            cache_write=usage.get("cache_creation_input_tokens") or 0,
        )

    def _message_delta(self, event: dict[str, Any]) -> None:
        delta = event.get("delta") or {}
        if delta.get("stop_reason"):
            self.output.stop_reason = map_stop_reason(delta["stop_reason"])
        raw = event.get("usage") or {}
        current = self.output.usage
        self.output.usage = make_usage(
            self.model,
            input=_override(raw.get("input_tokens"), current.input),
            output=_override(raw.get("output_tokens"), current.output),
            cache_read=_override(raw.get("cache_read_input_tokens"), current.cache_read),
            cache_write=_override(raw.get("cache_creation_input_tokens"), current.cache_write),
        )

    def _block_start(self, event: dict[str, Any]) -> None:
        block = event.get("content_block") or {}
        kind = block.get("type")
        new: TextContent | ThinkingContent | ToolCall
        if kind == "text":
            new = TextContent(text="")
        elif kind == "thinking":
            new = ThinkingContent(thinking="", thinking_signature="")
        elif kind == "redacted_thinking":
            new = ThinkingContent(
                thinking="[Reasoning redacted]", thinking_signature=block.get("data"), redacted=True
            )
        elif kind == "tool_use":
            new = ToolCall(
                id=block.get("id") or "",
                name=block.get("name") or "",
                arguments=as_arguments(block.get("input")),
            )
        else:
            return
        self.output.content.append(new)
        index = len(self.output.content) - 1
        sse_index = event.get("index")
        if isinstance(sse_index, int):
            self._blocks[sse_index] = new
        partial = snapshot(self.output)
        if isinstance(new, TextContent):
            self.stream.push(TextStartEvent(content_index=index, partial=partial))
        elif isinstance(new, ThinkingContent):
            self.stream.push(ThinkingStartEvent(content_index=index, partial=partial))
        else:
            self._args[id(new)] = IncrementalJson()
            self.stream.push(ToolCallStartEvent(content_index=index, partial=partial))

    def _block_delta(self, event: dict[str, Any]) -> None:
        block = self._blocks.get(event.get("index"))  # type: ignore[arg-type]
        delta = event.get("delta") or {}
        kind = delta.get("type")
        if block is None:
            return
        index = self._position(block)
        if kind == "text_delta" and isinstance(block, TextContent):
            text = delta.get("text") or ""
            block.text += text
            self.stream.push(TextDeltaEvent(content_index=index, delta=text, partial=snapshot(self.output)))
        elif kind == "thinking_delta" and isinstance(block, ThinkingContent):
            text = delta.get("thinking") or ""
            block.thinking += text
            self.stream.push(
                ThinkingDeltaEvent(content_index=index, delta=text, partial=snapshot(self.output))
            )
        elif kind == "input_json_delta" and isinstance(block, ToolCall):
            text = delta.get("partial_json") or ""
            block.arguments = as_arguments(self._args[id(block)].feed(text))
            self.stream.push(
                ToolCallDeltaEvent(content_index=index, delta=text, partial=snapshot(self.output))
            )
        elif kind == "signature_delta" and isinstance(block, ThinkingContent):
            block.thinking_signature = (block.thinking_signature or "") + (delta.get("signature") or "")

    def _block_stop(self, event: dict[str, Any]) -> None:
        block = self._blocks.pop(event.get("index"), None)  # type: ignore[arg-type]
        if block is None:
            return
        index = self._position(block)
        if isinstance(block, TextContent):
            self.stream.push(
                TextEndEvent(content_index=index, content=block.text, partial=snapshot(self.output))
            )
        elif isinstance(block, ThinkingContent):
            self.stream.push(
                ThinkingEndEvent(content_index=index, content=block.thinking, partial=snapshot(self.output))
            )
        else:
            parser = self._args.pop(id(block), None)
            if parser is not None and parser.text:
                block.arguments = as_arguments(parser.value())
            self.stream.push(
                ToolCallEndEvent(
                    content_index=index, tool_call=copy.copy(block), partial=snapshot(self.output)
                )
            )


def _override(value: Any, current: int) -> int:
    return value if isinstance(value, int) else current


# --- entry points -----------------------------------------------------------------------------


def stream_anthropic(
    model: Model, context: Context, options: StreamOptions | None = None
) -> AssistantMessageEventStream:
    """Stream one assistant message. Never raises: failures are an `error` event."""
    return stream_from(_produce, model, context, options)


def stream_simple_anthropic(
    model: Model, context: Context, options: StreamOptions | None = None
) -> AssistantMessageEventStream:
    """`stream_anthropic` with pi's simple rules: an API key is required (a missing one is an
    `error` event where pi throws), the output cap defaults to min(model max, 32000), and
    `options.reasoning` picks disabled, adaptive or budget thinking."""
    base = options if options is not None else StreamOptions()
    missing = key_missing(model, base, base_url_of(model))
    if missing is not None:
        return missing
    max_tokens = base_max_tokens(model, base)
    level: ReasoningLevel | None = base.reasoning
    if level is None:
        opts = with_options(AnthropicOptions, base, max_tokens=max_tokens, thinking_enabled=False)
    elif is_adaptive(model):
        effort = {"minimal": "low", "low": "low", "medium": "medium"}.get(level, "high")
        opts = with_options(
            AnthropicOptions, base, max_tokens=max_tokens, thinking_enabled=True, effort=effort
        )
    else:
        budgets = getattr(base, "thinking_budgets", None)
        max_tokens, budget = adjust_max_tokens_for_thinking(max_tokens, model.max_tokens, level, budgets)
        opts = with_options(
            AnthropicOptions,
            base,
            max_tokens=max_tokens,
            thinking_enabled=True,
            thinking_budget_tokens=budget,
        )
    return stream_anthropic(model, context, opts)


async def _produce(
    model: Model, context: Context, options: StreamOptions, stream: AssistantMessageEventStream
) -> None:
    request = SSERequest(
        base_url=base_url_of(model),
        url=f"{base_url_of(model)}/v1/messages",
        headers=lambda api_key, body: request_headers(model, options, api_key, body),
        body=lambda: build_request_body(model, context, options),
        format_error=format_http_error,
    )
    await produce_sse(model, options, stream, request, lambda output: EventAssembler(model, output, stream))


__all__ = [
    "ANTHROPIC_VERSION",
    "API",
    "DEFAULT_BASE_URL",
    "AnthropicOptions",
    "EventAssembler",
    "build_request_body",
    "convert_messages",
    "convert_tools",
    "format_http_error",
    "is_adaptive",
    "map_stop_reason",
    "stream_anthropic",
    "stream_simple_anthropic",
]
