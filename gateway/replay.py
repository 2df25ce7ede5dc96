"""Resume replays: the stored events a client asked for, sent as fast as it reads them.

`sessions.events.subscribe {afterSeq}` answers first, then the hub replays the stored events in
(`afterSeq`, `lastSeq`] to that connection while the session's live events are held back
(`Outlet.hold`). Each stored event is queued only when the connection's send buffer has room for
it, so a backlog larger than `max_buffered_bytes` is paced by the client's reading instead of
being dropped or closing the connection: these events are the exact continuation the answer
promised, so none may be dropped. When the replay ends, the held live events it did not cover
follow, then live events flow (`Outlet.release`).

A replay lives until it ends, a newer subscription to the session or an unsubscribe replaces it,
or the connection closes. A failed read of the stored events closes the connection with 1013 so
the client resumes again: a gap is not allowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import structlog

from gateway.protocol.codes import CloseCode
from gateway.protocol.frames import EventTemplate

log = structlog.get_logger("gateway.replay")


class EventPages(Protocol):
    """Where a replay reads stored events (the event log, rendered as native frames)."""

    async def after(self, seq: int) -> Sequence[tuple[int, EventTemplate]]:
        """The next stored events after `seq`, oldest first, as `(sessionSeq, frame)`; empty
        when there are none. May raise: the replay then fails."""
        ...


class ReplayTarget(Protocol):
    """The connection a replay writes to, bound to the subscription it serves."""

    conn_id: str
    session_id: str

    async def wait_for_room(self, size: int) -> bool:
        """Wait until `size` bytes fit in the send buffer; False when the subscription was
        replaced or the connection closed (the replay then stops)."""
        ...

    def send(self, frame: EventTemplate) -> None: ...

    def release(self, delivered: int) -> None:
        """The replay delivered up to `delivered`: let the held and live events through."""
        ...

    def fail(self, code: int, reason: str) -> None:
        """Close the connection."""
        ...


async def run_replay(target: ReplayTarget, pages: EventPages, *, after: int, until: int) -> None:
    """Send the stored events in (`after`, `until`] to `target`, then release its hold."""
    delivered = after
    try:
        while delivered < until:
            page = [(seq, frame) for seq, frame in await pages.after(delivered) if delivered < seq <= until]
            if not page:
                break  # the log ends before `until` (pruned meanwhile): what there was is sent
            for seq, frame in page:
                if not await target.wait_for_room(frame.byte_size(0)):
                    return
                target.send(frame)
                delivered = seq
    except Exception:
        log.exception(
            "resume replay failed; closing so the client resumes",
            conn_id=target.conn_id,
            session_id=target.session_id,
            delivered=delivered,
        )
        target.fail(CloseCode.TRY_AGAIN_LATER, "replay failed; resume again")
        return
    target.release(delivered)
