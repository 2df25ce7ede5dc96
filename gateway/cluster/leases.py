"""Named leases: one node of the cluster at a time holds each name (a chat account:
`channel:<platform>:<account_id>`).

A lease is a row of `leases` (migration 0008). Its holder holds it while the holder's
`cluster_nodes` row is alive (`expires_at` later than the database's clock): a node that stops
renewing its row loses every lease at once, without anyone writing to `leases`. A lease is free
when it has no row, no holder, or a holder whose node row is missing or expired; whoever acquires
a free lease raises its fencing `token` by one.

The rules, each one statement checked by PostgreSQL under the row's lock, so two nodes racing for
one name never both win:

- `acquire` takes the lease when it is free *or already held by this node*, and only while this
  node's own row is alive (a node that cannot keep its row alive could not keep the lease either).
  Every successful `acquire` raises the token, also when this node held it already: the caller
  asks because it does not know of a tenure of its own (a process restarted under the same node
  id), so whatever an earlier process of this node did with the old token must be stale.
- `held` answers whether this node still holds the lease with that token, its row alive; a caller
  that keeps working under a lease asks it regularly (at most every ttl/4) and stops at `False`.
- `release` gives the lease up at once (for another node to take without waiting for a ttl), and
  only if it is still this node's with that token. The token stays, so the next holder's is
  higher.

Times are the database's clock (Unix ms), never this process's: nodes' clocks may disagree, the
database is the one all of them read. Leases are PostgreSQL only (a cluster is), like the rest of
`gateway.cluster`. Errors are `sessions.errors` (`StoreUnavailable` when the database is busy), as
for every store. Rows live as long as the database: a name once leased keeps its row, holder NULL
when free, so its token never goes back.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, ColumnElement, Select, exists, literal, or_, select, update

from sessions.db import Database
from sessions.ownership import db_now
from sessions.schema import cluster_nodes, leases

__all__ = ["Leases"]

_l = leases
_n = cluster_nodes


def _live_nodes() -> Select[tuple[str]]:
    """The ids of the nodes whose `cluster_nodes` row has not expired."""
    return select(_n.c.node_id).where(_n.c.expires_at > db_now())


def _holder_alive() -> ColumnElement[bool]:
    # An IN over an uncorrelated subquery: an EXISTS naming `leases.holder` would pull `leases`
    # into the subquery's FROM inside ON CONFLICT, where SQLAlchemy does not correlate.
    return _l.c.holder.in_(_live_nodes())


def _alive(node: str) -> ColumnElement[bool]:
    return exists().where(_n.c.node_id == node, _n.c.expires_at > db_now())


class Leases:
    """The leases of node `node_id` over `database` (PostgreSQL). Raises ValueError for another
    backend."""

    def __init__(self, database: Database, *, node_id: str) -> None:
        if database.backend != "postgresql":
            raise ValueError(f"leases need PostgreSQL, not {database.backend}")
        self._db = database
        self.node_id = node_id

    async def acquire(self, name: str) -> int | None:
        """Take lease `name` and return its new fencing token, or None when another live node
        holds it or this node's own row is not alive."""
        node = self.node_id
        now = db_now()
        free = or_(_l.c.holder.is_(None), _l.c.holder == node, ~_holder_alive())
        candidate = select(literal(name), literal(node), literal(1, BigInteger), now).where(_alive(node))
        statement = (
            self._db.insert(_l)
            .from_select(["name", "holder", "token", "acquired_at"], candidate)
            .on_conflict_do_update(
                index_elements=[_l.c.name],
                set_={"holder": node, "token": _l.c.token + 1, "acquired_at": now},
                where=free,
            )
            .returning(_l.c.token)
        )
        async with self._db.write() as conn:
            row = (await conn.execute(statement)).first()
        return None if row is None else int(row.token)

    async def release(self, name: str, token: int) -> bool:
        """Give lease `name` up if this node still holds it with `token`; False when it did not
        (another node took it meanwhile, or it was released already)."""
        statement = (
            update(_l)
            .where(_l.c.name == name, _l.c.holder == self.node_id, _l.c.token == token)
            .values(holder=None, acquired_at=None)
        )
        async with self._db.write() as conn:
            result = await conn.execute(statement)
        return bool(result.rowcount)

    async def held(self, name: str, token: int) -> bool:
        """Whether this node still holds lease `name` with `token` and its own row is alive."""
        query = select(_l.c.token).where(
            _l.c.name == name, _l.c.holder == self.node_id, _l.c.token == token, _alive(self.node_id)
        )
        async with self._db.read() as conn:
            return (await conn.execute(query)).first() is not None

    async def holders(self) -> dict[str, str]:
        """Every lease held by a live node: name -> node id."""
        query = select(_l.c.name, _l.c.holder).where(_holder_alive())
        async with self._db.read() as conn:
            rows = (await conn.execute(query.order_by(_l.c.name))).all()
        return {str(row.name): str(row.holder) for row in rows}
