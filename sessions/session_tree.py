"""The store's session tree: sessions, the keys that name them, branches, status and totals.

`Store.tree` is a `SessionTree`; the rules of every store method (one transaction per call, the
errors raised) are in `sessions.store`. Branching never copies entries: a branch points into its
parent's transcript (`sessions._store_tree` assembles transcripts from those pointers).

Its read queries (transcripts, subtrees, keys, search) are in `sessions._store_tree`; a
session's existence and status moves, which every area of the store shares, in
`sessions.session_status`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import ColumnElement, and_, delete, func, insert, select, update
from sqlalchemy import exc as sa_exc

from sessions import _store_rows as rows
from sessions import _store_tree as tree_queries
from sessions.db import Database
from sessions.errors import Conflict, InvalidRequest, KeyConflict, NotFound
from sessions.ids import new_id
from sessions.records import JSONObject, SessionRecord, TreeNode
from sessions.schema import (
    SessionKind,
    SessionStatus,
    entries,
    events,
    inputs,
    runs,
    session_keys,
    sessions,
)
from sessions.session_status import session_in, session_row, transition

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from sessions._direct_write import DirectWrite

__all__ = ["UNSET", "SessionTree"]

_SETTINGS: Final = ("label", "model", "thinking_level", "queue_mode", "origin")

_BY_KEY_SQL: Final = "SELECT session_id FROM session_keys WHERE key = ?"


class _Unset(Enum):
    UNSET = "UNSET"


UNSET: Final = _Unset.UNSET
"""Marks an argument that was not given, where None is a meaningful value."""


class SessionTree:
    """Sessions and their keys, over the store's database. Build it through `Store`."""

    def __init__(self, database: Database, clock: Callable[[], int]) -> None:
        self._db = database
        self._clock = clock

    async def create_session(
        self,
        *,
        agent_id: str,
        key: str | None = None,
        kind: SessionKind | str = SessionKind.MAIN,
        parent_id: str | None = None,
        branch_point: str | None = None,
        label: str | None = None,
        model: str | None = None,
        thinking_level: str | None = None,
        queue_mode: str | None = None,
        origin: JSONObject | None = None,
    ) -> SessionRecord:
        """Create an idle session, optionally a child of `parent_id` forking at `branch_point`.

        Raise KeyConflict when `key` already names a session; NotFound when the parent does not
        exist or `branch_point` is not in the parent's transcript.
        """
        settings = {
            "agent_id": agent_id,
            "kind": rows.parse(SessionKind, kind, "session kind"),
            "label": label,
            "model": model,
            "thinking_level": thinking_level,
            "queue_mode": queue_mode,
            "origin": None if origin is None else rows.dumps(origin),
        }
        if branch_point is not None and parent_id is None:
            raise InvalidRequest("a branch point needs a parent session")
        async with self._db.write() as conn:
            parent = None
            if parent_id is not None:
                parent = await session_row(conn, parent_id)
                if branch_point is not None:
                    await tree_queries.require_visible(conn, parent_id, branch_point)
            return await self._insert_session(
                conn, settings, key=key, parent=parent, branch_point=branch_point
            )

    async def get_session(self, session_id: str) -> SessionRecord | None:
        # Every request and every run reads a session: a direct read (`Database.read_direct`).
        return await self._db.read_direct(lambda tx: session_in(tx, session_id))

    async def get_session_by_key(self, key: str) -> SessionRecord | None:
        """The session `key` points at, or None when the key is unused."""

        async def by_key(tx: DirectWrite) -> SessionRecord | None:
            found = await tx.fetch(_BY_KEY_SQL, [key])
            return None if not found else await session_in(tx, found[0][0])

        return await self._db.read_direct(by_key)

    async def keys_of(self, session_id: str) -> list[str]:
        """The keys that point at the session, sorted (empty when none)."""
        async with self._db.read() as conn:
            return await tree_queries.keys_of(conn, session_id)

    async def list_sessions(
        self,
        *,
        agent_id: str | None = None,
        kind: SessionKind | str | None = None,
        status: SessionStatus | str | None = None,
        parent_id: str | _Unset | None = UNSET,
        include_archived: bool = False,
        search: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[SessionRecord], int]:
        """One page of sessions, most recently updated first, and how many match in all.

        `parent_id=None` lists roots only; leaving it out lists every level. Archived sessions are
        left out unless `include_archived` or `status="archived"`. `search` matches part of the
        label, id, agent id or any key, ignoring case.
        """
        conditions: list[ColumnElement[bool]] = []
        if agent_id is not None:
            conditions.append(sessions.c.agent_id == agent_id)
        if kind is not None:
            conditions.append(sessions.c.kind == rows.parse(SessionKind, kind, "session kind").value)
        if status is not None:
            conditions.append(sessions.c.status == rows.parse(SessionStatus, status, "session status").value)
        elif not include_archived:
            conditions.append(sessions.c.status != SessionStatus.ARCHIVED.value)
        if parent_id is None:
            conditions.append(sessions.c.parent_id.is_(None))
        elif not isinstance(parent_id, _Unset):
            conditions.append(sessions.c.parent_id == parent_id)
        if search:
            conditions.append(tree_queries.matches(search))
        where = and_(True, *conditions)
        page = (
            select(sessions)
            .where(where)
            .order_by(sessions.c.updated_at.desc(), sessions.c.id.desc())
            .limit(limit)
            .offset(offset)
        )
        async with self._db.read() as conn:
            total = (await conn.execute(select(func.count()).select_from(sessions).where(where))).scalar_one()
            found = (await conn.execute(page)).all()
            keys = await tree_queries.keys_by_session(conn, [row._mapping["id"] for row in found])
        records = [rows.session_record(row._mapping, keys.get(row._mapping["id"], ())) for row in found]
        return records, int(total)

    async def tree_of(self, session_id: str) -> TreeNode:
        """The whole tree containing the session, from its root; archived sessions included.
        Raise NotFound for an unknown session."""
        async with self._db.read() as conn:
            root_id = (
                await conn.execute(select(sessions.c.root_id).where(sessions.c.id == session_id))
            ).scalar_one_or_none()
            if root_id is None:
                raise NotFound(f"no session {session_id}")
            members = (await conn.execute(select(sessions).where(sessions.c.root_id == root_id))).all()
            key_rows = await conn.execute(
                select(session_keys.c.key, session_keys.c.session_id)
                .join(sessions, sessions.c.id == session_keys.c.session_id)
                .where(sessions.c.root_id == root_id)
            )
            keys: dict[str, list[str]] = {}
            for key, sid in key_rows.all():
                keys.setdefault(sid, []).append(key)
        records = [rows.session_record(row._mapping, keys.get(row._mapping["id"], ())) for row in members]
        return tree_queries.build_tree(records, root_id)

    async def branch(
        self,
        session_id: str,
        *,
        at_entry_id: str | None = None,
        key: str | None = None,
        label: str | None = None,
        kind: SessionKind | str = SessionKind.BRANCH,
    ) -> SessionRecord:
        """A new child session forking from the session's transcript at `at_entry_id`.

        The default branch point is the session's last visible entry: its own last entry, or its
        own branch point when it has none. Agent, model, thinking level, queue mode and origin are
        inherited. Nothing is copied, so the cost does not depend on the transcript's length.
        Raise NotFound when the session does not exist or the entry is not in its transcript,
        KeyConflict when `key` is in use.
        """
        branch_kind = rows.parse(SessionKind, kind, "session kind")
        async with self._db.write() as conn:
            source = await session_row(conn, session_id)
            m = source._mapping
            point: str | None
            if at_entry_id is not None:
                await tree_queries.require_visible(conn, session_id, at_entry_id)
                point = at_entry_id
            elif m["last_position"] > 0:
                last = select(entries.c.id).where(
                    entries.c.session_id == session_id, entries.c.position == m["last_position"]
                )
                point = (await conn.execute(last)).scalar_one()
            else:
                point = m["branch_point"]
            settings = {
                name: m[name] for name in ("agent_id", "model", "thinking_level", "queue_mode", "origin")
            }
            settings.update(kind=branch_kind, label=label)
            return await self._insert_session(conn, settings, key=key, parent=source, branch_point=point)

    async def switch_key(self, key: str, session_id: str) -> str | None:
        """Point `key` at the session, creating the key when new; return the session it pointed
        at before (None when new). Raise NotFound when the session does not exist."""
        async with self._db.write() as conn:
            await session_row(conn, session_id)
            previous = await tree_queries.key_owner(conn, key)
            upsert = self._db.insert(session_keys).values(key=key, session_id=session_id)
            await conn.execute(
                upsert.on_conflict_do_update(index_elements=["key"], set_={"session_id": session_id})
            )
            return previous

    async def reset(self, key: str, *, archive_old: bool = True) -> SessionRecord:
        """Start a fresh root session for the conversation `key` names and move the key to it.

        The new session takes the old one's agent, kind (a branch's: its root's kind), model,
        thinking level, queue mode and origin. The old session keeps its transcript and its place
        in its tree; with `archive_old` it is archived, which it must allow (abort a running
        session first). Raise NotFound for an unused key, InvalidTransition when the old session
        cannot be archived.
        """
        async with self._db.write() as conn:
            old_id = await tree_queries.key_owner(conn, key)
            if old_id is None:
                raise NotFound(f"no session key {key!r}")
            m = (await session_row(conn, old_id))._mapping
            if archive_old:
                await transition(conn, old_id, SessionStatus.ARCHIVED, None, now=self._clock(), same_ok=True)
            await conn.execute(delete(session_keys).where(session_keys.c.key == key))
            settings = {
                name: m[name]
                for name in ("agent_id", "kind", "model", "thinking_level", "queue_mode", "origin")
            }
            settings["label"] = None
            if m["kind"] == SessionKind.BRANCH.value:
                # The key was switched to a branch: the fresh start is a conversation like the
                # one the branch grew from, so it takes the kind of the branch's root.
                root_kind = select(sessions.c.kind).where(sessions.c.id == m["root_id"])
                settings["kind"] = (await conn.execute(root_kind)).scalar_one()
            return await self._insert_session(conn, settings, key=key, parent=None, branch_point=None)

    async def delete_session(self, session_id: str, *, cascade: bool = False) -> int:
        """Delete the session with its entries, events, keys, runs and inputs; return how many
        sessions went. With `cascade` its descendants go too; without, raise Conflict when it has
        any. Raise NotFound when it does not exist."""
        async with self._db.write() as conn:
            await session_row(conn, session_id)
            doomed = await tree_queries.subtree_deepest_first(conn, session_id)
            if len(doomed) > 1 and not cascade:
                raise Conflict(f"session {session_id} has {len(doomed) - 1} descendant session(s)")
            for chunk in tree_queries.chunks(doomed):
                for table in (inputs, runs, events, entries, session_keys):
                    await conn.execute(delete(table).where(table.c.session_id.in_(chunk)))
                await conn.execute(delete(sessions).where(sessions.c.id.in_(chunk)))
            return len(doomed)

    async def update_session(
        self,
        session_id: str,
        *,
        label: str | _Unset | None = UNSET,
        model: str | _Unset | None = UNSET,
        thinking_level: str | _Unset | None = UNSET,
        queue_mode: str | _Unset | None = UNSET,
        origin: JSONObject | _Unset | None = UNSET,
    ) -> SessionRecord:
        """Change the given settings (None clears one). Raise NotFound for an unknown session.

        Status changes only through the guarded `set_status`; counters through `add_usage` and
        the appends.
        """
        given: dict[str, Any] = {
            "label": label,
            "model": model,
            "thinking_level": thinking_level,
            "queue_mode": queue_mode,
            "origin": origin,
        }
        values = settings_values(
            {name: value for name, value in given.items() if not isinstance(value, _Unset)}
        )
        async with self._db.write() as conn:
            values["updated_at"] = self._clock()
            statement = update(sessions).where(sessions.c.id == session_id).values(**values)
            row = (await conn.execute(statement.returning(*sessions.c))).first()
            if row is None:
                raise NotFound(f"no session {session_id}")
            return rows.session_record(row._mapping, await tree_queries.keys_of(conn, session_id))

    async def set_status(
        self,
        session_id: str,
        new: SessionStatus | str,
        *,
        expected: Collection[SessionStatus | str] | None = None,
    ) -> SessionRecord:
        """Move the session to `new` when `SESSION_TRANSITIONS` allows it from the current status
        and, if `expected` is given, the current status is one of those.

        Raise InvalidTransition naming the states it would have accepted; NotFound for an unknown
        session.
        """
        target = rows.parse(SessionStatus, new, "session status")
        allowed = (
            None if expected is None else {rows.parse(SessionStatus, s, "session status") for s in expected}
        )
        async with self._db.write() as conn:
            await transition(conn, session_id, target, allowed, now=self._clock())
            row = await session_row(conn, session_id)
            return rows.session_record(row._mapping, await tree_queries.keys_of(conn, session_id))

    async def add_usage(self, session_id: str, input: int, output: int, total: int, cost: float) -> None:
        """Add a run's token counts and cost to the session's totals. Raise NotFound for an
        unknown session."""
        statement = (
            update(sessions)
            .where(sessions.c.id == session_id)
            .values(
                input_tokens=sessions.c.input_tokens + input,
                output_tokens=sessions.c.output_tokens + output,
                total_tokens=sessions.c.total_tokens + total,
                cost=sessions.c.cost + cost,
            )
        )
        async with self._db.write() as conn:
            if (await conn.execute(statement.values(updated_at=self._clock()))).rowcount == 0:
                raise NotFound(f"no session {session_id}")

    async def _insert_session(
        self,
        conn: AsyncConnection,
        settings: Mapping[str, Any],
        *,
        key: str | None,
        parent: rows.AnyRow | None,
        branch_point: str | None,
    ) -> SessionRecord:
        """Insert a session from `settings` (agent_id, kind, label, model, thinking_level,
        queue_mode, origin as stored text) and point `key` at it."""
        if key is not None:
            owner = await tree_queries.key_owner(conn, key)
            if owner is not None:
                raise KeyConflict(key, owner)
        session_id = new_id()
        now = self._clock()
        values: dict[str, Any] = {
            **settings,
            "id": session_id,
            "parent_id": None if parent is None else parent._mapping["id"],
            "root_id": session_id if parent is None else parent._mapping["root_id"],
            "branch_point": branch_point,
            "status": SessionStatus.IDLE.value,
            "input_tokens": 0,
            "output_tokens": 0,
            "total_tokens": 0,
            "cost": 0.0,
            "last_position": 0,
            "last_seq": 0,
            "pruned_seq": 0,
            "created_at": now,
            "updated_at": now,
        }
        values["kind"] = SessionKind(values["kind"]).value
        await conn.execute(insert(sessions).values(**values))
        if key is not None:
            try:
                await conn.execute(insert(session_keys).values(key=key, session_id=session_id))
            except sa_exc.IntegrityError as error:
                # Another connection took the key after our check (PostgreSQL).
                raise KeyConflict(key) from error
        return rows.session_record(values, () if key is None else (key,))


def settings_values(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Column values for session settings; raise InvalidRequest for anything else."""
    unknown = sorted(set(fields) - set(_SETTINGS))
    if unknown:
        raise InvalidRequest(
            f"cannot change session field(s) {', '.join(unknown)}; only {', '.join(_SETTINGS)}"
        )
    values = dict(fields)
    if "origin" in values:
        values["origin"] = None if values["origin"] is None else rows.dumps(values["origin"])
    return values
