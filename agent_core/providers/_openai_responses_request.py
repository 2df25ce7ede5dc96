"""Building ``openai-responses`` requests: the ``input`` items, tools, body and headers.

Reasoning is carried across turns as the API asks: a thinking block's signature is the whole
``reasoning`` item the server sent (its id, summary and ``encrypted_content``), replayed verbatim
as an input item; a text block's signature names the output message it came from
(``{"v": 1, "id": ...}``); a tool call's id is ``<call_id>|<item id>``. Requests set
``store: false`` and, for reasoning models, ask for ``reasoning.encrypted_content`` so no state
has to live on the server.
"""

from __future__ import annotations

import hashlib
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
from agent_core.providers._openai_request import compact_json
from agent_core.providers._transform import transform_messages

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_MAX_ID = 64


@dataclass(kw_only=True)
class OpenAIResponsesOptions(StreamOptions):
    """Stream options plus what only this API takes."""

    reasoning_effort: str | None = None
    reasoning_summary: str | None = None
    """``auto`` (the default when an effort is set), ``concise`` or ``detailed``."""
    service_tier: str | None = None


def base_url_of(model: Model) -> str:
    return (model.base_url or DEFAULT_BASE_URL).rstrip("/")


def encode_text_signature(item_id: str, phase: str | None = None) -> str:
    payload: dict[str, Any] = {"v": 1, "id": item_id}
    if phase:
        payload["phase"] = phase
    return compact_json(payload)


def _text_signature(signature: str | None) -> tuple[str | None, str | None]:
    """``(message id, phase)`` of a text block's signature (a plain string is an old-style id)."""
    if not signature:
        return None, None
    if signature.startswith("{"):
        try:
            parsed = json.loads(signature)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("v") == 1 and isinstance(parsed.get("id"), str):
            phase = parsed.get("phase")
            return parsed["id"], phase if phase in ("commentary", "final_answer") else None
    return signature, None


def _short_id(value: str) -> str:
    return "msg_" + hashlib.sha256(value.encode()).hexdigest()[:16]


def _clean_id(value: str, *, prefix: str | None = None) -> str:
    cleaned = "".join(c if c.isalnum() or c in "_-" else "_" for c in value)
    if prefix and not cleaned.startswith(prefix):
        cleaned = f"{prefix}_{cleaned}"
    return cleaned[:_MAX_ID].rstrip("_")


def _normalize_tool_call_id(model: Model) -> Any:
    def normalize(tool_id: str) -> str:
        if "|" not in tool_id:
            return _clean_id(tool_id)
        call_id, item_id = tool_id.split("|", 1)
        return f"{_clean_id(call_id)}|{_clean_id(item_id, prefix='fc')}"

    return normalize


def _input_image(image: ImageContent) -> dict[str, Any]:
    return {
        "type": "input_image",
        "detail": "auto",
        "image_url": f"data:{image.mime_type};base64,{image.data}",
    }


def _user_item(message: UserMessage, model: Model) -> dict[str, Any] | None:
    if isinstance(message.content, str):
        return {"role": "user", "content": [{"type": "input_text", "text": message.content}]}
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextContent):
            parts.append({"type": "input_text", "text": block.text})
        elif "image" in model.input:
            parts.append(_input_image(block))
    return {"role": "user", "content": parts} if parts else None


def _assistant_items(message: AssistantMessage, model: Model, index: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    other_model = (
        message.model != model.id and message.provider == model.provider and message.api == model.api
    )
    skipped_reasoning = False
    for block in message.content:
        if isinstance(block, ThinkingContent):
            item = _loads_dict(block.thinking_signature)
            if item is not None:
                items.append(item)
            else:
                skipped_reasoning = True
        elif isinstance(block, TextContent):
            msg_id, phase = _text_signature(block.text_signature)
            if not msg_id:
                msg_id = f"msg_{index}"
            elif len(msg_id) > _MAX_ID:
                msg_id = _short_id(msg_id)
            out: dict[str, Any] = {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": block.text, "annotations": []}],
                "status": "completed",
                "id": msg_id,
            }
            if phase:
                out["phase"] = phase
            items.append(out)
        else:
            call_id, _, item_id = block.id.partition("|")
            call: dict[str, Any] = {
                "type": "function_call",
                "call_id": call_id,
                "name": block.name,
                "arguments": compact_json(block.arguments),
            }
            # The server pairs fc_ items with the reasoning item that produced them: without that
            # reasoning item (another model's turn, or one not replayable) the id must go.
            if item_id and not ((other_model or skipped_reasoning) and item_id.startswith("fc_")):
                call["id"] = item_id
            items.append(call)
    return items


def _loads_dict(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _tool_result_items(result: ToolResultMessage, model: Model) -> list[dict[str, Any]]:
    text = "\n".join(b.text for b in result.content if isinstance(b, TextContent))
    items: list[dict[str, Any]] = [
        {
            "type": "function_call_output",
            "call_id": result.tool_call_id.split("|", 1)[0],
            "output": text if text else "(see attached image)",
        }
    ]
    images = [b for b in result.content if isinstance(b, ImageContent)]
    if images and "image" in model.input:
        items.append(
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Attached image(s) from tool result:"},
                    *(_input_image(image) for image in images),
                ],
            }
        )
    return items


def convert_messages(model: Model, context: Context) -> list[dict[str, Any]]:
    """The ``input`` array of a request."""
    out: list[dict[str, Any]] = []
    if context.system_prompt:
        out.append({"role": "developer" if model.reasoning else "system", "content": context.system_prompt})
    messages = transform_messages(context.messages, model, _normalize_tool_call_id(model))
    for index, message in enumerate(messages):
        if isinstance(message, UserMessage):
            item = _user_item(message, model)
            if item is not None:
                out.append(item)
        elif isinstance(message, AssistantMessage):
            out.extend(_assistant_items(message, model, index))
        elif isinstance(message, ToolResultMessage):
            out.extend(_tool_result_items(message, model))
    return out


def convert_tools(tools: list[Tool]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
            "strict": False,
        }
        for tool in tools
    ]


def build_request_body(model: Model, context: Context, options: StreamOptions) -> dict[str, Any]:
    """The JSON body for this model, context and options."""
    body: dict[str, Any] = {
        "model": model.id,
        "input": convert_messages(model, context),
        "stream": True,
        "store": False,
    }
    if options.session_id and options.cache_retention != "none":
        body["prompt_cache_key"] = options.session_id[:64]
    if options.max_tokens:
        body["max_output_tokens"] = options.max_tokens
    if options.temperature is not None:
        body["temperature"] = options.temperature
    tier = getattr(options, "service_tier", None)
    if tier:
        body["service_tier"] = tier
    if context.tools:
        body["tools"] = convert_tools(context.tools)
    effort = getattr(options, "reasoning_effort", None)
    summary = getattr(options, "reasoning_summary", None)
    if model.reasoning and (effort or summary):
        body["reasoning"] = {"effort": effort or "medium", "summary": summary or "auto"}
        body["include"] = ["reasoning.encrypted_content"]
    return body
