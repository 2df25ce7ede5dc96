"""`sessions.*` methods that list and change sessions: listing, describing, trees, creating,
patching, branching, switching, resetting, deleting, compacting and aborting.

Subscriptions and the resume call are in `subscribe_methods`.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.methods.base import Call, MethodError, from_sessions_error, invalid
from gateway.methods.lookup import first_key, session_named
from gateway.protocol import params as p
from gateway.rows import session_row, tree_row
from sessions import CompactionError, SessionRecord, SessionsError
from sessions.ids import new_id

THINKING_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh")


async def list_sessions(call: Call, params: p.SessionsListParams) -> dict[str, Any]:
    """The `sessions.list` answer (also `sessions.subscribe`'s `list`)."""
    limit = params.limit if params.limit is not None else 50
    offset = params.offset or 0
    filters: dict[str, Any] = {}
    if params.agent_id is not None:
        filters["agent_id"] = params.agent_id
    if params.kind is not None:
        filters["kind"] = params.kind
    if params.status is not None:
        filters["status"] = params.status
    # OpenClaw's `archived`: true lists archived sessions only, "all" lists every session.
    include_archived = bool(params.include_archived) or params.archived == "all"
    if params.archived is True:
        filters["status"] = "archived"
    try:
        records, total = await call.state.store.tree.list_sessions(
            limit=limit,
            offset=offset,
            include_archived=include_archived,
            search=params.search or None,
            **filters,
        )
    except SessionsError as exc:  # an unknown kind or status
        raise from_sessions_error(exc) from exc
    rows = [session_row(r, call.state.manager) for r in records]
    next_offset = offset + len(rows) if offset + len(rows) < total else None
    return {
        "ts": _now(),
        "path": call.state.database_label(),
        "count": len(rows),
        "totalCount": total,
        "limitApplied": limit,
        "nextOffset": next_offset,
        "hasMore": next_offset is not None,
        "owners": [],
        "defaults": _defaults(call),
        "sessions": rows,
    }


async def sessions_list(call: Call, params: p.SessionsListParams) -> Any:
    return await list_sessions(call, params)


def _defaults(call: Call) -> dict[str, Any]:
    """What a session without its own settings gets (OpenClaw's `sessions.list` `defaults`)."""
    directory = call.state.directory
    try:
        profile = directory.profile(directory.default_agent_id)
    except SessionsError:
        return {}
    ref = profile.model
    out: dict[str, Any] = {
        "agentId": profile.id,
        "modelProvider": ref.partition("/")[0] if ref else None,
        "model": ref,
        "contextTokens": None,
        "thinkingDefault": profile.thinking_level,
        "queueMode": profile.queue_mode,
    }
    if ref:
        try:
            out["contextTokens"] = directory.resolve_model(ref).context_window
        except Exception:
            out["contextTokens"] = None
    return out


async def sessions_describe(call: Call, params: p.SessionsDescribeParams) -> Any:
    record = await session_named(call, key=params.key)
    row = session_row(record, call.state.manager)
    return {"session": row, **row}


async def sessions_tree(call: Call, params: p.SessionsTreeParams) -> Any:
    record = await session_named(call, key=params.key, session_id=params.session_id)
    try:
        node = await call.state.store.tree.tree_of(record.id)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    return {"root": tree_row(node, call.state.manager)}


async def sessions_create(call: Call, params: p.SessionsCreateParams) -> Any:
    key = params.key or f"agent:{params.agent_id or 'main'}:session:{new_id()[-12:]}"
    if params.model is not None:
        _check_model(call, params.model)
    tree = call.state.store.tree
    try:
        if await tree.get_session_by_key(key) is not None:
            raise MethodError("INVALID_REQUEST", f"session key {key!r} is already in use")
        record = await call.state.manager.ensure_session(key, agent_id=params.agent_id)
        if params.label is not None or params.model is not None:
            record = await tree.update_session(record.id, label=params.label, model=params.model)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    call.state.bridge.session_changed(record.id, "create")
    return {
        "ok": True,
        "key": key,
        "sessionId": record.id,
        "session": session_row(record, call.state.manager),
    }


async def sessions_patch(call: Call, params: p.SessionsPatchParams) -> Any:
    """A field sent as null clears the setting; an absent one leaves it."""
    record = await session_named(call, key=params.key)
    given = params.model_fields_set
    fields: dict[str, Any] = {}
    if "label" in given:
        fields["label"] = params.label
    if "model" in given:
        if params.model is not None:
            _check_model(call, params.model)
        fields["model"] = params.model
    if "thinking_level" in given:
        if params.thinking_level is not None and params.thinking_level not in THINKING_LEVELS:
            raise invalid(call.method, f"thinkingLevel must be one of {', '.join(THINKING_LEVELS)}")
        fields["thinking_level"] = params.thinking_level
    if "queue_mode" in given:
        fields["queue_mode"] = params.queue_mode
    if not fields:
        raise invalid(call.method, "nothing to change (label, model, thinkingLevel or queueMode)")
    try:
        updated = await call.state.store.tree.update_session(record.id, **fields)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    call.state.bridge.session_changed(record.id, "patch")
    return {"ok": True, "key": first_key(updated), "session": session_row(updated, call.state.manager)}


async def sessions_branch(call: Call, params: p.SessionsBranchParams) -> Any:
    """A branch of the session `sessionId` (else `key`) names, at `fromEntryId` (else at its
    head, through the session's lane). The branch's key is `newKey`; when `sessionId` names the
    parent, a `key` given with it is taken as the new key."""
    parent = await session_named(call, key=params.key, session_id=params.session_id)
    new_key = params.new_key
    if new_key is None and params.session_id is not None:
        new_key = params.key
    tree = call.state.store.tree
    entry = params.from_entry_id

    async def op() -> SessionRecord:
        key = new_key
        if key is None:
            base = first_key(parent) or f"agent:{parent.agent_id}:session:{parent.id[:8]}"
            key = f"{base}:branch:{new_id()[-8:]}"
        return await tree.branch(parent.id, at_entry_id=entry, key=key, label=params.label)

    try:
        branch = await (call.state.manager.on_lane(parent.id, op) if entry is None else op())
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    call.state.bridge.session_changed(branch.id, "branch")
    return {"ok": True, "session": session_row(branch, call.state.manager)}


async def sessions_fork(call: Call, params: p.SessionsForkParams) -> Any:
    """OpenClaw's name for a branch at an entry."""
    return await sessions_branch(call, params.as_branch())


async def sessions_switch(call: Call, params: p.SessionsSwitchParams) -> Any:
    tree = call.state.store.tree
    try:
        if await tree.get_session(params.session_id) is None:
            raise MethodError("NOT_FOUND", f"unknown session: {params.session_id}")
        await tree.switch_key(params.key, params.session_id)
        record = await tree.get_session(params.session_id)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    if record is None:
        raise MethodError("NOT_FOUND", f"unknown session: {params.session_id}")
    call.state.bridge.session_changed(record.id, "switch")
    return {"ok": True, "key": params.key, "session": session_row(record, call.state.manager)}


async def sessions_reset(call: Call, params: p.SessionsResetParams) -> Any:
    record = await session_named(call, key=params.key)
    manager = call.state.manager

    async def op() -> SessionRecord:
        return await call.state.store.tree.reset(params.key)

    try:
        await manager.abort(record.id)
        fresh = await manager.on_lane(record.id, op)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    manager.forget(record.id)
    call.state.bridge.session_changed(fresh.id, "reset")
    return {
        "ok": True,
        "key": params.key,
        "sessionId": fresh.id,
        "previousSessionId": record.id,
        "session": session_row(fresh, manager),
    }


async def sessions_delete(call: Call, params: p.SessionsDeleteParams) -> Any:
    record = await session_named(call, key=params.key)
    manager = call.state.manager
    if manager.active_run_ids(record.id):
        await manager.abort(record.id)

    async def op() -> None:
        await call.state.store.tree.delete_session(record.id, cascade=bool(params.cascade))

    try:
        await manager.on_lane(record.id, op)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    manager.forget(record.id)
    call.state.bridge.session_changed(record.id, "delete", deleted=record)
    return {"ok": True, "deleted": True, "sessionId": record.id}


async def sessions_compact(call: Call, params: p.SessionsCompactParams) -> Any:
    record = await session_named(call, key=params.key, session_id=params.session_id)
    try:
        result = await call.state.manager.compact(record.id)
    except CompactionError as exc:
        raise MethodError("INVALID_REQUEST", f"compaction failed: {exc}") from exc
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    return {"ok": True, "compacted": True, "sessionId": record.id, **result.payload()}


async def sessions_abort(call: Call, params: p.SessionsAbortParams) -> Any:
    if params.key is None:
        raise invalid(call.method, "key is required")
    record = await session_named(call, key=params.key)
    aborted = await call.state.manager.abort(record.id, run_id=params.run_id)
    return {"ok": True, "aborted": bool(aborted), "runIds": aborted}


def _check_model(call: Call, ref: str) -> None:
    try:
        call.state.directory.resolve_model(ref)
    except Exception as exc:
        raise MethodError("INVALID_REQUEST", str(exc)) from exc


def _now() -> int:
    return int(time.time() * 1000)
