"""Preparing a transcript for a provider (pi's transformMessages), before its own conversion.

- Assistant messages that ended in ``error`` or ``aborted`` are dropped: they are unfinished turns.
- Messages from another model keep their text; their thinking becomes plain text (redacted or
  empty thinking is dropped), tool-call ids are normalised for the target API and the matching
  tool results follow, and thought signatures are removed.
- A tool call left without a result (the user spoke, or another assistant turn began) gets a
  synthetic error result "No result provided", as every API requires a result per call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from agent_core.llm import Model
from agent_core.messages import (
    AssistantMessage,
    Message,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

NormalizeId = Callable[[str], str]


def transform_messages(
    messages: Sequence[Message], model: Model, normalize_tool_call_id: NormalizeId | None = None
) -> list[Message]:
    id_map: dict[str, str] = {}
    converted = [_convert(message, model, normalize_tool_call_id, id_map) for message in messages]
    return _fill_missing_results(converted)


def _convert(
    message: Message, model: Model, normalize: NormalizeId | None, id_map: dict[str, str]
) -> Message:
    if isinstance(message, ToolResultMessage):
        new_id = id_map.get(message.tool_call_id)
        if new_id is not None and new_id != message.tool_call_id:
            return msgspec.structs.replace(message, tool_call_id=new_id)
        return message
    if not isinstance(message, AssistantMessage):
        return message
    same_model = message.provider == model.provider and message.api == model.api and message.model == model.id
    if same_model:
        return message
    content: list[TextContent | ThinkingContent | ToolCall] = []
    for block in message.content:
        if isinstance(block, ThinkingContent):
            if block.redacted or not block.thinking.strip():
                continue
            content.append(TextContent(text=block.thinking))
        elif isinstance(block, TextContent):
            content.append(TextContent(text=block.text))
        else:
            call = msgspec.structs.replace(block, thought_signature=None)
            if normalize is not None:
                new_id = normalize(block.id)
                if new_id != block.id:
                    id_map[block.id] = new_id
                    call = msgspec.structs.replace(call, id=new_id)
            content.append(call)
    return msgspec.structs.replace(message, content=content)


def _synthetic_result(call: ToolCall) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=[TextContent(text="No result provided")],
        is_error=True,
    )


def _fill_missing_results(messages: list[Message]) -> list[Message]:
    result: list[Message] = []
    pending: list[ToolCall] = []
    answered: set[str] = set()

    def flush() -> None:
        nonlocal pending, answered
        result.extend(_synthetic_result(call) for call in pending if call.id not in answered)
        pending = []
        answered = set()

    for message in messages:
        if isinstance(message, AssistantMessage):
            if pending:
                flush()
            if message.stop_reason in ("error", "aborted"):
                continue
            calls = [block for block in message.content if isinstance(block, ToolCall)]
            if calls:
                pending = calls
                answered = set()
            result.append(message)
        elif isinstance(message, ToolResultMessage):
            answered.add(message.tool_call_id)
            result.append(message)
        elif isinstance(message, UserMessage):
            if pending:
                flush()
            result.append(message)
        else:
            result.append(message)
    return result
