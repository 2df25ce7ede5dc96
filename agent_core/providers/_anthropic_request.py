"""Building ``anthropic-messages`` requests: options, message conversion, body, headers."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from agent_core.llm import Context, Model, StreamOptions, Tool
from agent_core.messages import (
    AssistantMessage,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolResultMessage,
    UserMessage,
)
from agent_core.providers._transform import transform_messages

DEFAULT_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
INTERLEAVED_THINKING_BETA = "interleaved-thinking-2025-05-14"
_ADAPTIVE_IDS = ("opus-4-6", "opus-4-7", "sonnet-4-6")


@dataclass(kw_only=True)
class AnthropicOptions(StreamOptions):
    """Stream options plus what only this API takes."""

    thinking_enabled: bool | None = None
    thinking_budget_tokens: int | None = None
    effort: str | None = None
    tool_choice: str | dict[str, Any] | None = None
    interleaved_thinking: bool = True


def base_url_of(model: Model) -> str:
    return (model.base_url or DEFAULT_BASE_URL).rstrip("/")


def is_adaptive(model: Model) -> bool:
    """Models that take ``thinking: {type: "adaptive"}`` and an effort instead of a budget."""
    forced = (model.compat or {}).get("forceAdaptiveThinking")
    if forced is not None:
        return bool(forced)
    return any(marker in model.id for marker in _ADAPTIVE_IDS)


def _compat(model: Model, key: str, default: bool) -> bool:
    value = (model.compat or {}).get(key)
    return default if value is None else bool(value)


# --- request ----------------------------------------------------------------------------------


def _normalize_tool_call_id(tool_id: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_-]", "_", tool_id)[:64]


def _image_block(image: ImageContent) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": image.mime_type, "data": image.data}}


def _tool_result_content(blocks: list[TextContent | ImageContent]) -> str | list[dict[str, Any]]:
    if not any(isinstance(b, ImageContent) for b in blocks):
        return "\n".join(b.text for b in blocks if isinstance(b, TextContent))
    out = [
        {"type": "text", "text": b.text} if isinstance(b, TextContent) else _image_block(b) for b in blocks
    ]
    if not any(b["type"] == "text" for b in out):
        out.insert(0, {"type": "text", "text": "(see attached image)"})
    return out


def _user_message(message: UserMessage) -> dict[str, Any] | None:
    if isinstance(message.content, str):
        return {"role": "user", "content": message.content} if message.content.strip() else None
    blocks = [
        {"type": "text", "text": b.text} if isinstance(b, TextContent) else _image_block(b)
        for b in message.content
        if not (isinstance(b, TextContent) and not b.text.strip())
    ]
    return {"role": "user", "content": blocks} if blocks else None


def _assistant_message(message: AssistantMessage) -> dict[str, Any] | None:
    blocks: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextContent):
            if block.text.strip():
                blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ThinkingContent):
            if block.redacted:
                blocks.append({"type": "redacted_thinking", "data": block.thinking_signature or ""})
            elif not block.thinking.strip():
                continue
            elif block.thinking_signature and block.thinking_signature.strip():
                blocks.append(
                    {"type": "thinking", "thinking": block.thinking, "signature": block.thinking_signature}
                )
            else:
                blocks.append({"type": "text", "text": block.thinking})
        else:
            blocks.append({"type": "tool_use", "id": block.id, "name": block.name, "input": block.arguments})
    return {"role": "assistant", "content": blocks} if blocks else None


def _cache_control(options: StreamOptions) -> dict[str, Any] | None:
    if options.cache_retention == "none":
        return None
    if options.cache_retention == "long":
        return {"type": "ephemeral", "ttl": "1h"}
    return {"type": "ephemeral"}


def convert_messages(
    messages: list[Message], model: Model, cache_control: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The ``messages`` array of a request; consecutive tool results become one user message."""
    out: list[dict[str, Any]] = []
    transformed = transform_messages(messages, model, _normalize_tool_call_id)
    i = 0
    while i < len(transformed):
        message = transformed[i]
        if isinstance(message, ToolResultMessage):
            results: list[dict[str, Any]] = []
            while i < len(transformed) and isinstance(transformed[i], ToolResultMessage):
                result = transformed[i]
                assert isinstance(result, ToolResultMessage)
                results.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": result.tool_call_id,
                        "content": _tool_result_content(result.content),
                        "is_error": result.is_error,
                    }
                )
                i += 1
            out.append({"role": "user", "content": results})
            continue
        converted = (
            _user_message(message)
            if isinstance(message, UserMessage)
            else _assistant_message(message)
            if isinstance(message, AssistantMessage)
            else None
        )
        if converted is not None:
            out.append(converted)
        i += 1
    if cache_control is not None and out and out[-1]["role"] == "user":
        last = out[-1]
        if isinstance(last["content"], str):
            last["content"] = [{"type": "text", "text": last["content"], "cache_control": cache_control}]
        elif last["content"] and last["content"][-1]["type"] in ("text", "image", "tool_result"):
            last["content"][-1]["cache_control"] = cache_control
    return out


def convert_tools(
    tools: list[Tool], model: Model, cache_control: dict[str, Any] | None
) -> list[dict[str, Any]]:
    eager = _compat(model, "supportsEagerToolInputStreaming", True)
    cache_tools = _compat(model, "supportsCacheControlOnTools", True)
    out: list[dict[str, Any]] = []
    for index, tool in enumerate(tools):
        entry: dict[str, Any] = {"name": tool.name, "description": tool.description}
        if eager:
            entry["eager_input_streaming"] = True
        entry["input_schema"] = {
            "type": "object",
            "properties": tool.parameters.get("properties") or {},
            "required": tool.parameters.get("required") or [],
        }
        if cache_control is not None and cache_tools and index == len(tools) - 1:
            entry["cache_control"] = cache_control
        out.append(entry)
    return out


def build_request_body(model: Model, context: Context, options: StreamOptions) -> dict[str, Any]:
    """The JSON body pi sends for this model, context and options."""
    cache_control = _cache_control(options)
    thinking_enabled = getattr(options, "thinking_enabled", None)
    body: dict[str, Any] = {
        "model": model.id,
        "messages": convert_messages(context.messages, model, cache_control),
        "max_tokens": options.max_tokens or model.max_tokens // 3,
        "stream": True,
    }
    if context.system_prompt:
        system: dict[str, Any] = {"type": "text", "text": context.system_prompt}
        if cache_control is not None:
            system["cache_control"] = cache_control
        body["system"] = [system]
    if options.temperature is not None and not thinking_enabled:
        body["temperature"] = options.temperature
    if context.tools:
        body["tools"] = convert_tools(context.tools, model, cache_control)
    if model.reasoning:
        if thinking_enabled:
            if is_adaptive(model):
                body["thinking"] = {"type": "adaptive"}
                effort = getattr(options, "effort", None)
                if effort:
                    body["output_config"] = {"effort": effort}
            else:
                budget = getattr(options, "thinking_budget_tokens", None) or 1024
                body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        elif thinking_enabled is False:
            body["thinking"] = {"type": "disabled"}
    user_id = options.metadata.get("user_id") if options.metadata else None
    if isinstance(user_id, str):
        body["metadata"] = {"user_id": user_id}
    tool_choice = getattr(options, "tool_choice", None)
    if tool_choice:
        body["tool_choice"] = {"type": tool_choice} if isinstance(tool_choice, str) else tool_choice
    return body


def request_headers(
    model: Model, options: StreamOptions, api_key: str | None, body: dict[str, Any]
) -> dict[str, str]:
    headers = {
        "content-type": "application/json",
        "accept": "application/json",
        "anthropic-version": ANTHROPIC_VERSION,
    }
    if api_key:
        headers["x-api-key"] = api_key
    thinking = body.get("thinking") or {}
    if thinking.get("type") == "enabled" and getattr(options, "interleaved_thinking", True):
        headers["anthropic-beta"] = INTERLEAVED_THINKING_BETA
    headers.update(model.headers or {})
    headers.update(options.headers or {})
    return headers


def format_http_error(status: int, text: str) -> str:
    """``"<status> <message>"`` as the Anthropic SDK words it (the whole JSON body when it has no
    top-level message)."""
    try:
        body = json.loads(text) if text else None
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        message = body["message"]
    elif body is not None:
        message = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    else:
        message = text.strip() or "status code (no body)"
    return f"{status} {message}"
