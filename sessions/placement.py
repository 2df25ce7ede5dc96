"""Where a session's inputs run in a cluster: on the node that owns the session.

`Placement` is the session manager's part that only a clustered node has (`sessions.ownership`
holds the tokens; the gateway carries the messages between nodes, `RemoteOwners`):

- an input is recorded in the ledger by whichever node received it (before its sender is
  answered, as on one node). Then `route` says where it runs: here when this node owns the
  session or takes it now (nobody owns it, or its owner died: the node that receives the first
  input places the session), else on the live owner, which the gateway wakes (`wake` there);
- taking a session over closes what the previous owner left open (`recover_session`: the run it
  was streaming becomes interrupted, as after a crash of one node) and runs the inputs that were
  waiting, once;
- `sweep` (every second or so) takes the sessions of dead or departed nodes that have a run left
  open or inputs waiting, and runs this node's own waiting inputs that a lost wake-up left
  behind;
- `lost` forgets a session another node took (a fenced commit): its live state is dropped and
  its run, if any, is aborted without writing anything more.

An input is dispatched at most once per node: each key is reserved before it is recorded or
dispatched (`reserve`), and every path (the receiving call, a wake-up, a takeover, a sweep)
checks the reservation first. Across nodes, the ledger's single owner per session does the rest.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog

from agent_core import parse_message
from sessions.errors import SessionsError, Unavailable
from sessions.input_ledger import WAITING_INPUT_STATUSES
from sessions.input_message import as_input
from sessions.journal import Journal
from sessions.lane import LaneRegistry
from sessions.live_cache import LiveSessions
from sessions.ownership import Ownership
from sessions.queueing import QueueModes
from sessions.records import InputRecord
from sessions.recovery import recover_session
from sessions.runs import Runs
from sessions.schema import InputStatus
from sessions.session_events import open_reply
from sessions.store import Store
from sessions.termination import TerminationReason

__all__ = ["Placement", "RemoteOwners"]

log = structlog.get_logger("sessions.placement")

WAKE_GRACE_MS = 2000
"""A sweep leaves inputs younger than this to the wake-up that was sent for them."""
ACQUIRE_TIMEOUT_S = 30.0
"""How long an operation on another node's session waits for that node to let it go."""
RELEASE_UNUSED_S = 1800.0
"""A session no one here has asked about for this long is given back (`_release_unused`)."""
IN_FLIGHT_EVENTS = 5000
"""How far back the log is read for the text of a run streaming on another node."""
RESERVATION_TTL_S = 600.0
"""A reservation older than this whose input no longer waits is forgotten."""


class RemoteOwners(Protocol):
    """How this node reaches the owner of a session it does not own (the gateway's bus)."""

    def wake(self, node: str, session_id: str, idempotency_key: str) -> None: ...

    def abort(self, node: str, session_id: str, run_id: str | None, reason: str) -> None: ...

    def release(self, node: str, session_id: str) -> None: ...


class Placement:
    def __init__(
        self,
        store: Store,
        journal: Journal,
        ownership: Ownership,
        *,
        lives: LiveSessions,
        runs: Runs,
        queue: QueueModes,
        lanes: LaneRegistry,
        default_mode: Callable[[str], Awaitable[str]],
        remote: RemoteOwners,
    ) -> None:
        self._store = store
        self._journal = journal
        self.ownership = ownership
        self._lives = lives
        self._runs = runs
        self._queue = queue
        self._lanes = lanes
        self._default_mode = default_mode
        self.remote = remote
        self._reserved: dict[str, float] = {}
        self._to_release: set[str] = set()
        self.release_unused_s = RELEASE_UNUSED_S
        self._taking: dict[str, tuple[asyncio.Lock, int]] = {}
        """Per session being taken: its lock and how many callers use it."""
        self.before_take: Callable[[str], Awaitable[None]] | None = None
        """Awaited when this node takes a session, before it writes anything of it: the gateway
        hands its clients the previous owner's last events (those it committed and had no time
        to send), so the new owner's events follow them without a hole."""

    # --- reservations -------------------------------------------------------------------------

    def reserve(self, key: str) -> bool:
        """Reserve `key` for dispatch here; False when it already is (dispatched or about to be)."""
        if key in self._reserved:
            return False
        self._reserved[key] = time.monotonic()
        return True

    def unreserve(self, key: str) -> None:
        self._reserved.pop(key, None)

    # --- where inputs run ---------------------------------------------------------------------

    async def route(self, session_id: str) -> str | None:
        """None when the session's inputs run here (owned, or taken now), else the live owner's
        node id."""
        for _ in range(3):
            if await self._take(session_id):
                return None
            owner = await self.ownership.owner(session_id)
            if owner.node is not None and owner.alive and owner.node != self.ownership.node_id:
                return owner.node
        raise Unavailable(f"session {session_id} is changing hands; try again", retry_after_ms=500)

    async def acquire(self, session_id: str, timeout_s: float = ACQUIRE_TIMEOUT_S) -> None:
        """Make this node the session's owner, for an operation that changes its history here
        (compact, inject, branch, reset, delete): take it when it is free, else ask its owner to
        let it go once it is idle (after its current run and queue). Raise Unavailable when that
        takes longer than `timeout_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        asked_at = -math.inf
        while True:
            if await self._take(session_id):
                return
            owner = await self.ownership.owner(session_id)
            now = loop.time()
            if now >= deadline:
                raise Unavailable(
                    f"session {session_id} is busy on node {owner.node}; try again", retry_after_ms=1000
                )
            if owner.node is not None and owner.alive and now - asked_at >= 1.0:
                self.remote.release(owner.node, session_id)
                asked_at = now
            await asyncio.sleep(0.05)

    async def _release_unused(self) -> None:
        """A session nothing here has asked about for a long while goes back to nobody: the node
        that gets its next input takes it (so sessions spread over the nodes as they come back,
        and a node holds tokens only for the sessions it serves)."""
        unused = [
            session_id
            for session_id in self.ownership.unused(self.release_unused_s)
            if self._lives.get(session_id) is None
            and session_id not in self._taking
            and session_id not in self._to_release
            and not self._lanes.depth(session_id)
        ]
        if unused:
            released = await self.ownership.release(unused)
            log.info("sessions unused here given back", count=len(released))

    def release_when_idle(self, session_id: str) -> None:
        """Another node asks for the session: give it up as soon as nothing of it is running or
        waiting here (now, or at a later sweep)."""
        if self.ownership.owns(session_id):
            self._to_release.add(session_id)

    async def sweep_releases(self) -> None:
        """Hand over the sessions asked for that are idle now (the sweep does it later for the
        others)."""
        await self._release_idle()

    async def _release_idle(self) -> None:
        for session_id in list(self._to_release):
            live = self._lives.get(session_id)
            if live is not None and (live.busy or self._lanes.depth(session_id)):
                continue
            self._to_release.discard(session_id)
            if live is not None:
                self._lives.forget(live)
            await self.ownership.release([session_id])
            log.info("session handed to another node", session_id=session_id)

    async def _take(self, session_id: str) -> bool:
        """True when this node owns the session afterwards: it did, or it took it now (and closed
        what the previous owner left). One take at a time per session: the receiving call, the
        sweep and an operation that needs the session never take it twice."""
        lock, users = self._taking.get(session_id) or (asyncio.Lock(), 0)
        self._taking[session_id] = (lock, users + 1)
        try:
            async with lock:
                if self.ownership.owns(session_id):
                    return True
                if await self.ownership.claim(session_id) is None:
                    return False
                await self.took_over(session_id)
                return True
        finally:
            lock, users = self._taking[session_id]
            if users == 1:
                del self._taking[session_id]
            else:
                self._taking[session_id] = (lock, users - 1)

    async def took_over(self, session_id: str) -> None:
        """Close what the previous owner left open and run the inputs waiting for the session
        (except those this node is dispatching already)."""
        live = self._lives.get(session_id)
        if live is not None:
            self._lives.forget(live)  # counters from an earlier ownership must not be reused
        if self.before_take is not None:
            await self.before_take(session_id)
        waiting = await recover_session(self._store, self._journal, session_id)
        mine = [record for record in waiting if self.reserve(record.idempotency_key)]
        if mine:
            log.info("running inputs of a session taken over", session_id=session_id, count=len(mine))
            await self._runs.resume(session_id, mine)

    async def wake(self, session_id: str, idempotency_key: str) -> None:
        """Another node recorded an input for a session of this node: run it (once)."""
        if not self.ownership.owns(session_id):
            return  # not ours (any more): the sweep of whichever node owns it finds it
        record = await self._store.inputs.get(idempotency_key)
        if record is None or record.status is not InputStatus.QUEUED:
            return
        await self._dispatch(record)

    async def _dispatch(self, record: InputRecord) -> None:
        if not self.reserve(record.idempotency_key):
            return
        self.ownership.owns(record.session_id)  # a use: not given back while it dispatches
        try:
            live = await self._lives.load(record.session_id)
            mode = record.queue_mode or await self._default_mode(record.session_id)
            message = as_input(parse_message(record.payload), record.idempotency_key)
            await self._queue.dispatch(live, message, mode)
        except BaseException:
            self.unreserve(record.idempotency_key)
            raise

    async def sweep(self) -> None:
        """Take orphaned sessions that have something to do, run this node's own waiting inputs
        that no wake-up brought, hand over the sessions other nodes asked for once idle, and
        give back those unused here for `release_unused_s`."""
        await self._release_idle()
        await self._release_unused()
        for session_id in await self.ownership.orphans(WAKE_GRACE_MS):
            try:
                await self._take(session_id)
            except SessionsError as exc:
                log.warning("could not take over a session", session_id=session_id, error=str(exc))
        started = time.monotonic()
        waiting = await self.ownership.waiting_inputs(WAKE_GRACE_MS)
        still = {key for key, _ in waiting}
        for key, _session_id in waiting:
            if key in self._reserved:
                continue
            record = await self._store.inputs.get(key)
            if record is not None and record.status in WAITING_INPUT_STATUSES:
                log.info("running an input no wake-up brought", session_id=record.session_id, key=key)
                await self._dispatch(record)
        for key, at in list(self._reserved.items()):
            if started - at > RESERVATION_TTL_S and key not in still:
                del self._reserved[key]

    async def abort_remote(self, session_id: str, reason: TerminationReason, run_id: str | None) -> list[str]:
        """Ask the session's live owner to abort its run (`run_id` only, when given); the ids of
        the runs recorded as running that were asked."""
        owner = await self.ownership.owner(session_id)
        running = [r.id for r in await self._store.runs.running(session_id) if run_id in (None, r.id)]
        if running and owner.node is not None and owner.alive:
            self.remote.abort(owner.node, session_id, run_id, reason.value)
            return running
        return []

    async def in_flight(self, session_id: str) -> dict[str, Any] | None:
        """The run another node is streaming for the session and its text so far, read from the
        event log (`SessionManager.in_flight` answers for this node's own runs)."""
        if self.ownership.owns(session_id):
            return None
        running = await self._store.runs.running(session_id)
        if not running:
            return None
        run_id = running[-1].id
        last = await self._store.events.last_seq(session_id)
        recent = await self._store.events.read(
            session_id, after_seq=max(0, last - IN_FLIGHT_EVENTS), limit=IN_FLIGHT_EVENTS
        )
        text, _ = open_reply(event for event in recent if event.run_id == run_id)
        return {"runId": run_id, "text": text}

    def lost(self, session_id: str) -> None:
        """Another node took the session: drop what this node holds of it."""
        self.ownership.lost(session_id)
        live = self._lives.get(session_id)
        if live is None:
            return
        if live.run is not None:
            # Its writes are refused from now on; the new owner closes the run.
            live.abort(TerminationReason.INTERRUPTED)
        self._lives.forget(live)
