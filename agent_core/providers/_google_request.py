"""Building ``google-generative-ai`` requests: ``contents``, tools, generation config, headers.

Gemini's roles are ``user`` and ``model``; a tool result is a ``functionResponse`` part of a user
turn (``{"result": text, "isError": bool}``). Thought signatures go back where they came from: on
the thinking part (``thought: true``) and on the ``functionCall`` part they were sent with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agent_core.llm import Context, Model, StreamOptions, Tool
from agent_core.messages import (
    AssistantMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolResultMessage,
    UserMessage,
)
from agent_core.providers._transform import transform_messages

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"


@dataclass(kw_only=True)
class GoogleOptions(StreamOptions):
    """Stream options plus what only this API takes."""

    tool_choice: str | None = None
    """``auto``, ``none`` or ``any``."""
    thinking_enabled: bool = False
    thinking_budget_tokens: int | None = None
    """-1 lets the model decide, 0 turns thinking off."""


def base_url_of(model: Model) -> str:
    return (model.base_url or DEFAULT_BASE_URL).rstrip("/")


def stream_url(model: Model) -> str:
    return f"{base_url_of(model)}/models/{model.id}:streamGenerateContent?alt=sse"


def _inline(image: ImageContent) -> dict[str, Any]:
    return {"inlineData": {"mimeType": image.mime_type, "data": image.data}}


def _user_parts(message: UserMessage, model: Model) -> list[dict[str, Any]]:
    if isinstance(message.content, str):
        return [{"text": message.content}]
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextContent):
            if block.text.strip():
                parts.append({"text": block.text})
        elif "image" in model.input:
            parts.append(_inline(block))
    return parts


def _model_parts(message: AssistantMessage) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextContent):
            parts.append({"text": block.text})
        elif isinstance(block, ThinkingContent):
            part: dict[str, Any] = {"thought": True, "text": block.thinking}
            if block.thinking_signature:
                part["thoughtSignature"] = block.thinking_signature
            parts.append(part)
        else:
            call: dict[str, Any] = {
                "functionCall": {"id": block.id, "name": block.name, "args": block.arguments}
            }
            if block.thought_signature:
                call["thoughtSignature"] = block.thought_signature
            parts.append(call)
    return parts


def _result_parts(result: ToolResultMessage, model: Model) -> list[dict[str, Any]]:
    text = "\n".join(b.text for b in result.content if isinstance(b, TextContent))
    images = [b for b in result.content if isinstance(b, ImageContent)]
    parts: list[dict[str, Any]] = [
        {
            "functionResponse": {
                "id": result.tool_call_id,
                "name": result.tool_name,
                "response": {"result": text if text else "(see attached image)", "isError": result.is_error},
            }
        }
    ]
    if "image" in model.input:
        parts.extend(_inline(image) for image in images)
    return parts


def convert_messages(model: Model, context: Context) -> list[dict[str, Any]]:
    """The ``contents`` array of a request. Consecutive tool results share one user turn."""
    contents: list[dict[str, Any]] = []
    for message in transform_messages(context.messages, model):
        if isinstance(message, UserMessage):
            parts = _user_parts(message, model)
            role = "user"
        elif isinstance(message, AssistantMessage):
            parts = _model_parts(message)
            role = "model"
        elif isinstance(message, ToolResultMessage):
            parts = _result_parts(message, model)
            previous = contents[-1] if contents else None
            if previous is not None and previous.get("role") == "user" and _all_results(previous):
                previous["parts"].extend(parts)
                continue
            role = "user"
        else:
            continue
        if parts:
            contents.append({"role": role, "parts": parts})
    return contents


def _all_results(content: dict[str, Any]) -> bool:
    return all("functionResponse" in part or "inlineData" in part for part in content["parts"])


def convert_tools(tools: list[Tool]) -> list[dict[str, Any]]:
    declarations = [
        {"name": tool.name, "description": tool.description, "parameters": tool.parameters} for tool in tools
    ]
    return [{"functionDeclarations": declarations}] if declarations else []


_TOOL_MODES = {"auto": "AUTO", "none": "NONE", "any": "ANY"}


def build_request_body(model: Model, context: Context, options: StreamOptions) -> dict[str, Any]:
    """The JSON body of ``streamGenerateContent``."""
    body: dict[str, Any] = {"contents": convert_messages(model, context)}
    if context.system_prompt:
        body["systemInstruction"] = {"parts": [{"text": context.system_prompt}]}
    generation: dict[str, Any] = {}
    if options.temperature is not None:
        generation["temperature"] = options.temperature
    if options.max_tokens:
        generation["maxOutputTokens"] = options.max_tokens
    if getattr(options, "thinking_enabled", False) and model.reasoning:
        thinking: dict[str, Any] = {"includeThoughts": True}
        budget = getattr(options, "thinking_budget_tokens", None)
        if budget is not None:
            thinking["thinkingBudget"] = budget
        generation["thinkingConfig"] = thinking
    if generation:
        body["generationConfig"] = generation
    if context.tools:
        body["tools"] = convert_tools(context.tools)
        choice = getattr(options, "tool_choice", None)
        if choice:
            body["toolConfig"] = {"functionCallingConfig": {"mode": _TOOL_MODES.get(choice, "AUTO")}}
    return body


def request_headers(model: Model, options: StreamOptions, api_key: str | None) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    if api_key:
        headers["x-goog-api-key"] = api_key
    headers.update(model.headers or {})
    headers.update(options.headers or {})
    return headers


def format_http_error(status: int, text: str) -> str:
    """``"<status> <message>"`` from Google's error body (``{"error": {"message": ...}}``), which
    Gemini sometimes sends as a one-element list."""
    try:
        body = json.loads(text) if text else None
    except ValueError:
        body = None
    if isinstance(body, list) and body:
        body = body[0]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"]:
        return f"{status} {error['message']}"
    return f"{status} {text.strip() or 'status code (no body)'}"
