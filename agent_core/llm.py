"""The LLM side of the engine: models, tools as the model sees them, contexts, stream options and
the `StreamFn` seam every provider implements."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from pydantic import Field

from agent_core._model import WireModel
from agent_core._wire import WireStruct, always
from agent_core.abort import AbortSignal
from agent_core.event_stream import AssistantMessageEventStream
from agent_core.messages import Message

ThinkingLevel: TypeAlias = Literal["off", "minimal", "low", "medium", "high", "xhigh"]
ReasoningLevel: TypeAlias = Literal["minimal", "low", "medium", "high", "xhigh"]


class ModelCost(WireModel):
    """Prices in dollars per million tokens."""

    input: float = 0
    output: float = 0
    cache_read: float = 0
    cache_write: float = 0


class Model(WireModel):
    id: str
    name: str = ""
    api: str
    provider: str
    base_url: str = ""
    reasoning: bool = False
    input: list[Literal["text", "image"]] = Field(default_factory=lambda: ["text"])  # type: ignore[arg-type]
    cost: ModelCost = Field(default_factory=ModelCost)
    context_window: int = 128_000
    max_tokens: int = 16_384
    headers: dict[str, str] | None = None
    compat: dict[str, Any] | None = None

    @property
    def ref(self) -> str:
        """`provider/id`, the form used in config and on the command line."""
        return f"{self.provider}/{self.id}"


class Tool(WireStruct, kw_only=True):
    """A tool as the model sees it: name, description and JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


class Context(WireStruct, kw_only=True):
    """What one model call sees. Built per call; the message list is the caller's own."""

    system_prompt: str | None = None
    messages: list[Message] = always(list)
    tools: list[Tool] | None = None


@dataclass(kw_only=True)
class StreamOptions:
    """Options every provider accepts. Unknown to a provider means ignored, never an error."""

    temperature: float | None = None
    max_tokens: int | None = None
    signal: AbortSignal | None = None
    api_key: str | None = None
    session_id: str | None = None
    headers: dict[str, str] | None = None
    timeout_ms: int | None = None
    max_retries: int | None = None
    max_retry_delay_ms: int | None = None
    reasoning: ReasoningLevel | None = None
    cache_retention: Literal["none", "short", "long"] | None = None
    on_payload: Callable[[dict[str, Any], Model], None] | None = None
    on_event: Callable[[], None] | None = None
    """Called whenever the provider receives anything from the model (idle-timeout watchdogs)."""
    metadata: dict[str, Any] = field(default_factory=dict)


StreamFn: TypeAlias = Callable[
    [Model, Context, StreamOptions],
    AssistantMessageEventStream | Awaitable[AssistantMessageEventStream],
]
