"""Content blocks and messages: the pi-ai message model.

A transcript is a list of `AgentMessage`: the three LLM roles (`user`, `assistant`, `toolResult`)
plus application messages with a role of their own (`CustomMessage`), which `convert_to_llm`
decides how (or whether) to show the model.

The three LLM roles and their blocks are `WireStruct`s (see `agent_core._wire`): cheap to build
and to hold, decoded straight from JSON. They keep the fields pi defines; other keys in their JSON
are ignored when it is parsed. A `CustomMessage` keeps every field it is given.

`dump()` (or `dump_message`) gives a message's JSON form; `parse_message` (from that form) and
`parse_message_json` (from its JSON text) are the way back.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, TypeAlias

import msgspec

from agent_core._wire import WireStruct, always, encode_other
from agent_core.errors import InvalidMessageError

StopReason: TypeAlias = Literal["stop", "length", "toolUse", "error", "aborted"]
LLM_ROLES = ("user", "assistant", "toolResult")


def now_ms() -> int:
    """Wall-clock time in integer milliseconds (pi's timestamp unit)."""
    return int(time.time() * 1000)


def _stop() -> StopReason:
    return "stop"


# --- content blocks ---------------------------------------------------------------------------


class _Block(WireStruct, tag_field="type"):
    """Base of the content blocks, tagged by `type`."""


class TextContent(_Block, tag="text", kw_only=True):
    type: ClassVar[Literal["text"]] = "text"
    text: str
    text_signature: str | None = None


class ThinkingContent(_Block, tag="thinking", kw_only=True):
    type: ClassVar[Literal["thinking"]] = "thinking"
    thinking: str
    thinking_signature: str | None = None
    redacted: bool | None = None


class ImageContent(_Block, tag="image", kw_only=True):
    type: ClassVar[Literal["image"]] = "image"
    data: str
    """Base64 image bytes."""
    mime_type: str


class ToolCall(_Block, tag="toolCall", kw_only=True):
    type: ClassVar[Literal["toolCall"]] = "toolCall"
    id: str
    name: str
    arguments: dict[str, Any] = always(dict)
    thought_signature: str | None = None


class Cost(WireStruct, kw_only=True):
    input: float = always(float)
    output: float = always(float)
    cache_read: float = always(float)
    cache_write: float = always(float)
    total: float = always(float)


class Usage(WireStruct, kw_only=True):
    input: int = always(int)
    output: int = always(int)
    cache_read: int = always(int)
    cache_write: int = always(int)
    total_tokens: int = always(int)
    cost: Cost = always(Cost)


UserContent: TypeAlias = TextContent | ImageContent
AssistantContent: TypeAlias = TextContent | ThinkingContent | ToolCall
ToolResultContent: TypeAlias = TextContent | ImageContent


# --- messages ---------------------------------------------------------------------------------


class _LlmMessage(WireStruct, tag_field="role"):
    """Base of the three LLM roles, tagged by `role`."""


class UserMessage(_LlmMessage, tag="user", kw_only=True):
    role: ClassVar[Literal["user"]] = "user"
    content: str | list[UserContent]
    timestamp: int = always(now_ms)


class AssistantMessage(_LlmMessage, tag="assistant", kw_only=True):
    role: ClassVar[Literal["assistant"]] = "assistant"
    content: list[AssistantContent] = always(list)
    api: str
    provider: str
    model: str
    response_model: str | None = None
    response_id: str | None = None
    diagnostics: Any = None
    usage: Usage = always(Usage)
    stop_reason: StopReason = always(_stop)
    error_message: str | None = None
    timestamp: int = always(now_ms)

    def __post_init__(self) -> None:
        # A context holds thousands of replies naming the same few models: share those strings.
        self.api = sys.intern(self.api)
        self.provider = sys.intern(self.provider)
        self.model = sys.intern(self.model)


class ToolResultMessage(_LlmMessage, tag="toolResult", kw_only=True):
    role: ClassVar[Literal["toolResult"]] = "toolResult"
    tool_call_id: str
    tool_name: str
    content: list[ToolResultContent] = always(list)
    details: Any = None
    is_error: bool = always(bool)
    timestamp: int = always(now_ms)


class CustomMessage:
    """An application message with its own `role` (notifications, summaries, ...).

    Every other field is kept as given (keys as they are written in JSON) and reads as an
    attribute; `convert_to_llm` decides what the model sees. Fields are fixed once built.
    """

    __slots__ = ("_fields", "role", "timestamp")

    def __init__(self, *, role: str, timestamp: int | None = None, **fields: Any) -> None:
        self.role = role
        self.timestamp = now_ms() if timestamp is None else timestamp
        self._fields = fields

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        fields: dict[str, Any] = object.__getattribute__(self, "_fields")
        try:
            return fields[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}") from None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CustomMessage):
            return NotImplemented
        return (self.role, self.timestamp, self._fields) == (other.role, other.timestamp, other._fields)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        extra = "".join(f", {key}={value!r}" for key, value in self._fields.items())
        return f"CustomMessage(role={self.role!r}, timestamp={self.timestamp!r}{extra})"

    def dump(self) -> dict[str, Any]:
        """JSON-ready dict: role, timestamp, then the other fields (``None`` ones left out)."""
        data: dict[str, Any] = {"role": self.role, "timestamp": self.timestamp}
        data.update((key, value) for key, value in self._fields.items() if value is not None)
        converted: dict[str, Any] = msgspec.to_builtins(data, enc_hook=encode_other)
        return converted


Message: TypeAlias = UserMessage | AssistantMessage | ToolResultMessage
AgentMessage: TypeAlias = UserMessage | AssistantMessage | ToolResultMessage | CustomMessage

_MESSAGE_TYPES = (UserMessage, AssistantMessage, ToolResultMessage, CustomMessage)
_JSON_DECODER: msgspec.json.Decoder[Message] = msgspec.json.Decoder(Message)


def parse_message(data: Any) -> AgentMessage:
    """A message from its JSON form (a mapping with camelCase keys); a message is returned as it
    is. Raises `InvalidMessageError` (a `ValueError`) when `data` is not a valid message."""
    if isinstance(data, _MESSAGE_TYPES):
        return data
    if not isinstance(data, Mapping):
        raise InvalidMessageError(f"A message must be an object, not {type(data).__name__}")
    role = data.get("role")
    if role in LLM_ROLES:
        try:
            message: Message = msgspec.convert(dict(data), Message)
        except msgspec.ValidationError as exc:
            raise InvalidMessageError(f"Invalid {role} message: {exc}") from exc
        return message
    if not isinstance(role, str) or not role:
        raise InvalidMessageError("A message needs a role")
    fields = {key: value for key, value in data.items() if key not in ("role", "timestamp")}
    timestamp = data.get("timestamp")
    if timestamp is not None and (not isinstance(timestamp, int) or isinstance(timestamp, bool)):
        raise InvalidMessageError(f"Invalid {role} message: timestamp must be an integer")
    return CustomMessage(role=role, timestamp=timestamp, **fields)


def parse_message_json(text: str | bytes) -> AgentMessage:
    """A message from its JSON text (as stored), decoded straight into the message type. Raises
    `InvalidMessageError` when the text is not JSON or not a valid message."""
    try:
        return _JSON_DECODER.decode(text)
    except msgspec.ValidationError:
        pass  # an application role (or an invalid message): read it generically below
    except msgspec.DecodeError:
        pass  # maybe a lone surrogate escape, which only the standard library reads
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidMessageError(f"A message is not valid JSON: {exc}") from exc
    return parse_message(data)


def parse_messages(data: Any) -> list[AgentMessage]:
    """`parse_message` of every item of a list. Raises `InvalidMessageError`."""
    if not isinstance(data, list | tuple):
        raise InvalidMessageError(f"Messages must be a list, not {type(data).__name__}")
    return [parse_message(item) for item in data]


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
