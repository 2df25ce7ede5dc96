"""Errors of the sessions package.

Every failure that leaves `sessions` is one of these. Database and driver errors are translated
at the store's boundary (`raise StoreUnavailable(...) from exc`) and never escape raw.

SessionsError                 root; `retryable` and `retry_after_ms` say whether trying again helps
├── InvalidRequest            an argument has a value the operation does not accept (also a ValueError)
├── NotFound                  a session, key, entry, run or input does not exist
├── Conflict                  the request contradicts what is stored
│   ├── KeyConflict           the session key is already in use
│   ├── SeqConflict           event seqs are not contiguous with the stored last seq
│   └── Fenced                a write for a session this node no longer owns (another node took it)
├── InvalidTransition         a guarded state change from a state it does not allow
├── StoreError                the database failed in a way a retry will not fix
│   └── StoreClosed           the store was used after `aclose()`
├── Unavailable               temporarily unable to serve; retry after `retry_after_ms`
│   ├── StoreUnavailable      the database is locked, busy or unreachable
│   └── LaneFull              a session's lane is at its depth bound
└── StateDirLocked            another process holds the state directory
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "Conflict",
    "Fenced",
    "InvalidRequest",
    "InvalidTransition",
    "KeyConflict",
    "LaneFull",
    "NotFound",
    "SeqConflict",
    "SessionsError",
    "StateDirLocked",
    "StoreClosed",
    "StoreError",
    "StoreUnavailable",
    "Unavailable",
]


class SessionsError(Exception):
    """Root of the errors raised by `sessions`.

    `retryable` tells a caller (and, through the gateway, a client) whether the same request may
    succeed later; `retry_after_ms` is a hint for how long to wait, when known.
    """

    retryable: bool = False
    retry_after_ms: int | None = None


class InvalidRequest(SessionsError, ValueError):
    pass


class NotFound(SessionsError):
    pass


class Conflict(SessionsError):
    pass


class KeyConflict(Conflict):
    def __init__(self, key: str, session_id: str | None = None) -> None:
        owner = f" (held by session {session_id})" if session_id else ""
        super().__init__(f"session key {key!r} is already in use{owner}")
        self.key = key
        self.session_id = session_id


class SeqConflict(Conflict):
    """Appended events must continue the session's log without gaps or repeats.

    `expected` is the seq the next appended event must carry.
    """

    def __init__(self, session_id: str, expected: int, got: int) -> None:
        super().__init__(f"session {session_id}: expected event seq {expected}, got {got}")
        self.session_id = session_id
        self.expected = expected
        self.got = got


class Fenced(Conflict):
    """A write of a session whose fencing token is no longer this node's: another node of the
    cluster took the session over (`sessions.ownership`). Nothing of the write was kept."""

    def __init__(self, session_id: str, owner: str | None) -> None:
        super().__init__(f"session {session_id} is now owned by {owner or 'no node'}; the write was refused")
        self.session_id = session_id
        self.owner = owner


class InvalidTransition(SessionsError):
    """A guarded state change was asked for from a state that does not allow it."""

    def __init__(self, what: str, current: str, target: str, expected: Iterable[str]) -> None:
        allowed = sorted(expected)
        wanted = " or ".join(allowed) if allowed else "(no state allows it)"
        super().__init__(f"{what}: cannot go from {current!r} to {target!r}; expected {wanted}")
        self.current = current
        self.target = target
        self.expected = frozenset(allowed)


class StoreError(SessionsError):
    pass


class StoreClosed(StoreError):
    pass


class Unavailable(SessionsError):
    """Temporarily unable to serve the request; the same request may succeed later."""

    retryable = True

    def __init__(self, message: str, *, retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


class StoreUnavailable(Unavailable):
    pass


class LaneFull(Unavailable):
    pass


class StateDirLocked(SessionsError):
    """Another live process holds the state directory's lock."""

    def __init__(self, home: Path, pid: int | None) -> None:
        holder = f"process {pid}" if pid is not None else "another process"
        super().__init__(
            f"the state directory {home} is in use by {holder}; stop that gateway daemon "
            "or set GATEWAY_HOME to another directory"
        )
        self.home = home
        self.pid = pid
