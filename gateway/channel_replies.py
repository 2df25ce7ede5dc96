"""From committed session events to the reply events a binding relays.

`ReplyFeed.on_event` is a bridge listener (`Bridge.add_listener`): it sees every committed session
event, in order. For each run it keeps the reply's visible text (`ReplyText`: the text of the
run's assistant messages, joined by blank lines) and hands the bindings cumulative
`ReplyEvent`s: `delta` while the reply streams, then one `final`, `error` or `aborted`.

Who gets a run's reply: the bindings that *own* it, never everyone who listens to the session. A
binding owns a run when one of its inputs started the run or joined it (`claim`, called by the
host's `submit`). A run nobody claimed (one started by the daemon for inputs accepted before a
restart, or by a collect window) is looked up in the input ledger: `lookups` is the queue of such
run ids, worked off by the daemon (`resolve`). Runs started by an operator's `chat.send` have no
owner and are not relayed, even when a chat conversation shares their session key.

Only runs whose `agent.started` this feed saw are relayed. A run cut off by a crash is closed by
recovery with events of its own; its reply is finished from the outbox instead (by editing the
messages already posted), so it must not start a second stream here.

Deltas are coalesced: the text of a run is rebuilt at most once per event-loop pass (the journal
publishes a commit's events in one go); the end of a run is delivered at once, after its last
delta. State lives from a run's `agent.started` to its `agent.finished` (at most `max_runs` runs;
the oldest is dropped with a warning past that). Claims for runs not started yet wait in a cache
of the same size.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from bindings import ReplyEvent, ReplyKind, ReplyListener, ReplyRoute
from sessions import (
    AgentFinished,
    EventPayload,
    MessageCompleted,
    MessageDelta,
    MessageStarted,
    Outcome,
    SessionEvent,
    TerminationReason,
)

log = structlog.get_logger("gateway.channels")

LOOKUP_QUEUE_SIZE = 1024
"""Runs waiting for an owner lookup. When full, the run is not relayed (logged)."""


def reply_kind(termination_reason: str | None) -> ReplyKind:
    """How a run's end shows in a chat: `final` for a normal end, `error`, else `aborted`
    (user abort, shutdown, time limits, a run cut off by a crash, a reason this version does not
    know)."""
    reason = TerminationReason.parse(termination_reason)
    outcome = reason.outcome if reason is not None else Outcome.ABORTED
    if outcome is Outcome.OK:
        return "final"
    if outcome is Outcome.ERROR:
        return "error"
    return "aborted"


def message_text(message: Mapping[str, Any]) -> str:
    """The text blocks of a pi-JSON message, concatenated."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        str(block.get("text") or "")
        for block in content
        if isinstance(block, dict) and block.get("type") == "text"
    )


class ReplyText:
    """The visible text of one run's reply, from its session events in order.

    Each assistant message is a segment: streamed by its text deltas, then replaced by the text
    of the completed message (which also covers deltas pruned from the log). Thinking and tool
    calls are not shown.
    """

    def __init__(self) -> None:
        self._segments: dict[str, str] = {}

    def apply(self, data: EventPayload) -> bool:
        """Take one event's payload; True when the text changed."""
        if isinstance(data, MessageStarted):
            if data.role == "assistant" and data.message_id not in self._segments:
                self._segments[data.message_id] = ""
            return False
        if isinstance(data, MessageDelta):
            message_id = data.message_id
            if data.kind != "text" or message_id is None or message_id not in self._segments:
                return False
            self._segments[message_id] += data.delta
            return bool(data.delta)
        if isinstance(data, MessageCompleted):
            if data.message.get("role") != "assistant":
                return False
            text = message_text(data.message)
            changed = self._segments.get(data.message_id) != text
            self._segments[data.message_id] = text
            return changed
        return False

    @property
    def text(self) -> str:
        return "\n\n".join(s.rstrip() for s in self._segments.values() if s.strip())


@dataclass(frozen=True, kw_only=True)
class Owner:
    """A binding that relays a run: where (`session_key` names its subscription, `route` is the
    fallback destination when it has no subscription for that key)."""

    binding_id: str
    session_key: str
    route: ReplyRoute | None = None


Fallback = Callable[[Owner, ReplyEvent], None]
"""Delivers a reply event to an owner that has no subscription for the run's session key."""


@dataclass
class _Run:
    run_id: str
    text: ReplyText = field(default_factory=ReplyText)
    kind: ReplyKind = "delta"
    owners: dict[str, Owner] = field(default_factory=dict)
    resolved: bool = False


class ReplyFeed:
    def __init__(self, *, fallback: Fallback | None = None, max_runs: int = 4096) -> None:
        self._fallback = fallback
        self._max_runs = max_runs
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        self._claims: OrderedDict[str, dict[str, Owner]] = OrderedDict()
        self._listeners: dict[tuple[str, str], list[ReplyListener]] = {}
        self._dirty: dict[str, None] = {}
        self._flush_handle: asyncio.Handle | None = None
        self.lookups: asyncio.Queue[str] = asyncio.Queue(maxsize=LOOKUP_QUEUE_SIZE)

    @property
    def active_runs(self) -> int:
        return len(self._runs)

    # -- bindings' side ----------------------------------------------------------------------

    def subscribe(self, binding_id: str, session_key: str, listener: ReplyListener) -> Callable[[], None]:
        """Deliver to `listener` the replies of runs `binding_id` owns under `session_key`, until
        the returned function is called. A run already streaming is delivered at once."""
        slot = (binding_id, session_key)
        self._listeners.setdefault(slot, []).append(listener)
        for run in list(self._runs.values()):
            owner = run.owners.get(binding_id)
            if owner is not None and owner.session_key == session_key and run.text.text:
                _call(listener, ReplyEvent(run_id=run.run_id, kind="delta", text=run.text.text))

        def unsubscribe() -> None:
            listeners = self._listeners.get(slot)
            if listeners is not None and listener in listeners:
                listeners.remove(listener)
                if not listeners:
                    del self._listeners[slot]

        return unsubscribe

    def claim(self, run_id: str, owner: Owner) -> None:
        """`owner` relays run `run_id` (its input started or joined the run)."""
        run = self._runs.get(run_id)
        if run is None:
            claims = self._claims.setdefault(run_id, {})
            claims[owner.binding_id] = owner
            self._claims.move_to_end(run_id)
            while len(self._claims) > self._max_runs:
                self._claims.popitem(last=False)
            return
        self._add_owner(run, owner)

    def resolve(self, run_id: str, owners: list[Owner]) -> None:
        """The owners found in the input ledger for a run nobody had claimed (may be none)."""
        run = self._runs.get(run_id)
        if run is None:
            return
        run.resolved = True
        for owner in owners:
            self._add_owner(run, owner)
        if run.kind != "delta":
            self._runs.pop(run_id, None)

    def _add_owner(self, run: _Run, owner: Owner) -> None:
        known = run.owners.get(owner.binding_id)
        run.owners[owner.binding_id] = owner
        run.resolved = True
        if known is None and (run.text.text or run.kind != "delta"):
            self._deliver_to(owner, ReplyEvent(run_id=run.run_id, kind=run.kind, text=run.text.text))

    # -- the bridge's side -------------------------------------------------------------------

    def on_event(self, event: SessionEvent) -> None:
        """Bridge listener: one committed session event (never raises)."""
        run_id = event.run_id
        if run_id is None:
            return
        try:
            if event.name == "agent.started":
                self._started(run_id)
                return
            run = self._runs.get(run_id)
            if run is None:
                return
            if isinstance(event.data, AgentFinished):
                self._finished(run, event.data)
            elif run.text.apply(event.data) and run.owners:
                self._mark_dirty(run_id)
        except Exception:
            log.exception("reply feed failed on an event", event_name=event.name, run_id=run_id)

    def _started(self, run_id: str) -> None:
        if run_id in self._runs:
            return
        run = self._runs[run_id] = _Run(run_id=run_id)
        while len(self._runs) > self._max_runs:
            dropped, _ = self._runs.popitem(last=False)
            log.warning("too many runs to relay; the oldest is no longer followed", run_id=dropped)
        claims = self._claims.pop(run_id, None)
        if claims:
            run.owners.update(claims)
            run.resolved = True
            return
        try:
            self.lookups.put_nowait(run_id)
        except asyncio.QueueFull:
            run.resolved = True
            log.warning("owner lookup queue full; this run's reply is not relayed", run_id=run_id)

    def _finished(self, run: _Run, data: AgentFinished) -> None:
        run.kind = reply_kind(data.termination_reason)
        self._dirty.pop(run.run_id, None)
        if run.owners:
            self._deliver(run, ReplyEvent(run_id=run.run_id, kind=run.kind, text=run.text.text))
        if run.resolved:
            self._runs.pop(run.run_id, None)

    def _mark_dirty(self, run_id: str) -> None:
        self._dirty[run_id] = None
        if self._flush_handle is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._flush()
            return
        self._flush_handle = loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        dirty, self._dirty = self._dirty, {}
        for run_id in dirty:
            run = self._runs.get(run_id)
            if run is None or run.kind != "delta" or not run.owners:
                continue
            text = run.text.text
            if text:
                self._deliver(run, ReplyEvent(run_id=run_id, kind="delta", text=text))

    def _deliver(self, run: _Run, event: ReplyEvent) -> None:
        for owner in list(run.owners.values()):
            self._deliver_to(owner, event)

    def _deliver_to(self, owner: Owner, event: ReplyEvent) -> None:
        listeners = self._listeners.get((owner.binding_id, owner.session_key))
        if listeners:
            for listener in list(listeners):
                _call(listener, event)
        elif self._fallback is not None:
            try:
                self._fallback(owner, event)
            except Exception:
                log.exception("reply fallback failed", run_id=event.run_id, binding=owner.binding_id)

    def close(self) -> None:
        """Forget every run and listener (idempotent)."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._runs.clear()
        self._claims.clear()
        self._listeners.clear()
        self._dirty.clear()


def _call(listener: ReplyListener, event: ReplyEvent) -> None:
    try:
        listener(event)
    except Exception:
        log.exception("reply listener failed", run_id=event.run_id)
