"""The ``openai-responses`` API: OpenAI's Responses API (``POST <base>/responses``), streamed.

The base URL is the model's (default ``https://api.openai.com/v1``) with a bearer key, then the
model's and the call's own headers. Each output item of the response becomes one block, opened at
``response.output_item.added`` and closed at ``response.output_item.done``: a ``reasoning`` item
is a thinking block (its summary text; the whole item, with ``encrypted_content``, is kept as the
block's signature and sent back on the next turn), a ``message`` item is a text block (refusals
included), a ``function_call`` item is a tool call whose arguments stream in pieces
(``response.function_call_arguments.delta``).

The response ends with ``response.completed`` (status ``completed``: stop, or toolUse when it
called tools) or ``response.incomplete`` (``max_output_tokens``: length; any other reason is an
error). ``response.failed`` and an ``error`` event are errors, as is a body that ends before the
response does.
"""

from __future__ import annotations

import copy
import json
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
from agent_core.llm import Context, Model, StreamOptions
from agent_core.messages import AssistantMessage, StopReason, TextContent, ThinkingContent, ToolCall, Usage
from agent_core.providers._common import (
    base_max_tokens,
    clamp_reasoning,
    key_missing,
    snapshot,
    stream_from,
    with_options,
)
from agent_core.providers._openai_request import compact_json, format_http_error, request_headers
from agent_core.providers._openai_responses_request import (
    DEFAULT_BASE_URL,
    OpenAIResponsesOptions,
    base_url_of,
    build_request_body,
    convert_messages,
    convert_tools,
    encode_text_signature,
)
from agent_core.providers._sse import ServerSentEvent
from agent_core.providers._sse_exchange import SSERequest, produce_sse
from agent_core.usage import make_usage

API = "openai-responses"
_TERMINAL = frozenset({"response.completed", "response.incomplete"})


# --- response ---------------------------------------------------------------------------------


def map_status(status: str | None, reason: str | None = None) -> tuple[StopReason, str | None]:
    """The stop reason of a finished response's status, and an error message when it is one."""
    if status in (None, "completed", "in_progress", "queued"):
        return "stop", None
    if status == "incomplete":
        if reason in (None, "max_output_tokens"):
            return "length", None
        return "error", f"incomplete: {reason}"
    return "error", f"Response status: {status}"


def parse_usage(raw: dict[str, Any], model: Model) -> Usage:
    """``input_tokens`` includes the cached ones: those are reads, the rest is input."""
    details = raw.get("input_tokens_details") or {}
    cached = details.get("cached_tokens") or 0
    return make_usage(
        model,
        input=max(0, (raw.get("input_tokens") or 0) - cached),
        output=raw.get("output_tokens") or 0,
        cache_read=cached,
    )


class ResponseAssembler:
    """Builds the assistant message from Responses stream events, pushing pi's events (sans I/O).

    One output item is open at a time (the API streams items one after another); its block and
    its argument parser live until the item's ``response.output_item.done``.
    """

    def __init__(self, model: Model, output: AssistantMessage, stream: AssistantMessageEventStream) -> None:
        self.model = model
        self.output = output
        self.stream = stream
        self.finished = False
        self._block: TextContent | ThinkingContent | ToolCall | None = None
        self._item: dict[str, Any] | None = None
        self._args: IncrementalJson | None = None

    def complete(self) -> bool:
        return self.finished

    def finish(self) -> str | None:
        return None if self.finished else "OpenAI Responses stream ended before the response completed"

    def feed_sse(self, sse: ServerSentEvent) -> None:
        """Handle one SSE event. Raises `ProviderError` on an error event or unparsable data."""
        if self.finished or (not sse.data and sse.event is None):
            return
        if sse.data.strip() == "[DONE]":
            return
        try:
            event = json.loads(sse.data)
        except ValueError as exc:
            raise ProviderError(f"Could not parse Responses event {sse.event}: {sse.data[:500]}") from exc
        if isinstance(event, dict):
            if "type" not in event and sse.event:
                event["type"] = sse.event
            self.feed_event(event)

    def feed_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "response.created":
            response = event.get("response") or {}
            if isinstance(response.get("id"), str):
                self.output.response_id = response["id"]
        elif kind == "response.output_item.added":
            self._item_added(event.get("item") or {})
        elif kind == "response.reasoning_summary_part.added":
            if isinstance(self._block, ThinkingContent) and self._item is not None:
                self._item.setdefault("summary", []).append(dict(event.get("part") or {"text": ""}))
        elif kind == "response.reasoning_summary_text.delta":
            self._thinking_delta(event.get("delta") or "")
        elif kind == "response.reasoning_summary_part.done":
            self._thinking_delta("\n\n")
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            self._text_delta(event.get("delta") or "")
        elif kind == "response.function_call_arguments.delta":
            self._arguments_delta(event.get("delta") or "")
        elif kind == "response.output_item.done":
            self._item_done(event.get("item") or {})
        elif kind in _TERMINAL:
            self._finish(event.get("response") or {})
        elif kind == "response.failed":
            self._failed(event.get("response") or {})
        elif kind == "error":
            error: dict[str, Any] = event["error"] if isinstance(event.get("error"), dict) else event
            code = error.get("code") or "unknown"
            raise ProviderError(f"Error Code {code}: {error.get('message') or 'Unknown error'}")

    def _push_start(self, block: TextContent | ThinkingContent | ToolCall) -> None:
        self.output.content.append(block)
        index = len(self.output.content) - 1
        partial = snapshot(self.output)
        if isinstance(block, TextContent):
            self.stream.push(TextStartEvent(content_index=index, partial=partial))
        elif isinstance(block, ThinkingContent):
            self.stream.push(ThinkingStartEvent(content_index=index, partial=partial))
        else:
            self.stream.push(ToolCallStartEvent(content_index=index, partial=partial))

    def _item_added(self, item: dict[str, Any]) -> None:
        kind = item.get("type")
        block: TextContent | ThinkingContent | ToolCall
        if kind == "reasoning":
            block = ThinkingContent(thinking="")
        elif kind == "message":
            block = TextContent(text="")
        elif kind == "function_call":
            block = ToolCall(
                id=f"{item.get('call_id') or ''}|{item.get('id') or ''}", name=item.get("name") or ""
            )
            self._args = IncrementalJson()
            if item.get("arguments"):
                block.arguments = as_arguments(self._args.feed(item["arguments"]))
        else:
            return
        self._item = dict(item)
        self._block = block
        self._push_start(block)

    @property
    def _at(self) -> int:
        return len(self.output.content) - 1

    def _thinking_delta(self, text: str) -> None:
        block = self._block
        if not (isinstance(block, ThinkingContent) and text) or self._item is None:
            return
        if not self._item.get("summary"):
            return  # a summary delta outside a summary part: pi ignores it
        block.thinking += text
        self.stream.push(
            ThinkingDeltaEvent(content_index=self._at, delta=text, partial=snapshot(self.output))
        )

    def _text_delta(self, text: str) -> None:
        block = self._block
        if not (isinstance(block, TextContent) and text):
            return
        block.text += text
        self.stream.push(TextDeltaEvent(content_index=self._at, delta=text, partial=snapshot(self.output)))

    def _arguments_delta(self, text: str) -> None:
        block = self._block
        if not (isinstance(block, ToolCall) and self._args is not None):
            return
        block.arguments = as_arguments(self._args.feed(text))
        self.stream.push(
            ToolCallDeltaEvent(content_index=self._at, delta=text, partial=snapshot(self.output))
        )

    def _item_done(self, item: dict[str, Any]) -> None:
        block, kind = self._block, item.get("type")
        if kind == "reasoning" and isinstance(block, ThinkingContent):
            summary = item.get("summary") or []
            block.thinking = "\n\n".join(part.get("text", "") for part in summary if isinstance(part, dict))
            block.thinking_signature = compact_json(item)
            self.stream.push(
                ThinkingEndEvent(
                    content_index=self._at, content=block.thinking, partial=snapshot(self.output)
                )
            )
        elif kind == "message" and isinstance(block, TextContent):
            parts = item.get("content") or []
            block.text = "".join(
                (part.get("text") if part.get("type") == "output_text" else part.get("refusal")) or ""
                for part in parts
                if isinstance(part, dict)
            )
            block.text_signature = encode_text_signature(item.get("id") or "", item.get("phase"))
            self.stream.push(
                TextEndEvent(content_index=self._at, content=block.text, partial=snapshot(self.output))
            )
        elif kind == "function_call" and isinstance(block, ToolCall):
            if self._args is not None and self._args.text:
                block.arguments = as_arguments(self._args.value())
            else:
                block.arguments = as_arguments(parse_json_with_repair(item.get("arguments") or "{}"))
            block.id = f"{item.get('call_id') or ''}|{item.get('id') or ''}"
            self.stream.push(
                ToolCallEndEvent(
                    content_index=self._at, tool_call=copy.copy(block), partial=snapshot(self.output)
                )
            )
        else:
            return
        self._block = self._item = self._args = None

    def _finish(self, response: dict[str, Any]) -> None:
        self.finished = True
        if isinstance(response.get("usage"), dict):
            self.output.usage = parse_usage(response["usage"], self.model)
        details = response.get("incomplete_details") or {}
        stop, message = map_status(response.get("status"), details.get("reason"))
        if stop == "stop" and any(isinstance(b, ToolCall) for b in self.output.content):
            stop = "toolUse"
        self.output.stop_reason = stop
        if message:
            self.output.error_message = message
        model_name = response.get("model")
        if isinstance(model_name, str) and model_name not in ("", self.model.id):
            self.output.response_model = model_name

    def _failed(self, response: dict[str, Any]) -> None:
        error = response.get("error") or {}
        details = response.get("incomplete_details") or {}
        if error:
            message = f"{error.get('code') or 'unknown'}: {error.get('message') or 'no message'}"
        elif details.get("reason"):
            message = f"incomplete: {details['reason']}"
        else:
            message = "Unknown error (no error details in response)"
        raise ProviderError(message)


# --- entry points -----------------------------------------------------------------------------


def stream_openai_responses(
    model: Model, context: Context, options: StreamOptions | None = None
) -> AssistantMessageEventStream:
    """Stream one assistant message. Never raises: failures are an `error` event."""
    return stream_from(_produce, model, context, options)


def stream_simple_openai_responses(
    model: Model, context: Context, options: StreamOptions | None = None
) -> AssistantMessageEventStream:
    """`stream_openai_responses` with pi's simple defaults: an API key is required (a missing one
    is an `error` event), the output cap defaults to min(model max, 32000) and
    `options.reasoning` becomes ``reasoning.effort`` with an ``auto`` summary."""
    base = options if options is not None else StreamOptions()
    missing = key_missing(model, base, base_url_of(model))
    if missing is not None:
        return missing
    effort = clamp_reasoning(model, base.reasoning)
    opts = with_options(
        OpenAIResponsesOptions,
        base,
        max_tokens=base_max_tokens(model, base),
        reasoning_effort=effort or getattr(base, "reasoning_effort", None),
    )
    return stream_openai_responses(model, context, opts)


async def _produce(
    model: Model, context: Context, options: StreamOptions, stream: AssistantMessageEventStream
) -> None:
    request = SSERequest(
        base_url=base_url_of(model),
        url=f"{base_url_of(model)}/responses",
        headers=lambda api_key, body: request_headers(model, options, api_key),
        body=lambda: build_request_body(model, context, options),
        format_error=format_http_error,
    )
    await produce_sse(
        model, options, stream, request, lambda output: ResponseAssembler(model, output, stream)
    )


__all__ = [
    "API",
    "DEFAULT_BASE_URL",
    "OpenAIResponsesOptions",
    "ResponseAssembler",
    "build_request_body",
    "convert_messages",
    "convert_tools",
    "map_status",
    "parse_usage",
    "stream_openai_responses",
    "stream_simple_openai_responses",
]
