"""Queries over the session tree: transcripts, branch-point checks, subtrees (private to the store).

A session's visible transcript is its parent's transcript up to the session's branch point
(inclusive), then its own entries; a session without a branch point (a root, usually a sub-agent)
sees only its own. It is described by "segments": (session id, last visible position of that
session's own entries, or None for all of them), root-most first. The ancestor chain is read in
one recursive query and the entries of every segment in one more, so building a transcript costs
two queries however deep the tree, and checking a branch point costs the same for any length.

A model context needs less than the transcript; `sessions._context_read` reads it, on the driver
itself, with `visible_segments` from here.

Every function runs inside the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Select, exists, func, literal, or_, select, text, union_all

from sessions import _store_rows as rows
from sessions.errors import NotFound, StoreError
from sessions.records import EntryRecord, SessionRecord, TreeNode
from sessions.schema import EntryKind, entries, session_keys, sessions

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

Segment = tuple[str, int | None]
Start = tuple[int, int]
"""Where a read starts: (index of a segment, position of the first entry read in it)."""

# Guards against a corrupt parent cycle; real trees are a handful of levels deep.
MAX_DEPTH = 10_000
# Segments per compound SELECT (SQLite allows 500 terms).
_SEGMENTS_PER_QUERY = 100


CHAIN_SQL = f"""
WITH RECURSIVE chain (id, parent_id, branch_point, depth) AS (
    SELECT id, parent_id, branch_point, 0 FROM sessions WHERE id = ?
    UNION ALL
    SELECT parent.id, parent.parent_id, parent.branch_point, chain.depth + 1
    FROM sessions AS parent JOIN chain ON parent.id = chain.parent_id
    WHERE chain.branch_point IS NOT NULL AND chain.depth < {MAX_DEPTH}
)
SELECT chain.id, chain.branch_point, entries.session_id, entries.position
FROM chain LEFT OUTER JOIN entries ON entries.id = chain.branch_point
ORDER BY chain.depth
"""
"""The session (the one `?`) and its ancestors up to the first without a branch point, nearest
first, each with the owner and position of its branch point: the rows `visible_segments` takes.
Valid on SQLite and PostgreSQL; `sessions._context_read` runs it on the driver itself."""
_CHAIN = text(CHAIN_SQL.replace("?", ":session_id"))


async def segments(conn: AsyncConnection, session_id: str) -> list[Segment]:
    """The segments of the session's transcript. Raise NotFound for an unknown session."""
    found = (await conn.execute(_CHAIN, {"session_id": session_id})).all()
    if not found:
        raise NotFound(f"no session {session_id}")
    return visible_segments(found)


def visible_segments(chain: Sequence[Sequence[Any]]) -> list[Segment]:
    """Segments of the transcript of `chain[0]`, given its ancestors nearest first, each row
    (id, branch point, owner of the branch point, its position).

    Every row but the last carries the owner and position of its branch point. A branch point may
    lie in the parent's own entries or further up (a branch of a session that had no entries of
    its own): segments above the owner stay, the owner's is cut at the branch point, the ones
    below it go.
    """
    result: list[Segment] = [(chain[-1][0], None)]
    for session_id, branch_point, owner, position in reversed(chain[:-1]):
        index = next((i for i, (sid, _) in enumerate(result) if sid == owner), None)
        if index is None or position is None:
            raise StoreError(f"session {session_id}: branch point {branch_point} is not in its parent")
        limit = result[index][1]
        if limit is not None and position > limit:
            raise StoreError(f"session {session_id}: branch point {branch_point} is past its parent's view")
        result[index:] = [(owner, position), (session_id, None)]
    return result


async def segment_entries(conn: AsyncConnection, parts: Sequence[Segment]) -> list[EntryRecord]:
    """The entries of the segments, in transcript order."""
    return [rows.entry_record(row) for row in await _segment_rows(conn, parts, list(entries.c), None)]


async def message_page(
    conn: AsyncConnection, parts: Sequence[Segment], *, skip: int, limit: int
) -> tuple[list[EntryRecord], int]:
    """The message entries of the transcript that come before its newest `skip` ones, at most
    `limit` of them (the newest of those), in transcript order; and how many message entries the
    transcript holds. The entries are counted per segment and only the page's rows are read, so
    the cost follows the page, not the transcript."""

    def messages(sid: str, upto: int | None) -> list[ColumnElement[bool]]:
        where = [entries.c.session_id == sid, entries.c.kind == EntryKind.MESSAGE.value]
        if upto is not None:
            where.append(entries.c.position <= upto)
        return where

    counts: list[int] = []
    for sid, upto in parts:
        counting = select(func.count()).select_from(entries).where(*messages(sid, upto))
        counts.append(int((await conn.execute(counting)).scalar_one()))
    page: list[EntryRecord] = []
    to_skip, wanted = skip, limit
    for (sid, upto), count in zip(reversed(parts), reversed(counts), strict=True):
        if wanted <= 0:
            break
        if to_skip >= count:
            to_skip -= count
            continue
        take = min(wanted, count - to_skip)
        query = (
            select(entries)
            .where(*messages(sid, upto))
            .order_by(entries.c.position.desc())
            .offset(to_skip)
            .limit(take)
        )
        found = (await conn.execute(query)).all()
        page[:0] = [rows.entry_record(row) for row in reversed(found)]
        wanted -= take
        to_skip = 0
    return page, sum(counts)


async def _segment_rows(
    conn: AsyncConnection,
    parts: Sequence[Segment],
    columns: Sequence[ColumnElement[Any]],
    start: Start | None,
) -> list[rows.AnyRow]:
    """`columns` of the segments' entries from `start` on (every entry when None), in transcript
    order."""
    first_level, first_position = start if start is not None else (0, None)

    def part(level: int, *leading: ColumnElement[Any]) -> Select[Any]:
        sid, limit = parts[level]
        query = select(*leading, *columns).where(entries.c.session_id == sid)
        if limit is not None:
            query = query.where(entries.c.position <= limit)
        if level == first_level and first_position is not None:
            query = query.where(entries.c.position >= first_position)
        return query

    levels = range(first_level, len(parts))
    if len(levels) == 1:
        # One session's entries come in index order; the compound form below would copy every
        # row into a sorter first.
        return list((await conn.execute(part(first_level).order_by(entries.c.position))).all())
    found: list[rows.AnyRow] = []
    for chunk in range(0, len(levels), _SEGMENTS_PER_QUERY):
        selects = [
            part(level, literal(level).label("level"))
            for level in levels[chunk : chunk + _SEGMENTS_PER_QUERY]
        ]
        compound = (union_all(*selects) if len(selects) > 1 else selects[0]).subquery()
        query = select(compound).order_by(compound.c.level, compound.c.position)
        found.extend((await conn.execute(query)).all())
    return found


async def require_visible(conn: AsyncConnection, session_id: str, entry_id: str) -> None:
    """Raise NotFound unless the entry is in the session's transcript (which is not read)."""
    where = (
        await conn.execute(select(entries.c.session_id, entries.c.position).where(entries.c.id == entry_id))
    ).first()
    if where is not None:
        owner, position = where
        for sid, limit in await segments(conn, session_id):
            if sid == owner and (limit is None or position <= limit):
                return
    raise NotFound(f"entry {entry_id} is not in the transcript of session {session_id}")


async def subtree_deepest_first(conn: AsyncConnection, session_id: str) -> list[str]:
    """The session and all its descendants, children before their parents."""
    tree = (
        select(sessions.c.id, literal(0).label("depth"))
        .where(sessions.c.id == session_id)
        .cte("subtree", recursive=True)
    )
    child = sessions.alias("child")
    tree = tree.union_all(
        select(child.c.id, tree.c.depth + 1).where(child.c.parent_id == tree.c.id, tree.c.depth < MAX_DEPTH)
    )
    return list((await conn.execute(select(tree.c.id).order_by(tree.c.depth.desc()))).scalars().all())


def build_tree(records: Sequence[SessionRecord], root_id: str) -> TreeNode:
    """Nest the records of one tree under their parents, children ordered by creation."""
    children: dict[str | None, list[SessionRecord]] = {}
    for record in records:
        children.setdefault(record.parent_id, []).append(record)
    for kids in children.values():
        kids.sort(key=lambda r: (r.created_at, r.id))
    root = next((r for r in records if r.id == root_id), None)
    if root is None:
        raise StoreError(f"the root {root_id} of a session tree is missing")
    # Post-order without recursion: a chain of branches may be deeper than Python's stack.
    built: dict[str, TreeNode] = {}
    stack: list[tuple[SessionRecord, bool]] = [(root, False)]
    while stack:
        record, expanded = stack.pop()
        kids = children.get(record.id, [])
        if expanded:
            built[record.id] = TreeNode(record, tuple(built.pop(kid.id) for kid in kids))
        else:
            stack.append((record, True))
            stack.extend((kid, False) for kid in kids)
    return built[root_id]


# -- keys and search ---------------------------------------------------------------------------

# Bound on `IN (...)` lists, well under every backend's limit on bound parameters.
_CHUNK = 400


async def key_owner(conn: AsyncConnection, key: str) -> str | None:
    """The session the key names, or None."""
    query = select(session_keys.c.session_id).where(session_keys.c.key == key)
    owner: str | None = (await conn.execute(query)).scalar_one_or_none()
    return owner


async def keys_of(conn: AsyncConnection, session_id: str) -> list[str]:
    """The session's keys, sorted."""
    query = select(session_keys.c.key).where(session_keys.c.session_id == session_id)
    return sorted((await conn.execute(query)).scalars().all())


async def keys_by_session(conn: AsyncConnection, ids: Sequence[str]) -> dict[str, list[str]]:
    """The keys of each of these sessions that has any."""
    found: dict[str, list[str]] = {}
    for chunk in chunks(ids):
        query = select(session_keys.c.key, session_keys.c.session_id).where(
            session_keys.c.session_id.in_(chunk)
        )
        for key, sid in (await conn.execute(query)).all():
            found.setdefault(sid, []).append(key)
    return found


def matches(term: str) -> ColumnElement[bool]:
    """Sessions whose label, id, agent id or any key contains `term`, ignoring case."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    pattern = f"%{escaped}%"
    return or_(
        sessions.c.label.ilike(pattern, escape="\\"),
        sessions.c.id.ilike(pattern, escape="\\"),
        sessions.c.agent_id.ilike(pattern, escape="\\"),
        exists().where(
            session_keys.c.session_id == sessions.c.id,
            session_keys.c.key.ilike(pattern, escape="\\"),
        ),
    )


def chunks(items: Sequence[str]) -> Generator[Sequence[str], None, None]:
    """`items` in slices that fit an `IN (...)` list."""
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]
