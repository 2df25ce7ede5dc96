"""What a scrape reads from the running gateway: gauges, and counters other objects already keep.

Each `Reading` is a family and a function that returns its samples at the moment of the scrape
(a collect callback), so the hot paths count nothing twice: the hub already counts deliveries and
slow-consumer closes, the bridge publications, the journal its queue. The outbox is in the
database: `refresh()` reads it before a scrape renders (`outbox_pending`).
"""

from __future__ import annotations

import asyncio
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Literal

import msgspec
import structlog

from gateway.telemetry.instruments import Family, Labels

if TYPE_CHECKING:
    from gateway.state import GatewayState

log = structlog.get_logger("gateway.telemetry")

Samples = Iterable[tuple[Labels, float]]
OutboxCounts = Callable[[], Awaitable[dict[str, int]]]
"""Outbox messages not yet delivered, per channel (`discord`, `slack`)."""
REFRESH_TIMEOUT_S = 2.0


class Reading(msgspec.Struct, frozen=True):
    family: Family
    read: Callable[[], Samples]
    kind: Literal["gauge", "counter"] = "gauge"


class Outbox(msgspec.Struct):
    """The outbox's pending messages as last read (`refresh`)."""

    counts: OutboxCounts | None = None
    last: dict[str, int] = msgspec.field(default_factory=dict)

    async def refresh(self) -> None:
        """Read the outbox again; on failure (or after 2 s) the last counts stay."""
        if self.counts is None:
            return
        try:
            self.last = await asyncio.wait_for(self.counts(), REFRESH_TIMEOUT_S)
        except Exception as exc:
            log.warning("could not read the outbox for metrics", error=str(exc) or type(exc).__name__)


def role_of(scopes: frozenset[str]) -> str:
    """A connection's role by its strongest operator scope: admin, write, read, or none."""
    for scope in ("admin", "write", "read"):
        if f"operator.{scope}" in scopes:
            return scope
    return "none"


def state_readings(state: GatewayState, outbox: Outbox) -> list[Reading]:
    """The readings of a running gateway."""
    hub, manager = state.hub, state.manager

    def one(value: float) -> Samples:
        return [((), float(value))]

    def connections() -> Samples:
        roles = Tally(role_of(outlet.scopes) for outlet in list(hub.outlets.values()))
        return [((role,), float(roles.get(role, 0))) for role in ("admin", "write", "read", "none")]

    def queued_bytes() -> Samples:
        buffered, held = hub.queued_bytes()
        return [(("buffered",), float(buffered)), (("held",), float(held))]

    def lanes() -> Samples:
        depths = manager.lanes.depths()
        return [(("operations",), float(sum(depths.values()))), (("sessions",), float(len(depths)))]

    def inputs_queued() -> Samples:
        return one(sum(manager.queue_depths().values()))

    def run_slots() -> Samples:
        limiter = manager.limiter
        return [(("active",), float(limiter.active)), (("waiting",), float(limiter.waiting))]

    return [
        Reading(
            Family("gateway_events_published", "Session events committed here and published.", ()),
            lambda: one(state.bridge.published),
            "counter",
        ),
        Reading(
            Family("gateway_events_delivered", "Native session events queued to followers.", ()),
            lambda: one(hub.delivered),
            "counter",
        ),
        Reading(
            Family("gateway_slow_consumer_closes", "Connections closed as slow consumers.", ()),
            lambda: one(hub.slow_consumers),
            "counter",
        ),
        Reading(
            Family("gateway_fanout_queued_bytes", "Bytes waiting in connections' send buffers.", ("kind",)),
            queued_bytes,
        ),
        Reading(Family("gateway_connections", "Open connections, by role.", ("role",)), connections),
        Reading(
            Family("gateway_journal_pending_items", "Journal items waiting for a commit.", ()),
            lambda: one(manager.journal.pending),
        ),
        Reading(
            Family(
                "gateway_lane_depth",
                "Operations running or queued on session lanes, and the sessions that have any.",
                ("unit",),
            ),
            lanes,
        ),
        Reading(
            Family("gateway_inputs_queued", "Messages and operations waiting in sessions' queues.", ()),
            inputs_queued,
        ),
        Reading(
            Family("gateway_run_slots", "Global run limiter slots, active and waiting.", ("state",)),
            run_slots,
        ),
        Reading(
            Family("gateway_runs_in_flight", "Runs in progress.", ()), lambda: one(manager.running_count())
        ),
        Reading(
            Family("gateway_live_sessions", "Sessions held in memory.", ()), lambda: one(manager.live_count())
        ),
        Reading(
            Family(
                "gateway_channel_outbox_pending",
                "Chat replies in the outbox not yet delivered.",
                ("channel",),
            ),
            lambda: [((channel,), float(n)) for channel, n in sorted(outbox.last.items())],
        ),
    ]
