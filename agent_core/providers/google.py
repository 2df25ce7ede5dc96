"""The ``google-generative-ai`` API: Gemini's ``streamGenerateContent``, streamed as SSE.

Requests go to ``<base>/models/<id>:streamGenerateContent?alt=sse`` (default base
``https://generativelanguage.googleapis.com/v1beta``) with the key in ``x-goog-api-key``, then the
model's and the call's own headers. Every SSE event is one ``GenerateContentResponse``: the parts
of its first candidate extend the message (text parts, ``thought`` parts as thinking, and
``functionCall`` parts, which arrive whole and so open and close a tool call at once), its
``usageMetadata`` replaces the usage, and its ``finishReason`` ends it.

``STOP`` is stop (toolUse when the reply called tools), ``MAX_TOKENS`` is length, every other
reason (``SAFETY``, ``RECITATION``, ``MALFORMED_FUNCTION_CALL``, ...) is an error, and so is a body
that ends without any finish reason or carries an ``error`` object.
"""

from __future__ import annotations

import json
import uuid
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
from agent_core.json_stream import as_arguments
from agent_core.llm import Context, Model, ReasoningLevel, StreamOptions
from agent_core.messages import AssistantMessage, StopReason, TextContent, ThinkingContent, ToolCall, Usage
from agent_core.providers._common import (
    DEFAULT_THINKING_BUDGETS,
    base_max_tokens,
    key_missing,
    snapshot,
    stream_from,
    with_options,
)
from agent_core.providers._google_request import (
    DEFAULT_BASE_URL,
    GoogleOptions,
    base_url_of,
    build_request_body,
    convert_messages,
    convert_tools,
    format_http_error,
    request_headers,
    stream_url,
)
from agent_core.providers._openai_request import compact_json
from agent_core.providers._sse import ServerSentEvent
from agent_core.providers._sse_exchange import SSERequest, produce_sse
from agent_core.usage import make_usage

API = "google-generative-ai"


# --- response ---------------------------------------------------------------------------------


def map_finish_reason(reason: str) -> tuple[StopReason, str | None]:
    if reason == "STOP":
        return "stop", None
    if reason == "MAX_TOKENS":
        return "length", None
    return "error", f"Provider finishReason: {reason}"


def parse_usage(raw: dict[str, Any], model: Model) -> Usage:
    """Thought tokens are output; cached prompt tokens are reads (included in the prompt count)."""
    cached = raw.get("cachedContentTokenCount") or 0
    return make_usage(
        model,
        input=max(0, (raw.get("promptTokenCount") or 0) - cached),
        output=(raw.get("candidatesTokenCount") or 0) + (raw.get("thoughtsTokenCount") or 0),
        cache_read=cached,
    )


class CandidateAssembler:
    """Builds the assistant message from Gemini response chunks, pushing pi's events (sans I/O).

    The open text or thinking block lives until a part of another kind arrives or the response
    ends (`finish()`).
    """

    def __init__(self, model: Model, output: AssistantMessage, stream: AssistantMessageEventStream) -> None:
        self.model = model
        self.output = output
        self.stream = stream
        self.saw_finish = False
        self._open: TextContent | ThinkingContent | None = None

    def feed_sse(self, sse: ServerSentEvent) -> None:
        """Handle one SSE event. Raises `ProviderError` on an error object or unparsable data."""
        if not sse.data.strip():
            return
        try:
            chunk = json.loads(sse.data)
        except ValueError as exc:
            raise ProviderError(f"Could not parse Gemini stream chunk as JSON: {sse.data[:500]}") from exc
        if isinstance(chunk, list):  # an error body sent on the stream is a one-element list
            chunk = chunk[0] if chunk else {}
        if isinstance(chunk, dict):
            self.feed_chunk(chunk)

    def feed_chunk(self, chunk: dict[str, Any]) -> None:
        error = chunk.get("error")
        if isinstance(error, dict):
            raise ProviderError(error.get("message") or compact_json(error))
        if isinstance(chunk.get("responseId"), str) and not self.output.response_id:
            self.output.response_id = chunk["responseId"]
        version = chunk.get("modelVersion")
        if isinstance(version, str) and version not in ("", self.model.id) and not self.output.response_model:
            self.output.response_model = version
        candidates = chunk.get("candidates")
        candidate = candidates[0] if isinstance(candidates, list) and candidates else {}
        content = candidate.get("content") if isinstance(candidate, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict):
                self._part(part)
        if isinstance(chunk.get("usageMetadata"), dict):
            self.output.usage = parse_usage(chunk["usageMetadata"], self.model)
        reason = candidate.get("finishReason") if isinstance(candidate, dict) else None
        if isinstance(reason, str) and reason:
            self.saw_finish = True
            stop, message = map_finish_reason(reason)
            if stop == "stop" and any(isinstance(b, ToolCall) for b in self.output.content):
                stop = "toolUse"
            self.output.stop_reason = stop
            if message:
                self.output.error_message = message

    @property
    def _at(self) -> int:
        return len(self.output.content) - 1

    def _part(self, part: dict[str, Any]) -> None:
        text = part.get("text")
        if isinstance(text, str):
            self._text_part(text, thought=part.get("thought") is True, signature=part.get("thoughtSignature"))
        call = part.get("functionCall")
        if isinstance(call, dict):
            self._close_open()
            self._function_call(call, part.get("thoughtSignature"))

    def _text_part(self, text: str, *, thought: bool, signature: Any) -> None:
        open_block = self._open
        if open_block is None or isinstance(open_block, ThinkingContent) != thought:
            self._close_open()
            open_block = ThinkingContent(thinking="") if thought else TextContent(text="")
            self._open = open_block
            self.output.content.append(open_block)
            start = ThinkingStartEvent if thought else TextStartEvent
            self.stream.push(start(content_index=self._at, partial=snapshot(self.output)))
        if isinstance(open_block, ThinkingContent):
            open_block.thinking += text
            if isinstance(signature, str) and signature:
                open_block.thinking_signature = signature
            self.stream.push(
                ThinkingDeltaEvent(content_index=self._at, delta=text, partial=snapshot(self.output))
            )
        else:
            open_block.text += text
            if isinstance(signature, str) and signature:
                open_block.text_signature = signature
            self.stream.push(
                TextDeltaEvent(content_index=self._at, delta=text, partial=snapshot(self.output))
            )

    def _function_call(self, call: dict[str, Any], signature: Any) -> None:
        name: str = call["name"] if isinstance(call.get("name"), str) else ""
        given = call.get("id") if isinstance(call.get("id"), str) else ""
        taken = any(isinstance(b, ToolCall) and b.id == given for b in self.output.content)
        # Gemini rarely sends ids; each call of one reply needs its own to pair with its result.
        call_id = given if given and not taken else f"{name}_{uuid.uuid4().hex[:12]}"
        block = ToolCall(id=call_id, name=name, arguments=as_arguments(call.get("args")))
        if isinstance(signature, str) and signature:
            block.thought_signature = signature
        self.output.content.append(block)
        at = self._at
        self.stream.push(ToolCallStartEvent(content_index=at, partial=snapshot(self.output)))
        delta = compact_json(block.arguments)
        self.stream.push(ToolCallDeltaEvent(content_index=at, delta=delta, partial=snapshot(self.output)))
        final = ToolCall(
            id=block.id,
            name=block.name,
            arguments=dict(block.arguments),
            thought_signature=block.thought_signature,
        )
        self.stream.push(ToolCallEndEvent(content_index=at, tool_call=final, partial=snapshot(self.output)))

    def _close_open(self) -> None:
        block, self._open = self._open, None
        if isinstance(block, TextContent):
            self.stream.push(
                TextEndEvent(content_index=self._at, content=block.text, partial=snapshot(self.output))
            )
        elif isinstance(block, ThinkingContent):
            self.stream.push(
                ThinkingEndEvent(
                    content_index=self._at, content=block.thinking, partial=snapshot(self.output)
                )
            )

    def complete(self) -> bool:
        return False  # Gemini ends the body after the last candidate

    def finish(self) -> str | None:
        """Close the open block (at the end of the body, or when the stream is cut short)."""
        self._close_open()
        return None if self.saw_finish else "Gemini stream ended without a finishReason"


# --- entry points -----------------------------------------------------------------------------


def stream_google(
    model: Model, context: Context, options: StreamOptions | None = None
) -> AssistantMessageEventStream:
    """Stream one assistant message. Never raises: failures are an `error` event."""
    return stream_from(_produce, model, context, options)


def stream_simple_google(
    model: Model, context: Context, options: StreamOptions | None = None
) -> AssistantMessageEventStream:
    """`stream_google` with pi's simple rules: an API key is required (a missing one is an
    `error` event), the output cap defaults to min(model max, 32000), and `options.reasoning`
    turns thinking on with that level's token budget."""
    base = options if options is not None else StreamOptions()
    missing = key_missing(model, base, base_url_of(model))
    if missing is not None:
        return missing
    level: ReasoningLevel | None = base.reasoning if model.reasoning else None
    if level is None:
        opts = with_options(
            GoogleOptions, base, max_tokens=base_max_tokens(model, base), thinking_enabled=False
        )
    else:
        budgets = {**DEFAULT_THINKING_BUDGETS, **(getattr(base, "thinking_budgets", None) or {})}
        opts = with_options(
            GoogleOptions,
            base,
            max_tokens=base_max_tokens(model, base),
            thinking_enabled=True,
            thinking_budget_tokens=budgets["high" if level == "xhigh" else level],
        )
    return stream_google(model, context, opts)


async def _produce(
    model: Model, context: Context, options: StreamOptions, stream: AssistantMessageEventStream
) -> None:
    request = SSERequest(
        base_url=base_url_of(model),
        url=stream_url(model),
        headers=lambda api_key, body: request_headers(model, options, api_key),
        body=lambda: build_request_body(model, context, options),
        format_error=format_http_error,
    )
    await produce_sse(
        model, options, stream, request, lambda output: CandidateAssembler(model, output, stream)
    )


__all__ = [
    "API",
    "DEFAULT_BASE_URL",
    "CandidateAssembler",
    "GoogleOptions",
    "build_request_body",
    "convert_messages",
    "convert_tools",
    "format_http_error",
    "map_finish_reason",
    "parse_usage",
    "stream_google",
    "stream_simple_google",
]
