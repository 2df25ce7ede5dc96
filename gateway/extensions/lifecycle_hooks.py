"""Extensions' run and message hooks, fed by the committed session events.

`LifecycleHooks.on_event` is a bridge listener (`gateway.bridge.Bridge.add_listener`): it runs
inside the publish of every session event, so it only picks the events that hooks care about
(`agent.started`, `agent.finished`, `message.started`, `message.completed`) and puts them on a
bounded queue. One worker task, owned by this object, calls the hooks in event order, one at a
time, each contained (`tool_hooks.contained`: a failure or a timeout is logged and skipped).

The queue holds `QUEUE_SIZE` events. When hooks fall that far behind, further events are dropped
(counted in `dropped`, and a warning is logged when dropping starts): a slow extension never
slows the sessions down. The hooks read the loaded extensions when each event is delivered, so a
disabled extension hears nothing more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

import structlog

from gateway.background import Background
from gateway.extensions.extension_api import (
    Hook,
    MessageEnd,
    MessageStart,
    Registrations,
    RunEnd,
    RunStart,
)
from gateway.extensions.tool_hooks import contained
from sessions import SessionEvent
from sessions.event_payloads import AgentFinished, AgentStarted, MessageCompleted, MessageStarted

log = structlog.get_logger("gateway.extensions")

QUEUE_SIZE = 1024
LifecycleEvent = RunStart | RunEnd | MessageStart | MessageEnd
Sources = Callable[[], list[tuple[str, Registrations]]]
"""The loaded extensions' registrations, `(extension name, registrations)`."""


def lifecycle_event(event: SessionEvent) -> LifecycleEvent | None:
    """The hook event for a committed session event, None for the events hooks do not get."""
    data = event.data
    common: dict[str, Any] = {
        "session_id": event.session_id,
        "session_key": event.session_key,
        "run_id": event.run_id,
    }
    if isinstance(data, AgentStarted):
        return RunStart(**common)
    if isinstance(data, AgentFinished):
        return RunEnd(
            **common, termination_reason=data.termination_reason.value, error_message=data.error_message
        )
    if isinstance(data, MessageStarted):
        return MessageStart(**common, message_id=data.message_id, role=data.role)
    if isinstance(data, MessageCompleted):
        return MessageEnd(**common, message_id=data.message_id, message=data.message)
    return None


class LifecycleHooks:
    """See the module docstring. `start()` once the event loop runs; `aclose()` at shutdown."""

    def __init__(self, sources: Sources) -> None:
        self._sources = sources
        self._queue: asyncio.Queue[LifecycleEvent] = asyncio.Queue(QUEUE_SIZE)
        self._tasks = Background("extension hooks")
        self.dropped = 0
        self.delivered = 0

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    def start(self) -> None:
        if not len(self._tasks):
            self._tasks.spawn(self._work(), name="extension-hooks")

    def on_event(self, event: SessionEvent) -> None:
        """The bridge listener: queue the events hooks get (never blocks)."""
        if not any(registered.has_lifecycle_hooks for _, registered in self._sources()):
            return
        hook_event = lifecycle_event(event)
        if hook_event is None:
            return
        try:
            self._queue.put_nowait(hook_event)
        except asyncio.QueueFull:
            if self.dropped == 0 or self.dropped % QUEUE_SIZE == 0:
                log.warning("extension hooks are behind; events dropped", dropped=self.dropped + 1)
            self.dropped += 1

    async def _work(self) -> None:
        while True:
            event = await self._queue.get()
            for extension, hook_name, hook in self._hooks_for(event):
                await contained(extension, hook_name, partial(hook, event))
            self.delivered += 1

    def _hooks_for(self, event: LifecycleEvent) -> list[tuple[str, str, Hook[Any]]]:
        out: list[tuple[str, str, Hook[Any]]] = []
        for extension, registered in self._sources():
            hooks: list[Hook[Any]]
            if isinstance(event, RunStart):
                name, hooks = "on_run_start", list(registered.run_start)
            elif isinstance(event, RunEnd):
                name, hooks = "on_run_end", list(registered.run_end)
            elif isinstance(event, MessageStart):
                name, hooks = "on_message_start", list(registered.message_start)
            else:
                name, hooks = "on_message_end", list(registered.message_end)
            out += [(extension, name, hook) for hook in hooks]
        return out

    async def aclose(self) -> None:
        await self._tasks.aclose()
