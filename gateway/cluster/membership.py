"""`Membership`: this node's row in `cluster_nodes`, kept alive by a heartbeat.

A node is a member while its row has not expired. Every time in the row is the database's clock
(Unix ms), never a node's, so nodes whose clocks disagree still agree on who is alive.

Life of a membership (`MemberState`):

- `join()` writes the row (running, `started_at` = now, `expires_at` = now + ttl) and starts the
  heartbeat. A row left by an earlier process with the same node id is taken over: the same id is
  the same node. `started_at` names this incarnation; every later write of this object matches
  on it, so a process that paused while its successor joined under its id cannot write again.
- The heartbeat renews `heartbeat_at`, `expires_at` and `info` every ttl/4 (at least 0.25 s),
  only while the row is still this incarnation's and has not expired. A failed renewal is
  retried; the failure is logged once, and so is the recovery.
- `alive` turns false once the last successful renewal was *sent* more than ttl ago (on the
  local monotonic clock). The database received it later than it was sent, so the node gives up
  no later than the others see its row expire. From then on the node must assume it lost every
  session and lease it held: the membership is `lost` for good (`lost_at`, `on_lost` called
  once) and the heartbeat stops. The owner may `join()` again as a new incarnation.
- `drain()` marks the row draining (others take no new work to it); `leave()` deletes the row
  at the end of a graceful stop. Both are idempotent.

The heartbeat task belongs to this object and ends with `leave()` or `aclose()`. Cluster mode
runs on PostgreSQL only. Database errors leave as `sessions.errors` exceptions.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import structlog
from sqlalchemy import ColumnElement, delete, func, literal, select, update

from gateway.background import Background
from sessions.db import Database
from sessions.errors import SessionsError
from sessions.ownership import db_now
from sessions.schema import cluster_nodes, leases
from sessions.schema import sessions as sessions_table

if TYPE_CHECKING:
    pass

__all__ = [
    "Holdings",
    "MemberState",
    "Membership",
    "NodeRow",
    "NodeState",
    "holdings",
]

log = structlog.get_logger("gateway.cluster.membership")

_t = cluster_nodes
MIN_INTERVAL_S = 0.25
"""The heartbeat never runs more often than this, whatever the ttl."""


class NodeState(StrEnum):
    """A node's row: `running` takes work, `draining` finishes what it has and takes no more."""

    RUNNING = "running"
    DRAINING = "draining"


class MemberState(StrEnum):
    """This object's side of the row."""

    OUTSIDE = "outside"
    """Not joined yet, or left."""
    RUNNING = "running"
    DRAINING = "draining"
    LOST = "lost"
    """The row could not be renewed within the ttl, or another process took it: everything this
    node held belongs to the others now."""
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One node as the database sees it, at the database's `now`."""

    node_id: str
    state: NodeState
    started_at: int
    heartbeat_age_ms: int
    expires_at: int
    alive: bool
    """Its row has not expired."""
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Holdings:
    """What the nodes hold: sessions per owner node, lease names per holder."""

    sessions: dict[str, int]
    unowned: int
    """Sessions no node holds (never owned, or released)."""
    leases: dict[str, list[str]]


class Membership:
    """This node's membership. Call `join()` to start; end with `leave()` (graceful) and/or
    `aclose()`. Also an async context manager (joins on entry, closes on exit)."""

    def __init__(
        self,
        database: Database,
        *,
        node_id: str,
        ttl_s: float,
        info: Callable[[], dict[str, Any]],
        on_lost: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`info` is called at each heartbeat; what it returns is stored as the row's JSON.
        `on_lost` is called once when the membership is lost. `clock` is monotonic seconds.
        Raises ValueError when the database is not PostgreSQL."""
        if database.backend != "postgresql":
            raise ValueError("cluster membership needs PostgreSQL")
        self._db = database
        self.node_id = node_id
        self.ttl_s = ttl_s
        self.interval_s = max(ttl_s / 4, MIN_INTERVAL_S)
        self._info = info
        self.on_lost = on_lost
        self._clock = clock
        self.state = MemberState.OUTSIDE
        self.started_at: int | None = None
        """This incarnation's `started_at` (database ms), from `join()` on."""
        self.lost_at: int | None = None
        """Unix ms (this machine's clock) when the membership was lost, else None."""
        self.last_nodes: Sequence[NodeRow] = ()
        """Every node as of the last heartbeat (what `health` reports without a query)."""
        self._renewed_at = float("-inf")  # when the last successful renewal was sent
        self._failing = False
        self._tasks = Background("cluster membership")
        self._beating: asyncio.Task[Any] | None = None

    async def __aenter__(self) -> Membership:
        await self.join()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- state ----------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """Whether this node may still act on what it holds: joined, and the last successful
        renewal was sent less than ttl ago."""
        live = self.state in (MemberState.RUNNING, MemberState.DRAINING)
        return live and self._clock() - self._renewed_at < self.ttl_s

    def alive_count(self) -> int:
        """Nodes alive as of the last heartbeat (this one counted while it is alive)."""
        others = sum(1 for node in self.last_nodes if node.alive and node.node_id != self.node_id)
        return others + (1 if self.alive else 0)

    # --- transitions ----------------------------------------------------------------------------

    async def join(self) -> None:
        """Write this node's row and start the heartbeat. Allowed when outside or lost (a new
        incarnation); raises RuntimeError otherwise, SessionsError when the database fails."""
        if self.state not in (MemberState.OUTSIDE, MemberState.LOST):
            raise RuntimeError(f"join: expected outside or lost, the membership is {self.state}")
        clock = select(db_now().label("ms")).subquery("clock")
        rows = select(
            literal(self.node_id),
            literal(NodeState.RUNNING.value),
            clock.c.ms,
            clock.c.ms,
            clock.c.ms + int(self.ttl_s * 1000),
            literal(self._info_json()),
        )
        insert = self._db.insert(_t).from_select(
            ["node_id", "state", "started_at", "heartbeat_at", "expires_at", "info"], rows
        )
        statement = insert.on_conflict_do_update(
            index_elements=[_t.c.node_id],
            set_={
                **{name: insert.excluded[name] for name in ("state", "heartbeat_at", "expires_at", "info")},
                # Always a new value: an incarnation that joined in the same millisecond is fenced too.
                "started_at": func.greatest(insert.excluded.started_at, _t.c.started_at + 1),
            },
        ).returning(_t.c.started_at)
        sent = self._clock()
        async with self._db.write() as conn:
            self.started_at = int((await conn.execute(statement)).scalar_one())
        self._renewed_at = sent
        self.state = MemberState.RUNNING
        self.lost_at = None
        self._failing = False
        log.info("joined the cluster", node=self.node_id, ttl_s=self.ttl_s)
        self._beating = self._tasks.spawn(self._heartbeat(), name=f"heartbeat {self.node_id}")

    async def renew(self) -> bool:
        """Renew the row once; False when it is no longer this incarnation's or has expired (the
        caller must treat the membership as lost). Raises SessionsError when the database fails."""
        if self.state not in (MemberState.RUNNING, MemberState.DRAINING):
            return False
        clock = select(db_now().label("ms")).subquery("clock")
        statement = (
            update(_t)
            .where(*self._mine(), _t.c.expires_at > clock.c.ms)
            .values(
                heartbeat_at=clock.c.ms,
                expires_at=clock.c.ms + int(self.ttl_s * 1000),
                info=self._info_json(),
            )
        )
        sent = self._clock()
        async with self._db.write() as conn:
            renewed = (await conn.execute(statement)).rowcount == 1
        if renewed:
            self._renewed_at = sent
        return renewed

    async def drain(self) -> None:
        """Mark the row draining. Idempotent; nothing happens unless the node is running."""
        if self.state is not MemberState.RUNNING:
            return
        async with self._db.write() as conn:
            await conn.execute(update(_t).where(*self._mine()).values(state=NodeState.DRAINING.value))
        self.state = MemberState.DRAINING

    async def leave(self) -> None:
        """Stop the heartbeat and delete the row (the end of a graceful stop): the others may
        take what this node held at once. Idempotent; a row another process took over is left
        alone."""
        await self._stop_heartbeat()
        if self.started_at is not None and self.state is not MemberState.OUTSIDE:
            async with self._db.write() as conn:
                await conn.execute(delete(_t).where(*self._mine()))
            log.info("left the cluster", node=self.node_id)
        if self.state is not MemberState.CLOSED:
            self.state = MemberState.OUTSIDE

    async def aclose(self) -> None:
        """Stop the heartbeat; the row stays until it expires (call `leave()` first on a graceful
        stop). Idempotent."""
        await self._stop_heartbeat()
        self.state = MemberState.CLOSED

    # --- reads ----------------------------------------------------------------------------------

    async def nodes(self) -> list[NodeRow]:
        """Every node's row, by node id, with ages and liveness at the database's now."""
        now = select(db_now()).scalar_subquery().label("now")
        async with self._db.read() as conn:
            rows = (await conn.execute(select(_t, now).order_by(_t.c.node_id))).all()
        return [_node_row(row._mapping) for row in rows]

    async def db_now_ms(self) -> int:
        """The database's clock, Unix ms."""
        async with self._db.read() as conn:
            return int((await conn.execute(select(db_now()))).scalar_one())

    # --- the heartbeat --------------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        while True:
            left = self._renewed_at + self.ttl_s - self._clock()
            await asyncio.sleep(max(0.0, min(self.interval_s, left)))
            left = self._renewed_at + self.ttl_s - self._clock()
            if left <= 0:
                self._lose("no heartbeat reached the database within the ttl")
                return
            try:
                async with asyncio.timeout(left):
                    renewed = await self.renew()
                    if renewed:
                        self.last_nodes = await self.nodes()
            except (SessionsError, TimeoutError) as exc:
                if not self._failing:
                    log.warning("heartbeat failed; retrying", node=self.node_id, error=str(exc) or repr(exc))
                self._failing = True
                continue
            if not renewed:
                self._lose("the row expired or another process took it over")
                return
            if self._failing:
                log.info("heartbeat restored", node=self.node_id)
            self._failing = False

    def _lose(self, why: str) -> None:
        self.state = MemberState.LOST
        self.lost_at = int(time.time() * 1000)
        self._beating = None
        log.error("lost cluster membership", node=self.node_id, reason=why)
        if self.on_lost is not None:
            try:
                self.on_lost()
            except Exception:
                log.exception("on_lost failed", node=self.node_id)

    async def _stop_heartbeat(self) -> None:
        beating, self._beating = self._beating, None
        if beating is not None:
            beating.cancel()
        await self._tasks.aclose()

    def _mine(self) -> tuple[ColumnElement[bool], ...]:
        """This incarnation's row."""
        return (_t.c.node_id == self.node_id, _t.c.started_at == self.started_at)

    def _info_json(self) -> str:
        try:
            info = self._info()
        except Exception:
            log.exception("node info failed", node=self.node_id)
            info = {}
        return json.dumps(info, separators=(",", ":"), ensure_ascii=False, default=str)


async def holdings(database: Database) -> Holdings:
    """Sessions per owner node and lease names per holder, in one read transaction."""
    owned = select(sessions_table.c.owner_node, func.count()).group_by(sessions_table.c.owner_node)
    held = select(leases.c.holder, leases.c.name).where(leases.c.holder.is_not(None)).order_by(leases.c.name)
    async with database.read() as conn:
        counts = (await conn.execute(owned)).all()
        lease_rows = (await conn.execute(held)).all()
    by_node = {str(node): int(count) for node, count in counts if node is not None}
    unowned = sum(int(count) for node, count in counts if node is None)
    by_holder: dict[str, list[str]] = {}
    for holder, name in lease_rows:
        by_holder.setdefault(str(holder), []).append(str(name))
    return Holdings(sessions=by_node, unowned=unowned, leases=by_holder)


def _node_row(row: Any) -> NodeRow:
    now = int(row["now"])
    try:
        info = json.loads(row["info"]) if row["info"] else {}
    except ValueError:
        info = {}
    return NodeRow(
        node_id=row["node_id"],
        state=NodeState(row["state"]),
        started_at=int(row["started_at"]),
        heartbeat_age_ms=max(0, now - int(row["heartbeat_at"])),
        expires_at=int(row["expires_at"]),
        alive=int(row["expires_at"]) > now,
        info=info if isinstance(info, dict) else {},
    )
