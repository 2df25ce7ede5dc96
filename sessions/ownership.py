"""Which node of a cluster owns each session, and the fencing token that guards its writes.

A session's lane (its runs and its `seq` counter) lives on one node at a time. The session's row
says which (`owner_node`) and carries a fencing token (`owner_token`) raised by one each time a
node takes the session. A node owns a session while its own row in `cluster_nodes` has not
expired (the node renews it with each heartbeat, `gateway.cluster.membership`); once it has, any
other node may take the session.

Every group commit (`sessions._group_commit.apply`: the session's events, entries, status and
the run records written with them) reads the session rows it writes under a row lock and
refuses the whole batch (`Fenced`) unless each session's row names this node with the token this
node took it with. A takeover updates that same row, so it waits for a commit in progress and
every later commit of the node that lost the session fails: a node that was paused or cut off
past its lease can never write after its successor.

All times are the database's clock, so the nodes' clocks never matter. PostgreSQL only (one node
on SQLite has no owner and no fence).
"""

from __future__ import annotations

import time

import msgspec
import structlog
from sqlalchemy import BigInteger, ColumnElement, literal_column

from sessions._direct_write import DirectWrite
from sessions.db import Database
from sessions.errors import Fenced

__all__ = ["DB_NOW_MS", "Ownership", "SessionOwner", "db_now"]

log = structlog.get_logger("sessions.ownership")

CLAIM_LOCK_TIMEOUT_MS = 500
"""How long a claim waits for a session row another transaction holds."""
DB_NOW_MS = "(extract(epoch from clock_timestamp()) * 1000)::bigint"
"""The database's clock in Unix milliseconds (PostgreSQL; `clock_timestamp()`: the time the
statement reads it, not the start of its transaction). Every lease of the cluster uses it."""


def db_now() -> ColumnElement[int]:
    """`DB_NOW_MS` as a SQLAlchemy expression."""
    return literal_column(DB_NOW_MS, BigInteger)


_ALIVE = f"EXISTS (SELECT 1 FROM cluster_nodes n WHERE n.node_id = {{node}} AND n.expires_at > {DB_NOW_MS})"

_CLAIM_SQL = (
    "UPDATE sessions SET owner_node = ?, owner_token = owner_token + 1 WHERE id = ? "
    "AND (owner_node IS NULL OR owner_node = ? OR NOT " + _ALIVE.format(node="sessions.owner_node") + ") "
    # A node claims only while it is alive and not draining itself.
    "AND EXISTS (SELECT 1 FROM cluster_nodes m WHERE m.node_id = ? AND m.state = 'running' "
    f"AND m.expires_at > {DB_NOW_MS}) "
    "RETURNING owner_token"
)
_OWNER_SQL = "SELECT owner_node, " + _ALIVE.format(node="s.owner_node") + " FROM sessions s WHERE s.id = ?"
_RELEASE_SQL = "UPDATE sessions SET owner_node = NULL WHERE id = ? AND owner_node = ? AND owner_token = ?"
# Sessions that need a node: no owner, or one that is dead (or this node's previous life), and
# something to do: a run left open or inputs waiting.
# A session nobody owns yet is left to the node that received its first input for a grace
# period (that node takes it as it dispatches the input).
_ORPHANS_SQL = (
    "SELECT s.id FROM sessions s WHERE (s.owner_node IS NULL OR s.owner_node = ? OR NOT "
    + _ALIVE.format(node="s.owner_node")
    + ") AND (EXISTS (SELECT 1 FROM runs r WHERE r.session_id = s.id AND r.status = 'running') "
    "OR EXISTS (SELECT 1 FROM inputs i WHERE i.session_id = s.id "
    "AND i.status IN ('queued', 'steered', 'followup', 'running') "
    f"AND (s.owner_node IS NOT NULL OR i.created_at < {DB_NOW_MS} - ?))) "
    "LIMIT ?"
)
_WAITING_SQL = (
    "SELECT i.idempotency_key, i.session_id FROM inputs i JOIN sessions s ON s.id = i.session_id "
    f"WHERE s.owner_node = ? AND i.status = 'queued' AND i.created_at < {DB_NOW_MS} - ? ORDER BY i.seq"
)


class SessionOwner(msgspec.Struct, frozen=True):
    """Who owns a session: the node (None: nobody) and whether that node is alive."""

    node: str | None
    alive: bool


class Ownership:
    """This node's sessions and their fencing tokens. `token_of` is what the group commit checks
    (`Database.fence`); `claim` takes a session, `lost` forgets one another node took, `release`
    gives them back on a graceful stop."""

    def __init__(self, database: Database, node_id: str) -> None:
        self._db = database
        self.node_id = node_id
        self._tokens: dict[str, int] = {}
        self._used: dict[str, float] = {}
        """When each owned session was last asked about (monotonic seconds)."""

    def __len__(self) -> int:
        return len(self._tokens)

    def owns(self, session_id: str) -> bool:
        """Whether this node owns the session (asking counts as a use: `unused`)."""
        if session_id in self._tokens:
            self._used[session_id] = time.monotonic()
            return True
        return False

    def token_of(self, session_id: str) -> int | None:
        return self._tokens.get(session_id)

    def check(self, session_id: str, owner: str | None, token: int) -> None:
        """Raise Fenced unless the session's row (`owner`, `token`, read under the commit's row
        lock) is this node's with the token it took the session with."""
        mine = self._tokens.get(session_id)
        if owner != self.node_id or mine != token:
            if mine is not None:
                self.lost(session_id)
                log.warning("session taken over by another node", session_id=session_id, owner=owner)
            raise Fenced(session_id, owner)

    async def owner(self, session_id: str) -> SessionOwner:
        """The session's owner as the database has it now."""

        async def read(tx: DirectWrite) -> SessionOwner:
            found = await tx.fetch(_OWNER_SQL, [session_id])
            if not found:
                return SessionOwner(None, False)
            node, alive = found[0]
            return SessionOwner(node, bool(alive))

        return await self._db.read_direct(read)

    async def claim(self, session_id: str) -> int | None:
        """Take the session when nobody owns it, its owner is dead, or it is this node's from
        before a restart (the token is raised in every case, so writes of any earlier owner are
        refused from now on). Returns the new token, or None when another live node owns it (or
        this node is not alive and running itself)."""
        known = self._tokens.get(session_id)
        if known is not None:
            return known
        async with self._db.write_direct() as tx:
            # A row locked by a node that stopped mid-commit is given up on quickly (the server
            # ends that node's transaction; the next sweep tries again).
            await tx.execute(f"SET LOCAL lock_timeout = {CLAIM_LOCK_TIMEOUT_MS}")
            found = await tx.fetch(_CLAIM_SQL, [self.node_id, session_id, self.node_id, self.node_id])
        if not found:
            return None
        token = int(found[0][0])
        self._tokens[session_id] = token
        self._used[session_id] = time.monotonic()
        log.info("session taken", session_id=session_id, token=token)
        return token

    def lost(self, session_id: str) -> None:
        """Forget a session another node took (a commit was fenced)."""
        self._tokens.pop(session_id, None)
        self._used.pop(session_id, None)

    async def release(self, session_ids: list[str] | None = None) -> list[str]:
        """Give sessions back (all of this node's by default): their rows name no owner, so any
        node takes them at once. Returns the ids released.

        This node forgets each token before the database hears of it: from then on nothing here
        writes with it, and a claim made here meanwhile raises the token, which leaves that
        session's row as the claim made it."""
        chosen = list(self._tokens) if session_ids is None else [s for s in session_ids if s in self._tokens]
        tokens = [(session_id, self._tokens.pop(session_id)) for session_id in chosen]
        for session_id in chosen:
            self._used.pop(session_id, None)
        released: list[str] = []
        if not tokens:
            return released
        async with self._db.write_direct() as tx:
            for session_id, token in tokens:
                if await tx.execute(_RELEASE_SQL, [session_id, self.node_id, token]):
                    released.append(session_id)
        return released

    def unused(self, for_s: float) -> list[str]:
        """This node's sessions nothing here has asked about for `for_s` seconds."""
        now = time.monotonic()
        return [session_id for session_id, at in self._used.items() if now - at >= for_s]

    async def orphans(self, grace_ms: int, limit: int = 100) -> list[str]:
        """Sessions with a run left open or inputs waiting whose owner is gone (or is this node's
        previous life), which this node may take; a session nobody owned yet only once its input
        has waited `grace_ms`."""

        async def read(tx: DirectWrite) -> list[str]:
            found = await tx.fetch(_ORPHANS_SQL, [self.node_id, grace_ms, limit])
            return [row[0] for row in found if row[0] not in self._tokens]

        return await self._db.read_direct(read)

    async def waiting_inputs(self, older_than_ms: int) -> list[tuple[str, str]]:
        """(idempotency key, session id) of queued inputs of this node's sessions accepted more
        than `older_than_ms` ago, in arrival order: the ones a lost wake-up would leave behind."""

        async def read(tx: DirectWrite) -> list[tuple[str, str]]:
            found = await tx.fetch(_WAITING_SQL, [self.node_id, older_than_ms])
            return [(row[0], row[1]) for row in found if row[1] in self._tokens]

        return await self._db.read_direct(read)
