"""Ordered delivery of the loop's events to its sink.

The loop emits from one coroutine, except for `tool_execution_update`, which a tool triggers from a
synchronous `on_update` callback while the batch coroutine may be emitting for another tool. The
sink may be async (the Agent awaits its listeners), so deliveries are serialised with a lock: each
event is handed to the sink only after the previous delivery finished. The lock is FIFO, so
updates are delivered in the order their tasks were started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeAlias

from agent_core.awaitables import maybe_await
from agent_core.events import AgentEvent

AgentEventSink: TypeAlias = Callable[[AgentEvent], Awaitable[None] | None]
"""Where the loop sends its events; sync or async, always awaited before the loop goes on."""


class Emitter:
    """Serialised access to one sink for the duration of one loop run."""

    __slots__ = ("_lock", "_sink")

    def __init__(self, sink: AgentEventSink) -> None:
        self._sink = sink
        self._lock = asyncio.Lock()

    async def __call__(self, event: AgentEvent) -> None:
        async with self._lock:
            await maybe_await(self._sink(event))

    def start(self, event: AgentEvent) -> asyncio.Task[None]:
        """Deliver `event` from a task of its own; the caller owns (and must await) the task."""
        return asyncio.ensure_future(self(event))
