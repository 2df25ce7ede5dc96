"""Subscriptions: the session list (`sessions.subscribe`), committed messages
(`sessions.messages.subscribe`), and the native event stream with its resume call
(`sessions.events.subscribe {afterSeq}`).

A subscription by key may name a key no session has used yet (OpenClaw's Control UI subscribes
to `agent:main:main` before anything was sent): it is accepted when a session could use the key,
and it follows the session from its first event on (`Outlet.wait_for_key`, bound by the hub when
the session publishes). The same holds for the native stream from the start (`afterSeq` 0 or
absent); a later `afterSeq` of a key without a session is NOT_FOUND.

A session may publish while the call is still looking its key up (a watcher subscribing just as
the session's first run starts). Those events are held for the call (`Outlet.begin_key_lookup`)
and the call resumes the session from the event log like any resume: the answer first, then each
event once. When the look-up found no session but the key came to name one meanwhile, the
subscription predates that session, so it is replayed from its start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gateway.hub import Frame, encode_event
from gateway.key_subscriptions import KEY_WAIT_LIMIT
from gateway.methods.base import Call, MethodError, from_sessions_error
from gateway.methods.lookup import first_key, session_named, session_of_key
from gateway.methods.sessions_methods import list_sessions
from gateway.outlet import Hold
from gateway.protocol import params as p
from sessions import EventRecord, SessionRecord, SessionsError
from sessions.session_events import open_reply

if TYPE_CHECKING:
    from gateway.state import GatewayState

REPLAY_PAGE = 500
"""Stored events read (and held in memory) at a time by a resume replay."""


async def sessions_subscribe(call: Call, params: p.SessionsSubscribeParams) -> Any:
    call.conn.outlet.sessions_list = True
    return {"subscribed": True, "list": await list_sessions(call, params)}


async def sessions_unsubscribe(call: Call, params: p.EmptyParams) -> Any:
    call.conn.outlet.sessions_list = False
    return {"subscribed": False}


async def sessions_messages_subscribe(call: Call, params: p.SessionsMessagesSubscribeParams) -> Any:
    outlet = call.conn.outlet
    # Waiting first, then looking: a session that appears meanwhile binds the wait.
    _wait_for_key(call, params.key, messages=True)
    try:
        record = await session_of_key(call, params.key)
    except BaseException:
        outlet.stop_waiting(params.key, messages=True)
        raise
    if record is None:
        return {"subscribed": True, "key": params.key, "sessionId": None}
    outlet.stop_waiting(params.key, messages=True)
    outlet.follow_messages(record.id)
    return {"subscribed": True, "key": first_key(record), "sessionId": record.id}


async def sessions_messages_unsubscribe(call: Call, params: p.SessionsMessagesUnsubscribeParams) -> Any:
    outlet = call.conn.outlet
    outlet.stop_waiting(params.key, messages=True)
    record = await session_of_key(call, params.key)
    if record is None:
        return {"subscribed": False, "sessionId": None}
    outlet.unfollow_messages(record.id)
    return {"subscribed": False, "sessionId": record.id}


async def sessions_events_unsubscribe(call: Call, params: p.SessionsEventsUnsubscribeParams) -> Any:
    outlet = call.conn.outlet
    if params.session_id is None and params.key is not None:
        outlet.stop_waiting(params.key, events=True)
        record = await session_of_key(call, params.key)
        if record is None:
            return {"subscribed": False, "sessionId": None}
    else:
        record = await session_named(call, key=params.key, session_id=params.session_id)
    outlet.unfollow_events(record.id)
    return {"subscribed": False, "sessionId": record.id}


async def sessions_events_subscribe(call: Call, params: p.SessionsEventsSubscribeParams) -> Any:
    """The resume call: answer, replay exactly what is missing (or a snapshot when old deltas
    were pruned), then continue live, without gaps or duplicates."""
    after = params.after_seq
    if params.session_id is None and params.key is not None and not after:
        record, appeared = await _by_key_from_start(call, params.key)
        if record is None:
            replay = "none" if after is None else "exact"
            return {"subscribed": True, "sessionId": None, "key": params.key, "lastSeq": 0, "replay": replay}
        if appeared:
            after = 0
    else:
        record = await session_named(call, key=params.key, session_id=params.session_id)
    return await _resume(call, record, after)


async def _by_key_from_start(call: Call, key: str) -> tuple[SessionRecord | None, bool]:
    """The session `key` names, or None having left a subscription waiting for it; and whether
    the session appeared during the look-up (it is then followed from its start).

    A session the key came to name during the look-up is followed with its live events held
    until the caller resumes it (`_resume`, whose hold replaces that one)."""
    outlet = call.conn.outlet
    lookup = outlet.begin_key_lookup(key)
    if lookup is None:
        raise _too_many_keys()
    try:
        record = await session_of_key(call, key)
    except BaseException:
        outlet.end_key_lookup(lookup)
        _abandon(call, lookup.hold)
        raise
    bound = outlet.end_key_lookup(lookup)
    if record is not None or bound is not None:
        outlet.stop_waiting(key, events=True)  # an earlier call's wait is replaced by this one
    if bound is None:
        if record is None:
            # No await since the look-up ended: the session's first event binds this wait.
            _wait_for_key(call, key, events_after=0)
        return record, False
    if record is not None and record.id == bound:
        return record, False
    try:
        return await session_named(call, session_id=bound), record is None
    except BaseException:
        _abandon(call, lookup.hold)
        raise


def _abandon(call: Call, hold: Hold | None) -> None:
    if hold is not None:
        call.conn.outlet.abandon(hold)


def _wait_for_key(call: Call, key: str, *, events_after: int | None = None, messages: bool = False) -> None:
    if not call.conn.outlet.wait_for_key(key, events_after=events_after, messages=messages):
        raise _too_many_keys()


def _too_many_keys() -> MethodError:
    return MethodError(
        "INVALID_REQUEST",
        f"too many subscriptions to unused keys on this connection (at most {KEY_WAIT_LIMIT})",
    )


async def _resume(call: Call, record: SessionRecord, after: int | None) -> dict[str, Any]:
    outlet = call.conn.outlet
    store = call.state.store
    # Live events of the session are held from here until the replay has caught up, so none is
    # lost or repeated. A later subscribe or unsubscribe replaces the hold.
    hold = outlet.hold(record.id, after or 0)
    snapshot: dict[str, Any] | None = None
    first_page: list[EventRecord] = []
    try:
        last_seq = await store.events.last_seq(record.id)
        if after is None:
            after, replay = last_seq, "none"
        elif await store.events.pruned_seq(record.id) > after:
            replay = "compacted"
            snapshot = _snapshot(record, await _read_range(call, record.id, after, last_seq), last_seq)
        else:
            replay = "exact"
            if after < last_seq:
                first_page = await store.events.read(record.id, after_seq=after, limit=REPLAY_PAGE)
    except BaseException as exc:
        outlet.abandon(hold)
        if isinstance(exc, SessionsError):
            raise from_sessions_error(exc) from exc
        raise
    start = after

    def deliver() -> None:
        if snapshot is not None:
            outlet.send_event(encode_event("session.snapshot", snapshot))
            outlet.release(hold, last_seq)
        elif start >= last_seq:
            outlet.release(hold, start)
        else:
            pages = StoredEvents(call.state, record, first_page)
            outlet.replay(hold, pages, after=start, until=last_seq)

    call.after_response = deliver
    return {
        "subscribed": True,
        "sessionId": record.id,
        "key": first_key(record),
        "lastSeq": last_seq,
        "replay": replay,
    }


class StoredEvents:
    """A session's event log as a replay reads it (`gateway.replay.EventPages`): pages of stored
    events rendered as native frames, the first one read before the answer."""

    def __init__(self, state: GatewayState, record: SessionRecord, first_page: list[EventRecord]) -> None:
        self._state = state
        self._record = record
        self._first: list[EventRecord] | None = first_page or None

    async def after(self, seq: int) -> Sequence[tuple[int, Frame]]:
        page, self._first = self._first, None
        if page is None or not page or page[0].seq <= seq:
            page = await self._state.store.events.read(self._record.id, after_seq=seq, limit=REPLAY_PAGE)
        render = self._state.bridge.native_frame_from_record
        return [(event.seq, render(self._record, event)) for event in page]


async def _read_range(call: Call, session_id: str, after: int, until: int) -> list[EventRecord]:
    out: list[EventRecord] = []
    cursor = after
    while cursor < until:
        batch = await call.state.store.events.read(session_id, after_seq=cursor, limit=2000)
        if not batch:
            break
        for event in batch:
            if event.seq > until:
                return out
            out.append(event)
        cursor = batch[-1].seq
    return out


def _snapshot(record: SessionRecord, events: list[EventRecord], last_seq: int) -> dict[str, Any]:
    """`session.snapshot`: the messages committed in `events` and the reply still open."""
    messages = [e.payload.get("message") for e in events if e.type == "message.completed"]
    text, open_id = open_reply(events)
    partial = None if open_id is None else {"messageId": open_id, "role": "assistant", "text": text}
    return {
        "sessionId": record.id,
        "sessionKey": first_key(record),
        "sessionSeq": last_seq,
        "messages": messages,
        "partial": partial,
    }
