"""Building ``openai-completions`` requests: compat flags, message conversion, body, headers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from agent_core.llm import Context, Model, StreamOptions, Tool
from agent_core.messages import (
    AssistantMessage,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from agent_core.providers._transform import transform_messages

DEFAULT_BASE_URL = "https://api.openai.com/v1"


@dataclass(kw_only=True)
class OpenAICompletionsOptions(StreamOptions):
    """Stream options plus what only this API takes."""

    reasoning_effort: str | None = None
    tool_choice: str | dict[str, Any] | None = None


class Compat(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    supports_store: bool = True
    supports_developer_role: bool = True
    supports_reasoning_effort: bool = True
    supports_usage_in_streaming: bool = True
    max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens"
    requires_tool_result_name: bool = False
    requires_assistant_after_tool_result: bool = False
    requires_thinking_as_text: bool = False
    supports_strict_mode: bool = True


_COMPAT_KEYS = {
    "supportsStore": "supports_store",
    "supportsDeveloperRole": "supports_developer_role",
    "supportsReasoningEffort": "supports_reasoning_effort",
    "supportsUsageInStreaming": "supports_usage_in_streaming",
    "maxTokensField": "max_tokens_field",
    "requiresToolResultName": "requires_tool_result_name",
    "requiresAssistantAfterToolResult": "requires_assistant_after_tool_result",
    "requiresThinkingAsText": "requires_thinking_as_text",
    "supportsStrictMode": "supports_strict_mode",
}


def base_url_of(model: Model) -> str:
    return (model.base_url or DEFAULT_BASE_URL).rstrip("/")


def detect_compat(model: Model) -> Compat:
    """Defaults for known providers and hosts; explicit ``model.compat`` keys win."""
    provider, url = model.provider, base_url_of(model)
    is_xai = provider == "xai" or "api.x.ai" in url
    is_zai = provider == "zai" or "api.z.ai" in url
    is_moonshot = provider.startswith("moonshotai") or "api.moonshot." in url
    is_together = provider == "together" or "api.together." in url
    non_standard = (
        is_xai
        or is_zai
        or is_moonshot
        or is_together
        or provider in ("cerebras", "opencode")
        or any(host in url for host in ("cerebras.ai", "chutes.ai", "deepseek.com", "opencode.ai"))
    )
    values: dict[str, Any] = {
        "supports_store": not non_standard,
        "supports_developer_role": not non_standard,
        "supports_reasoning_effort": not (is_xai or is_zai or is_moonshot or is_together),
        "max_tokens_field": "max_tokens"
        if ("chutes.ai" in url or is_moonshot or is_together)
        else "max_completion_tokens",
        "supports_strict_mode": not (is_moonshot or is_together),
    }
    for key, attr in _COMPAT_KEYS.items():
        if model.compat and key in model.compat and model.compat[key] is not None:
            values[attr] = model.compat[key]
    return Compat(**values)


# --- request ----------------------------------------------------------------------------------


def _normalize_tool_call_id(model: Model) -> Any:
    def normalize(tool_id: str) -> str:
        if "|" in tool_id:
            call_id = tool_id.split("|", 1)[0]
            return "".join(c if c.isalnum() or c in "_-" else "_" for c in call_id)[:40]
        if model.provider == "openai" and len(tool_id) > 40:
            return tool_id[:40]
        return tool_id

    return normalize


def _image_part(image: ImageContent) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": f"data:{image.mime_type};base64,{image.data}"}}


def _user_message(message: UserMessage, model: Model) -> dict[str, Any] | None:
    if isinstance(message.content, str):
        return {"role": "user", "content": message.content}
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextContent):
            parts.append({"type": "text", "text": block.text})
        elif "image" in model.input:
            parts.append(_image_part(block))
    return {"role": "user", "content": parts} if parts else None


def _assistant_message(message: AssistantMessage, compat: Compat) -> dict[str, Any] | None:
    out: dict[str, Any] = {
        "role": "assistant",
        "content": "" if compat.requires_assistant_after_tool_result else None,
    }
    text = "".join(b.text for b in message.content if isinstance(b, TextContent) and b.text.strip())
    thinking = [b for b in message.content if isinstance(b, ThinkingContent) and b.thinking.strip()]
    if thinking and compat.requires_thinking_as_text:
        parts = [{"type": "text", "text": "\n\n".join(b.thinking for b in thinking)}]
        if text:
            parts.append({"type": "text", "text": text})
        out["content"] = parts
    else:
        if text:
            out["content"] = text
        signature = thinking[0].thinking_signature if thinking else None
        if signature:
            out[signature] = "\n".join(b.thinking for b in thinking)
    calls = [b for b in message.content if isinstance(b, ToolCall)]
    if calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": compact_json(call.arguments)},
            }
            for call in calls
        ]
        details = [_loads_or_none(call.thought_signature) for call in calls if call.thought_signature]
        if any(d is not None for d in details):
            out["reasoning_details"] = [d for d in details if d is not None]
    if not out["content"] and not calls:
        return None
    return out


def _loads_or_none(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _tool_results(
    results: list[ToolResultMessage], model: Model, compat: Compat
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    messages: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    for result in results:
        text = "\n".join(b.text for b in result.content if isinstance(b, TextContent))
        entry: dict[str, Any] = {
            "role": "tool",
            "content": text if text else "(see attached image)",
            "tool_call_id": result.tool_call_id,
        }
        if compat.requires_tool_result_name and result.tool_name:
            entry["name"] = result.tool_name
        messages.append(entry)
        if "image" in model.input:
            images.extend(_image_part(b) for b in result.content if isinstance(b, ImageContent))
    return messages, images


def convert_messages(model: Model, context: Context, compat: Compat) -> list[dict[str, Any]]:
    """The ``messages`` array of a request."""
    out: list[dict[str, Any]] = []
    if context.system_prompt:
        role = "developer" if model.reasoning and compat.supports_developer_role else "system"
        out.append({"role": role, "content": context.system_prompt})
    messages: list[Message] = transform_messages(context.messages, model, _normalize_tool_call_id(model))
    bridge = {"role": "assistant", "content": "I have processed the tool results."}
    last_role: str | None = None
    i = 0
    while i < len(messages):
        message = messages[i]
        if isinstance(message, ToolResultMessage):
            j = i
            while j < len(messages) and isinstance(messages[j], ToolResultMessage):
                j += 1
            group = [m for m in messages[i:j] if isinstance(m, ToolResultMessage)]
            results, images = _tool_results(group, model, compat)
            out.extend(results)
            if images:
                if compat.requires_assistant_after_tool_result:
                    out.append(dict(bridge))
                out.append(
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "Attached image(s) from tool result:"}, *images],
                    }
                )
                last_role = "user"
            else:
                last_role = "toolResult"
            i = j
            continue
        if (
            compat.requires_assistant_after_tool_result
            and last_role == "toolResult"
            and message.role == "user"
        ):
            out.append(dict(bridge))
        converted = (
            _user_message(message, model)
            if isinstance(message, UserMessage)
            else _assistant_message(message, compat)
            if isinstance(message, AssistantMessage)
            else None
        )
        if converted is not None:
            out.append(converted)
        last_role = message.role
        i += 1
    return out


def convert_tools(tools: list[Tool], compat: Compat) -> list[dict[str, Any]]:
    converted = []
    for tool in tools:
        function: dict[str, Any] = {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        }
        if compat.supports_strict_mode:
            function["strict"] = False
        converted.append({"type": "function", "function": function})
    return converted


def _has_tool_history(messages: list[Message]) -> bool:
    return any(
        isinstance(m, ToolResultMessage)
        or (isinstance(m, AssistantMessage) and any(isinstance(b, ToolCall) for b in m.content))
        for m in messages
    )


def build_request_body(
    model: Model, context: Context, options: StreamOptions, compat: Compat | None = None
) -> dict[str, Any]:
    """The JSON body pi sends for this model, context and options."""
    compat = compat or detect_compat(model)
    body: dict[str, Any] = {
        "model": model.id,
        "messages": convert_messages(model, context, compat),
        "stream": True,
    }
    if "api.openai.com" in base_url_of(model) and options.session_id and options.cache_retention != "none":
        body["prompt_cache_key"] = options.session_id[:64]
    if compat.supports_usage_in_streaming:
        body["stream_options"] = {"include_usage": True}
    if compat.supports_store:
        body["store"] = False
    if options.max_tokens:
        body[compat.max_tokens_field] = options.max_tokens
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if context.tools:
        body["tools"] = convert_tools(context.tools, compat)
    elif _has_tool_history(context.messages):
        body["tools"] = []
    tool_choice = getattr(options, "tool_choice", None)
    if tool_choice:
        body["tool_choice"] = tool_choice
    effort = getattr(options, "reasoning_effort", None)
    if effort and model.reasoning and compat.supports_reasoning_effort:
        level_map = (model.compat or {}).get("thinkingLevelMap") or {}
        body["reasoning_effort"] = level_map.get(effort, effort)
    return body


def request_headers(model: Model, options: StreamOptions, api_key: str | None) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    headers.update(model.headers or {})
    headers.update(options.headers or {})
    return headers


def format_http_error(status: int, text: str) -> str:
    """``"<status> <message>"`` as the OpenAI SDK words it (``400 bad request: model not found``)."""
    try:
        body = json.loads(text) if text else None
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        message = error["message"] if isinstance(error["message"], str) else compact_json(error["message"])
    elif error:
        message = compact_json(error)
    elif body is not None:
        message = text
    else:
        message = text.strip() or "status code (no body)"
    return f"{status} {message}"
