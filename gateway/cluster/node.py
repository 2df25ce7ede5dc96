"""`ClusterNode`: this daemon as one node of a cluster, from joining to leaving.

Built by `Gateway.start()` when the config is clustered (PostgreSQL and `[cluster] redis_url`),
before the session manager starts. It owns the parts and the tasks that tie them together:

- the node's heartbeat row (`membership`), renewed every `lease_ttl_s / 4`;
- the bus (`bus`): this node's committed events go out once per batch (`published`); remote
  batches come in through the relay (`relay`), which hands them to the local hub in `seq` order
  and fills any hole from the event log (after a Redis restart too: `catch_up`);
- the messages between nodes: `wake` (an input was recorded here for a session another node
  owns), `abort` (a client here aborts a run there), `release` (an operation here needs a
  session that node owns), `changed` (a session list changed), `approval` (a request announced
  or decided); each may arrive twice and is handled so that twice does no harm;
- the sweep (every `min(1 s, lease_ttl_s / 4)`): takes the sessions of dead or departed nodes
  that have a run left open or inputs waiting, and runs this node's inputs a lost wake-up left
  behind (`sessions.placement`).

It is the session manager's `RemoteOwners`. `drain()` (SIGTERM) marks the node draining, so it
takes no more sessions; the manager releases its sessions when its runs have ended; `aclose()`
leaves the cluster.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import TYPE_CHECKING, Any

import structlog

from gateway import __version__
from gateway.background import Background
from gateway.cluster.bus import Bus
from gateway.cluster.membership import Membership, MemberState
from gateway.cluster.relay import Relay, read_since
from sessions import SessionEvent, SessionManager
from sessions.errors import SessionsError
from sessions.ownership import Ownership
from sessions.termination import TerminationReason

if TYPE_CHECKING:
    from gateway.approvals import Approvals
    from gateway.bridge import Bridge
    from gateway.config import GatewayConfig
    from sessions.session_events import EventPublisher

__all__ = ["ClusterNode"]

log = structlog.get_logger("gateway.cluster")


class ClusterNode:
    def __init__(
        self,
        config: GatewayConfig,
        manager: SessionManager,
        *,
        local: EventPublisher,
        bridge: Bridge,
    ) -> None:
        assert config.cluster.redis_url is not None
        self.node_id = config.node_id
        self.ttl_s = config.cluster.lease_ttl_s
        self._manager = manager
        self._bridge = bridge
        database = manager.store.database
        self.ownership = Ownership(database, self.node_id)
        self.membership = Membership(database, node_id=self.node_id, ttl_s=self.ttl_s, info=self._info)
        self.bus = Bus(config.cluster.redis_url, prefix=config.cluster.redis_prefix, node_id=self.node_id)
        store = manager.store
        self.relay = Relay(
            local,
            read_after=lambda session_id, after: store.events.read(session_id, after_seq=after, limit=1000),
            read_since=lambda since_ms: read_since(database, since_ms),
        )
        self.bus.on_events = self.relay.remote
        self.bus.on_message = self._message
        self.bus.on_resubscribed = self.relay.catch_up
        self._background = Background("cluster")
        self._host = socket.gethostname()
        self._approvals: Approvals | None = None
        self._echo = False
        bridge.add_change_listener(self._changed_here)
        self._pending: list[SessionEvent] = []
        self._flush_armed = False
        manager.join_cluster(self.ownership, self)
        assert manager.placement is not None
        manager.placement.before_take = self._caught_up

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Join: the heartbeat row first (a node claims sessions only while it is alive), then
        the bus, then the sweep."""
        await self.membership.join()
        await self.bus.start()
        self._background.spawn(self._sweep_forever(), name="cluster-sweep")
        log.info("joined the cluster", node=self.node_id, lease_ttl_s=self.ttl_s)

    async def drain(self) -> None:
        """Take no more sessions (the manager releases its own once its runs have ended)."""
        try:
            await self.membership.drain()
        except SessionsError as exc:
            log.warning("could not mark this node draining", error=str(exc))

    async def aclose(self) -> None:
        """Leave the cluster: stop the sweep, flush and close the bus, delete the node's row."""
        await self._background.aclose()
        self._flush()
        await self.bus.flush(2.0)
        await self.bus.aclose()
        await self.relay.aclose()
        try:
            await self.membership.leave()
        except SessionsError as exc:
            log.warning("could not leave the cluster cleanly", error=str(exc))
        await self.membership.aclose()

    # --- this node's events out ---------------------------------------------------------------

    def published(self, event: SessionEvent) -> None:
        """A committed event of a session this node owns: to the other nodes, one bus message per
        loop turn (a journal commit publishes all its events in one turn)."""
        self.relay.local(event)
        self._pending.append(event)
        if not self._flush_armed:
            self._flush_armed = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_armed = False
        if self._pending:
            batch, self._pending = self._pending, []
            self.bus.publish_events(batch)

    async def _caught_up(self, session_id: str) -> None:
        """Before this node writes a session it has just taken: its clients get what the
        previous owner committed and the bus did not bring (it died before sending it)."""
        last = self.relay.last_seq(session_id)
        if last is not None:  # else nobody here followed it live; a subscription replays the log
            records = await self._manager.store.events.read(session_id, after_seq=last, limit=100_000)
            if records:
                self.relay.remote(records)
        if self._approvals is not None:
            await self._approvals.cancel_session(session_id)

    def _changed_here(self, session_id: str, reason: str) -> None:
        """A session list change on this node (a run, a patch, a new session): the other nodes'
        session lists follow. One that came from another node is not sent back."""
        if not self._echo:
            self.bus.send("changed", {"sessionId": session_id, "reason": reason})

    # --- RemoteOwners -------------------------------------------------------------------------

    def wake(self, node: str, session_id: str, idempotency_key: str) -> None:
        self.bus.send("wake", {"sessionId": session_id, "key": idempotency_key}, node=node)

    def abort(self, node: str, session_id: str, run_id: str | None, reason: str) -> None:
        self.bus.send("abort", {"sessionId": session_id, "runId": run_id, "reason": reason}, node=node)

    def release(self, node: str, session_id: str) -> None:
        self.bus.send("release", {"sessionId": session_id}, node=node)

    # --- messages from other nodes ------------------------------------------------------------

    def attach_approvals(self, approvals: Approvals) -> None:
        """Approvals across nodes: announcements go to every node's clients, a decision made on
        any node reaches the call waiting on the owner, and a node that takes a session cancels
        the requests its previous owner left pending."""
        self._approvals = approvals
        approvals.clustered = True
        approvals.share = lambda event, payload: self.bus.send(
            "approval", {"event": event, "payload": payload}
        )

    def _message(self, kind: str, body: dict[str, Any], origin: str) -> None:
        if kind == "approval":
            event, payload = body.get("event"), body.get("payload")
            if self._approvals is not None and isinstance(event, str) and isinstance(payload, dict):
                self._background.spawn(self._approvals.remote(event, payload), name="cluster-approval")
            return
        session_id = body.get("sessionId")
        if not isinstance(session_id, str):
            return
        if kind == "wake":
            key = body.get("key")
            placement = self._manager.placement
            if isinstance(key, str) and placement is not None:
                self._background.spawn(placement.wake(session_id, key), name="cluster-wake")
        elif kind == "abort" and self.ownership.owns(session_id):
            run_id = body.get("runId")
            why = TerminationReason.parse(body.get("reason")) or TerminationReason.ABORTED
            self._background.spawn(
                self._manager.abort(
                    session_id, reason=why, run_id=run_id if isinstance(run_id, str) else None
                ),
                name="cluster-abort",
            )
        elif kind == "release":
            placement = self._manager.placement
            if placement is not None:
                placement.release_when_idle(session_id)
                self._background.spawn(placement.sweep_releases(), name="cluster-release")
        elif kind == "changed":
            what = body.get("reason")
            self._echo = True
            try:
                self._bridge.session_changed(session_id, what if isinstance(what, str) else "changed")
            finally:
                self._echo = False
        else:
            log.debug("unknown cluster message", kind=kind, origin=origin)

    # --- the sweep ----------------------------------------------------------------------------

    async def _sweep_forever(self) -> None:
        period = min(1.0, self.ttl_s / 4)
        failing = False
        while True:
            await asyncio.sleep(period)
            placement = self._manager.placement
            if placement is None:
                continue
            if not self.membership.alive:
                await self._rejoin()
                continue
            try:
                await placement.sweep()
            except SessionsError as exc:
                if not failing:
                    log.warning("the cluster sweep failed; retrying", error=str(exc))
                failing = True
            else:
                failing = False

    async def _rejoin(self) -> None:
        """Join again after the membership was lost (the database or the network was away past
        the lease). What this node held meanwhile may be another's: its writes are fenced."""
        if self.membership.state != MemberState.LOST:
            return
        try:
            await self.membership.join()
        except SessionsError as exc:
            log.warning("cannot rejoin the cluster yet", error=str(exc))
        else:
            log.info("rejoined the cluster", node=self.node_id)

    def _info(self) -> dict[str, Any]:
        """What the heartbeat reports of this node (`cluster.status`)."""
        return {
            "host": self._host,
            "pid": os.getpid(),
            "version": __version__,
            "runs": self._manager.running_count(),
            "liveSessions": self._manager.live_count(),
            "sessionsOwned": len(self.ownership),
            "bus": {"connected": self.bus.connected},
        }
