"""Handling each inbound event once, and remembering it only once it is handled.

Platforms redeliver what they are not sure we received: Slack resends an envelope that was not
acknowledged and an Events API request that did not get a 2xx; Discord's catch-up reads history
that may hold messages already seen. A binding must tell a redelivery from a new event, but must
never forget an event it did not finish. So `EventOnce.run` checks the event id first
(`dedupe_seen`), handles the event, and remembers it (`dedupe_remember`) only when the handler
says it is done with it. A crash in between leaves the event unremembered: its redelivery is
handled again, and the input ledger (idempotent on the message's key) keeps it from running
twice. An event the host could not record (the handler's result is not `done`) is not
remembered either, so the platform's next delivery gets another chance.

Within the process, a delivery of an event that is still being handled waits for the first one:
a duplicate if the first was done with it, otherwise it is handled itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from bindings.host import DEDUPE_TTL_S, DedupeStore

T = TypeVar("T")


class EventOnce:
    """Run each event's handler until one run is done with it, per `(platform, account_id)`."""

    def __init__(
        self, store: DedupeStore, platform: str, account_id: str, *, ttl_s: float = DEDUPE_TTL_S
    ) -> None:
        self._store = store
        self._platform = platform
        self._account_id = account_id
        self._ttl_s = ttl_s
        self._in_flight: dict[str, asyncio.Future[bool]] = {}

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    async def run(
        self, event_id: str, handle: Callable[[], Awaitable[T]], *, done: Callable[[T], bool]
    ) -> T | None:
        """`handle()`'s result, or None when `event_id` was already handled. The event is
        remembered when `done(result)` is true; an exception leaves it unremembered."""
        while (earlier := self._in_flight.get(event_id)) is not None:
            if await asyncio.shield(earlier):
                return None
        finished = asyncio.get_running_loop().create_future()
        self._in_flight[event_id] = finished
        handled = False
        try:
            if await self._store.dedupe_seen(self._platform, self._account_id, event_id):
                handled = True
                return None
            result = await handle()
            if done(result):
                await self._store.dedupe_remember(self._platform, self._account_id, event_id, self._ttl_s)
                handled = True
            return result
        finally:
            del self._in_flight[event_id]
            finished.set_result(handled)
