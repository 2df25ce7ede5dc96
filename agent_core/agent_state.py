"""The Agent's state, the reducer that keeps it in step with the loop's events, and the queues of
messages waiting for the loop's next poll.

Lifetimes: a state lives as long as its `Agent`. The run fields (`is_streaming`,
`streaming_message`, `pending_tool_calls`, `error_message`) are read-only for callers; the agent
changes them through `begin_run`, `apply`, `record_failure`, `finish_run` and `clear`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from agent_core.agent_types import AgentTool, QueueMode
from agent_core.events import (
    AgentEndEvent,
    AgentEvent,
    MessageEndEvent,
    MessageStartEvent,
    MessageUpdateEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    TurnEndEvent,
)
from agent_core.llm import Model, ModelCost, ThinkingLevel
from agent_core.messages import AgentMessage, AssistantMessage

DEFAULT_MODEL = Model(
    id="unknown",
    name="unknown",
    api="unknown",
    provider="unknown",
    base_url="",
    reasoning=False,
    input=[],
    cost=ModelCost(),
    context_window=0,
    max_tokens=0,
)
"""The model of an agent created without one (pi's DEFAULT_MODEL); a run with it needs a
`stream_fn` that does not care about the model."""


_STREAMING = (MessageStartEvent, MessageUpdateEvent)  # a tuple: `A | B` builds a union per call


class AgentInitialState(TypedDict, total=False):
    system_prompt: str
    model: Model
    thinking_level: ThinkingLevel
    tools: Sequence[AgentTool]
    messages: Sequence[AgentMessage]


class AgentState:
    """What the agent knows. `system_prompt`, `model` and `thinking_level` are plain attributes;
    assigning `tools` or `messages` stores a copy of the list; the run fields are read-only."""

    def __init__(self, initial: AgentInitialState | None = None) -> None:
        initial = initial or {}
        self.system_prompt: str = initial.get("system_prompt", "")
        self.model: Model = initial.get("model", DEFAULT_MODEL)
        self.thinking_level: ThinkingLevel = initial.get("thinking_level", "off")
        self._tools: list[AgentTool] = list(initial.get("tools", ()))
        self._messages: list[AgentMessage] = list(initial.get("messages", ()))
        self._is_streaming = False
        self._streaming_message: AgentMessage | None = None
        self._pending_tool_calls: frozenset[str] = frozenset()
        self._error_message: str | None = None

    @property
    def tools(self) -> list[AgentTool]:
        return self._tools

    @tools.setter
    def tools(self, tools: Sequence[AgentTool]) -> None:
        self._tools = list(tools)

    @property
    def messages(self) -> list[AgentMessage]:
        """The transcript itself (appending to it appends to the agent's transcript)."""
        return self._messages

    @messages.setter
    def messages(self, messages: Sequence[AgentMessage]) -> None:
        self._messages = list(messages)

    @property
    def is_streaming(self) -> bool:
        """True from the start of a run until it finished (listeners included)."""
        return self._is_streaming

    @property
    def streaming_message(self) -> AgentMessage | None:
        """The message being streamed (set by message_start/update, cleared by message_end)."""
        return self._streaming_message

    @property
    def pending_tool_calls(self) -> frozenset[str]:
        """Ids of tool calls that started and have not ended."""
        return self._pending_tool_calls

    @property
    def error_message(self) -> str | None:
        """The error of the last failed assistant message of the current or last run."""
        return self._error_message

    # --- transitions, driven by the Agent ------------------------------------------------------

    def begin_run(self) -> None:
        self._is_streaming = True
        self._streaming_message = None
        self._error_message = None

    def finish_run(self) -> None:
        self._is_streaming = False
        self._streaming_message = None
        self._pending_tool_calls = frozenset()

    def clear(self) -> None:
        """Forget the transcript and every run field (the prompt, model and tools stay)."""
        self._messages = []
        self.finish_run()
        self._error_message = None

    def record_failure(self, message: AssistantMessage) -> None:
        """Append the synthetic message of a failed run (pi 0.73.1 bypasses the reducer here)."""
        self._messages.append(message)
        self._error_message = message.error_message

    def apply(self, event: AgentEvent) -> None:
        """The reducer: update the state for one loop event (before listeners see it)."""
        if isinstance(event, _STREAMING):
            self._streaming_message = event.message
        elif isinstance(event, MessageEndEvent):
            self._streaming_message = None
            self._messages.append(event.message)
        elif isinstance(event, ToolExecutionStartEvent):
            self._pending_tool_calls = self._pending_tool_calls | {event.tool_call_id}
        elif isinstance(event, ToolExecutionEndEvent):
            self._pending_tool_calls = self._pending_tool_calls - {event.tool_call_id}
        elif isinstance(event, TurnEndEvent):
            message = event.message
            if isinstance(message, AssistantMessage) and message.error_message:
                self._error_message = message.error_message
        elif isinstance(event, AgentEndEvent):
            self._streaming_message = None


class PendingMessageQueue:
    """Messages waiting for the loop's next poll (steering or follow-up).

    Unbounded on purpose: only the agent's owner fills it, one call per message it decided to
    queue, and every poll drains it; `len()` tells its size. `"one-at-a-time"` hands out one
    message per poll, `"all"` everything queued.
    """

    __slots__ = ("_items", "mode")

    def __init__(self, mode: QueueMode) -> None:
        self.mode: QueueMode = mode
        self._items: list[AgentMessage] = []

    def __len__(self) -> int:
        return len(self._items)

    def enqueue(self, message: AgentMessage) -> None:
        self._items.append(message)

    def drain(self) -> list[AgentMessage]:
        """What one poll receives under the queue's mode."""
        if self.mode == "all":
            return self.drain_all()
        if not self._items:
            return []
        return [self._items.pop(0)]

    def drain_all(self) -> list[AgentMessage]:
        items, self._items = self._items, []
        return items

    def clear(self) -> None:
        self._items = []
