"""Ordered delivery of the loop's events to its sink.

The loop emits from one coroutine, except for `tool_execution_update`, which a tool triggers from a
synchronous `on_update` callback while the batch coroutine may be emitting for another tool. The
sink may be async (the Agent awaits its listeners), so deliveries take turns: each event is handed
to the sink only after the previous delivery finished, and callers that find a delivery under way
wait in arrival order, so updates are delivered in the order their tasks were started.

The turn is a flag plus a queue of waiters rather than an `asyncio.Lock`: most events find no
delivery under way (the loop awaits each one), and then taking the turn costs nothing. Lifetimes:
an emitter lives for one loop run; a waiter from the moment a caller finds the turn taken until it
is handed the turn (or cancelled).
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeAlias

from agent_core.events import AgentEvent

AgentEventSink: TypeAlias = Callable[[AgentEvent], Awaitable[None] | None]
"""Where the loop sends its events; sync or async, always awaited before the loop goes on."""


class Emitter:
    """Serialised access to one sink for the duration of one loop run."""

    __slots__ = ("_busy", "_sink", "_waiting")

    def __init__(self, sink: AgentEventSink) -> None:
        self._sink = sink
        self._busy = False
        # Callers waiting for their turn, in arrival order (at most one per concurrent emitter:
        # the loop and the tool updates in flight).
        self._waiting: deque[asyncio.Future[None]] = deque()

    async def __call__(self, event: AgentEvent) -> None:
        if self._busy:
            await self._turn()
        else:
            self._busy = True
        try:
            result = self._sink(event)
            if result is not None and inspect.isawaitable(result):
                await result
        finally:
            self._release()

    def start(self, event: AgentEvent) -> asyncio.Task[None]:
        """Deliver `event` from a task of its own; the caller owns (and must await) the task."""
        return asyncio.ensure_future(self(event))

    async def _turn(self) -> None:
        """Wait until the turn is handed over (it is then this caller's: `_busy` stays set)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # handed the turn, then cancelled: pass it on
            raise

    def _release(self) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():  # a cancelled waiter gave up its place
                waiter.set_result(None)
                return
        self._busy = False
