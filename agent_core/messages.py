"""Content blocks and messages: the pi-ai message model.

A transcript is a list of `AgentMessage`: the three LLM roles (`user`, `assistant`, `toolResult`)
plus application messages with a role of their own (`CustomMessage`), which `convert_to_llm`
decides how (or whether) to show the model.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Discriminator, Field, Tag, TypeAdapter

from agent_core._model import WireModel

StopReason: TypeAlias = Literal["stop", "length", "toolUse", "error", "aborted"]


def now_ms() -> int:
    """Wall-clock time in integer milliseconds (pi's timestamp unit)."""
    return int(time.time() * 1000)


class TextContent(WireModel):
    type: Literal["text"] = "text"
    text: str
    text_signature: str | None = None


class ThinkingContent(WireModel):
    type: Literal["thinking"] = "thinking"
    thinking: str
    thinking_signature: str | None = None
    redacted: bool | None = None


class ImageContent(WireModel):
    type: Literal["image"] = "image"
    data: str
    """Base64 image bytes."""
    mime_type: str


class ToolCall(WireModel):
    type: Literal["toolCall"] = "toolCall"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    thought_signature: str | None = None


class Cost(WireModel):
    input: float = 0
    output: float = 0
    cache_read: float = 0
    cache_write: float = 0
    total: float = 0


class Usage(WireModel):
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int = 0
    cost: Cost = Field(default_factory=Cost)


UserContent: TypeAlias = Annotated[TextContent | ImageContent, Field(discriminator="type")]
AssistantContent: TypeAlias = Annotated[TextContent | ThinkingContent | ToolCall, Field(discriminator="type")]
ToolResultContent: TypeAlias = Annotated[TextContent | ImageContent, Field(discriminator="type")]


class UserMessage(WireModel):
    role: Literal["user"] = "user"
    content: str | list[UserContent]
    timestamp: int = Field(default_factory=now_ms)


class AssistantMessage(WireModel):
    role: Literal["assistant"] = "assistant"
    content: list[AssistantContent] = Field(default_factory=list)
    api: str
    provider: str
    model: str
    response_model: str | None = None
    response_id: str | None = None
    diagnostics: Any = None
    usage: Usage = Field(default_factory=Usage)
    stop_reason: StopReason = "stop"
    error_message: str | None = None
    timestamp: int = Field(default_factory=now_ms)


class ToolResultMessage(WireModel):
    role: Literal["toolResult"] = "toolResult"
    tool_call_id: str
    tool_name: str
    content: list[ToolResultContent] = Field(default_factory=list)
    details: Any = None
    is_error: bool = False
    timestamp: int = Field(default_factory=now_ms)


class CustomMessage(WireModel):
    """An application message with its own `role` (notifications, summaries, ...).

    Extra fields are kept as given; `convert_to_llm` decides what the model sees.
    """

    role: str
    timestamp: int = Field(default_factory=now_ms)


Message: TypeAlias = UserMessage | AssistantMessage | ToolResultMessage


def _role_of(value: Any) -> str:
    role = value.get("role") if isinstance(value, dict) else getattr(value, "role", None)
    return role if role in ("user", "assistant", "toolResult") else "custom"


AgentMessage: TypeAlias = Annotated[
    Annotated[UserMessage, Tag("user")]
    | Annotated[AssistantMessage, Tag("assistant")]
    | Annotated[ToolResultMessage, Tag("toolResult")]
    | Annotated[CustomMessage, Tag("custom")],
    Discriminator(_role_of),
]

_AGENT_MESSAGE: TypeAdapter[AgentMessage] = TypeAdapter(AgentMessage)
_AGENT_MESSAGES: TypeAdapter[list[AgentMessage]] = TypeAdapter(list[AgentMessage])


def parse_message(data: Any) -> AgentMessage:
    """Build a message from its JSON form (camelCase keys) or return it if already a model."""
    return _AGENT_MESSAGE.validate_python(data)


def parse_messages(data: Any) -> list[AgentMessage]:
    return _AGENT_MESSAGES.validate_python(data)


def dump_message(message: AgentMessage) -> dict[str, Any]:
    """The message's JSON form as pi writes it (camelCase, no ``None`` fields)."""
    return message.dump()


def text_of(message: AgentMessage) -> str:
    """All text blocks of a message joined (empty for messages without text)."""
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(block.text for block in content if isinstance(block, TextContent))


def tool_calls_of(message: AssistantMessage) -> list[ToolCall]:
    return [block for block in message.content if isinstance(block, ToolCall)]
