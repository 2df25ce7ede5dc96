"""Finding the session a request names, by id or by key."""

from __future__ import annotations

from gateway.methods.base import Call, from_sessions_error, invalid
from sessions import SessionRecord, SessionsError, agent_from_key


async def session_named(
    call: Call, *, key: str | None = None, session_id: str | None = None
) -> SessionRecord:
    """The session `session_id` names, else the one `key` names. Raises MethodError: NOT_FOUND
    when there is none, INVALID_REQUEST when neither is given."""
    if session_id is None and key is None:
        raise invalid(call.method, "key or sessionId is required")
    try:
        return await call.state.manager.get(key=key, session_id=session_id)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc


async def session_of_key(call: Call, key: str) -> SessionRecord | None:
    """The session `key` names, or None when no session has used the key yet (after checking
    that the key is one a session could use: see `check_key`)."""
    check_key(call, key)
    try:
        return await call.state.store.tree.get_session_by_key(key)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc


def check_key(call: Call, key: str) -> None:
    """Raise MethodError NOT_FOUND unless a session could use `key`: the agent the key names
    (`agent:<id>:...`, the default agent otherwise) must be configured, as `chat.send` needs."""
    directory = call.state.directory
    agent = agent_from_key(key) or directory.default_agent_id
    try:
        directory.profile(agent)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc


def first_key(record: SessionRecord) -> str | None:
    return record.keys[0] if record.keys else None
