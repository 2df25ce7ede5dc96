"""`sessions.*` methods: listing, trees, branching, switching, resetting, deleting, compaction,
subscriptions and the resume call."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.methods.base import Call, MethodError, from_sessions_error, invalid
from gateway.rows import session_row, tree_row
from sessions.errors import SessionsError
from sessions.session_events import open_reply
from sessions.store import SessionRecord

QUEUE_MODES = ("steer", "followup", "collect", "interrupt")
THINKING_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh")


async def resolve_session(call: Call, *, key_names: tuple[str, ...] = ("key", "sessionKey")) -> SessionRecord:
    manager = call.state.manager
    session_id = call.params.get("sessionId")
    key = None
    for name in key_names:
        if isinstance(call.params.get(name), str) and call.params[name]:
            key = call.params[name]
            break
    if not session_id and not key:
        raise invalid(call.method, f"{key_names[0]} or sessionId is required")
    try:
        return await manager.get(key=key, session_id=session_id if isinstance(session_id, str) else None)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc


async def sessions_list(call: Call) -> Any:
    limit = call.int_param("limit", default=50, minimum=1, maximum=1000)
    offset = call.int_param("offset", default=0, minimum=0, maximum=10_000_000)
    filters: dict[str, Any] = {}
    for name, column in (("agentId", "agent_id"), ("kind", "kind"), ("status", "status")):
        value = call.params.get(name)
        if isinstance(value, str) and value:
            filters[column] = value
    search = call.params.get("search")
    # OpenClaw's `archived`: true lists archived sessions only, "all" lists every session.
    archived = call.params.get("archived")
    include_archived = bool(call.params.get("includeArchived", False)) or archived == "all"
    if archived is True:
        filters["status"] = "archived"
    try:
        records, total = await call.state.store.list_sessions(
            limit=limit,
            offset=offset,
            include_archived=include_archived,
            search=search if isinstance(search, str) and search else None,
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


async def sessions_describe(call: Call) -> Any:
    record = await resolve_session(call)
    return {"session": session_row(record, call.state.manager), **session_row(record, call.state.manager)}


async def sessions_tree(call: Call) -> Any:
    record = await resolve_session(call)
    node = await call.state.store.tree(record.id)
    return {"root": tree_row(node, call.state.manager)}


async def sessions_create(call: Call) -> Any:
    key = call.str_param("key", required=False)
    agent_id = call.str_param("agentId", required=False)
    label = call.str_param("label", required=False)
    model = call.str_param("model", required=False)
    if key is None:
        from sessions.ids import new_id

        key = f"agent:{agent_id or 'main'}:session:{new_id()[-12:]}"
    if model is not None:
        _check_model(call, model)
    store = call.state.store
    if await store.get_session_by_key(key) is not None:
        raise MethodError("INVALID_REQUEST", f"session key {key!r} is already in use")
    try:
        record = await call.state.manager.ensure_session(key, agent_id=agent_id)
        if label is not None or model is not None:
            record = await store.update_session(record.id, label=label, model=model)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    call.state.bridge.session_changed(record.id, "create")
    return {
        "ok": True,
        "key": key,
        "sessionId": record.id,
        "session": session_row(record, call.state.manager),
    }


async def sessions_patch(call: Call) -> Any:
    record = await resolve_session(call)
    fields: dict[str, Any] = {}
    if "label" in call.params:
        label = call.params["label"]
        if label is not None and not isinstance(label, str):
            raise invalid(call.method, "label must be a string or null")
        fields["label"] = label
    if "model" in call.params:
        model = call.params["model"]
        if model is not None:
            if not isinstance(model, str):
                raise invalid(call.method, "model must be a string like provider/model-id")
            _check_model(call, model)
        fields["model"] = model
    if "thinkingLevel" in call.params:
        level = call.params["thinkingLevel"]
        if level is not None and level not in THINKING_LEVELS:
            raise invalid(call.method, f"thinkingLevel must be one of {', '.join(THINKING_LEVELS)}")
        fields["thinking_level"] = level
    if "queueMode" in call.params:
        mode = call.params["queueMode"]
        if mode is not None and mode not in QUEUE_MODES:
            raise invalid(call.method, f"queueMode must be one of {', '.join(QUEUE_MODES)}")
        fields["queue_mode"] = mode
    if not fields:
        raise invalid(call.method, "nothing to change (label, model, thinkingLevel or queueMode)")
    try:
        updated = await call.state.store.update_session(record.id, **fields)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    call.state.bridge.session_changed(record.id, "patch")
    return {
        "ok": True,
        "key": (updated.keys or [None])[0],
        "session": session_row(updated, call.state.manager),
    }


async def sessions_branch(call: Call) -> Any:
    record = await resolve_session(call, key_names=("key", "sessionKey", "parentKey"))
    new_key = call.str_param("newKey", "branchKey", required=False)
    # `key` names the parent; a separate new key may come as `newKey` (or `key` when sessionId
    # names the parent).
    if new_key is None and call.params.get("sessionId") and isinstance(call.params.get("key"), str):
        new_key = call.params["key"]
    label = call.str_param("label", required=False)
    entry = call.str_param("fromEntryId", "entryId", required=False)
    store = call.state.store

    async def op() -> SessionRecord:
        key = new_key
        if key is None:
            from sessions.ids import new_id

            parent_key = record.keys[0] if record.keys else f"agent:{record.agent_id}:session:{record.id[:8]}"
            key = f"{parent_key}:branch:{new_id()[-8:]}"
        return await store.branch(record.id, at_entry_id=entry, key=key, label=label)

    try:
        if entry is None:
            branch = await call.state.manager.on_lane(record.id, op)
        else:
            branch = await op()
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    call.state.bridge.session_changed(branch.id, "branch")
    return {"ok": True, "session": session_row(branch, call.state.manager)}


async def sessions_switch(call: Call) -> Any:
    key = call.str_param("key", "sessionKey")
    assert key is not None
    target_id = call.str_param("sessionId", "targetSessionId")
    assert target_id is not None
    store = call.state.store
    try:
        if await store.get_session(target_id) is None:
            raise MethodError("NOT_FOUND", f"unknown session: {target_id}")
        await store.switch_key(key, target_id)
        record = await store.get_session(target_id)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    assert record is not None
    call.state.bridge.session_changed(record.id, "switch")
    return {"ok": True, "key": key, "session": session_row(record, call.state.manager)}


async def sessions_reset(call: Call) -> Any:
    record = await resolve_session(call)
    key = call.params.get("key") or call.params.get("sessionKey") or (record.keys or [None])[0]
    if not isinstance(key, str):
        raise invalid(call.method, "the session has no key to reset")
    manager = call.state.manager

    async def op() -> SessionRecord:
        return await call.state.store.reset(key)

    try:
        await manager.abort(record.id, reason="aborted")
        fresh = await manager.on_lane(record.id, op)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    manager.forget(record.id)
    call.state.bridge.session_changed(fresh.id, "reset")
    return {
        "ok": True,
        "key": key,
        "sessionId": fresh.id,
        "previousSessionId": record.id,
        "session": session_row(fresh, manager),
    }


async def sessions_delete(call: Call) -> Any:
    record = await resolve_session(call)
    cascade = bool(call.params.get("cascade", False))
    manager = call.state.manager
    if manager.active_run_ids(record.id):
        await manager.abort(record.id, reason="aborted")

    async def op() -> None:
        await call.state.store.delete_session(record.id, cascade=cascade)

    try:
        await manager.on_lane(record.id, op)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    manager.forget(record.id)
    call.state.bridge.session_changed(record.id, "delete", deleted=record)
    return {"ok": True, "deleted": True, "sessionId": record.id}


async def sessions_compact(call: Call) -> Any:
    record = await resolve_session(call)
    from sessions.compaction import CompactionError

    try:
        result = await call.state.manager.compact(record.id)
    except CompactionError as exc:
        raise MethodError("INVALID_REQUEST", f"compaction failed: {exc}") from exc
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    return {"ok": True, "compacted": True, "sessionId": record.id, **result.payload()}


async def sessions_abort(call: Call) -> Any:
    record = await resolve_session(call)
    run_id = call.str_param("runId", required=False)
    aborted = await call.state.manager.abort(record.id, reason="aborted", run_id=run_id)
    return {"ok": True, "aborted": bool(aborted), "runIds": aborted}


async def sessions_subscribe(call: Call) -> Any:
    call.conn.outlet.sessions_list = True
    listing = await sessions_list(call)
    return {"subscribed": True, "list": listing}


async def sessions_unsubscribe(call: Call) -> Any:
    call.conn.outlet.sessions_list = False
    return {"subscribed": False}


async def sessions_messages_subscribe(call: Call) -> Any:
    record = await resolve_session(call)
    call.conn.outlet.message_sessions.add(record.id)
    return {"subscribed": True, "key": (record.keys or [None])[0], "sessionId": record.id}


async def sessions_messages_unsubscribe(call: Call) -> Any:
    record = await resolve_session(call)
    call.conn.outlet.message_sessions.discard(record.id)
    return {"subscribed": False, "sessionId": record.id}


async def sessions_events_unsubscribe(call: Call) -> Any:
    record = await resolve_session(call)
    call.conn.outlet.event_sessions.pop(record.id, None)
    call.conn.outlet.held.pop(record.id, None)
    return {"subscribed": False, "sessionId": record.id}


async def sessions_events_subscribe(call: Call) -> Any:
    """The resume call: answer, replay exactly what is missing (or a snapshot when old deltas
    were pruned), then continue live, without gaps or duplicates."""
    record = await resolve_session(call)
    after = call.params.get("afterSeq")
    if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
        raise invalid(call.method, "afterSeq must be a non-negative integer")
    outlet = call.conn.outlet
    store = call.state.store
    # Hold live events for this session while we read the log, so none is lost or repeated. The
    # list is this subscription's: a later subscribe or unsubscribe replaces or removes it.
    held: list[Any] = []
    outlet.held[record.id] = held
    outlet.event_sessions[record.id] = after if after is not None else 0
    first_page: list[Any] = []
    try:
        last_seq = await store.last_seq(record.id)
        if after is None:
            after = last_seq
            outlet.event_sessions[record.id] = last_seq
            replay = "none"
            snapshot = None
        else:
            pruned = await store.pruned_seq(record.id)
            if pruned > after:
                replay = "compacted"
                events = await _read_range(store, record.id, after, last_seq)
                snapshot = _snapshot(record, events, last_seq)
            else:
                replay = "exact"
                snapshot = None
                if after < last_seq:
                    first_page = await store.read_events(record.id, after_seq=after, limit=REPLAY_PAGE)
    except BaseException as exc:
        # No subscription half made: held live events would pile up for a replay never sent.
        if outlet.held.get(record.id) is held:
            outlet.held.pop(record.id, None)
            outlet.event_sessions.pop(record.id, None)
        if isinstance(exc, SessionsError):
            raise from_sessions_error(exc) from exc
        raise
    answer = {
        "subscribed": True,
        "sessionId": record.id,
        "key": (record.keys or [None])[0],
        "lastSeq": last_seq,
        "replay": replay,
    }
    start = after

    def deliver() -> None:
        from gateway.hub import encode_event

        if snapshot is not None:
            outlet.send_event(encode_event("session.snapshot", snapshot))
            _go_live(outlet, record.id, held, last_seq)
        elif start >= last_seq:
            _go_live(outlet, record.id, held, start)
        else:
            task = asyncio.ensure_future(_replay(call, record, held, start, last_seq, page=first_page))
            call.state.track(task)

    call.after_response = deliver
    return answer


REPLAY_PAGE = 500
"""Stored events read (and held in memory) at a time by a resume replay."""


def _go_live(outlet: Any, session_id: str, held: list[Any], delivered: int) -> None:
    """End a replay: send the live events held meanwhile that it did not cover, then let live
    events through. Does nothing when a newer subscribe or an unsubscribe took over."""
    if outlet.held.get(session_id) is not held:
        return
    del outlet.held[session_id]
    for seq, frame in held:
        if seq > delivered:
            outlet.send_event(frame)
            delivered = seq
    outlet.event_sessions[session_id] = max(delivered, outlet.event_sessions.get(session_id, 0))


async def _replay(
    call: Call, record: SessionRecord, held: list[Any], after: int, last_seq: int, *, page: list[Any]
) -> None:
    """Send the stored events in (`after`, `last_seq`] page by page, each one only when the
    connection's buffer has room for it, so a backlog larger than `max_buffered_bytes` is paced
    by the client's reading rather than dropped or closed as a slow consumer. A client that stops
    reading during the replay is closed as a slow consumer once the live events held for it
    outgrow its buffer. Lives until the replay ends or the subscription or connection does."""
    outlet, store, bridge = call.conn.outlet, call.state.store, call.state.bridge
    delivered = after
    try:
        while delivered < last_seq:
            if not page:
                page = await store.read_events(record.id, after_seq=delivered, limit=REPLAY_PAGE)
                if not page:
                    break
            for event in page:
                if event.seq > last_seq:
                    break
                frame = bridge.native_frame_from_record(record, event)
                while outlet.queue and outlet.buffered + frame.size > outlet.max_buffered_bytes:
                    if outlet.closed or outlet.held.get(record.id) is not held:
                        return
                    if sum(f.size for _, f in held) > outlet.max_buffered_bytes:
                        outlet.kill(1008, "slow consumer")
                        return
                    await asyncio.sleep(0.005)
                if outlet.closed or outlet.held.get(record.id) is not held:
                    return
                outlet.send_event(frame)
                delivered = event.seq
            page = []
    except SessionsError:
        # The answer promised an exact replay; a gap is not allowed, so make the client resume.
        outlet.kill(1013, "replay failed; resume again")
        return
    _go_live(outlet, record.id, held, delivered)


async def _read_range(store: Any, session_id: str, after: int, until: int) -> list[Any]:
    out: list[Any] = []
    cursor = after
    while cursor < until:
        batch = await store.read_events(session_id, after_seq=cursor, limit=2000)
        if not batch:
            break
        for event in batch:
            if event.seq > until:
                return out
            out.append(event)
        cursor = batch[-1].seq
    return out


def _snapshot(record: SessionRecord, events: list[Any], last_seq: int) -> dict[str, Any]:
    """`session.snapshot`: the messages committed in `events` and the reply still open."""
    messages = [e.payload.get("message") for e in events if e.type == "message.completed"]
    text, open_id = open_reply(events)
    partial = None if open_id is None else {"messageId": open_id, "role": "assistant", "text": text}
    return {
        "sessionId": record.id,
        "sessionKey": (record.keys or [None])[0],
        "sessionSeq": last_seq,
        "messages": messages,
        "partial": partial,
    }


def _check_model(call: Call, ref: str) -> None:
    try:
        call.state.directory.resolve_model(ref)
    except Exception as exc:
        raise MethodError("INVALID_REQUEST", str(exc)) from exc


def _now() -> int:
    import time

    return int(time.time() * 1000)
