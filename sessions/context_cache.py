"""Sessions' current contexts, kept parsed in memory so that a run does not read and parse its
history again.

A session's context is what `sessions.context.build_context` makes of its transcript from the
newest compaction on (`Store.transcript.context_entries`). `ContextCache` keeps it per session,
in LRU order within a byte budget, and keeps it equal to what a fresh read would give:

- every entry the journal commits for a cached session is applied as a read would see it
  (`committed`): a message is parsed from the JSON text the store wrote and appended; a
  compaction replaces what came before its first kept message by its summary. A compaction whose
  first kept entry is not one of the cached messages drops the context instead (the next run
  reads it);
- a cached context remembers how many entries of its own the session had when it was last
  current (`SessionRecord.entry_count`). A run asks for it with the count it has just read from
  the store (`get`): a context that does not match (entries written around the journal, by a
  restore or another program) is dropped and read again.

Size: each message is charged twice the length of its stored JSON, what a parsed message costs
at most (`bench.agent_loop` prints "bytes per parsed message"). The least recently used contexts
go when the total passes the budget (`budget()`, read at each use so a config reload applies at
once); a context larger than the whole budget is not kept.

Admission: a context read after a miss is kept only if it fits without evicting anything, or if
its session has been used more often lately than the least recently used context it would
evict. Plain LRU keeps nothing useful when more sessions take turns than the budget holds (each
session's context is evicted just before its next run, so every run reads and parses its whole
history); this way the contexts kept stay kept, and a session used more often than they are
takes its place. "Lately": each look-up of a session's context (`get`, once per run) counts one,
and all counts are halved every `AGING_FACTOR` look-ups per kept context (at least
`MIN_AGING_USES`), which forgets sessions no longer used and bounds what the counts hold.

Lifetime: a context lives until its session's live session is dropped (`drop`), until it is
evicted for room, or until a commit it cannot follow drops it.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec

from agent_core import AgentMessage, parse_message_json
from sessions._json import dumps
from sessions.context import summary_message, view_of
from sessions.records import ContextEntry, NewEntry

__all__ = ["ContextCache"]

_BYTES_PER_CHAR = 2
"""What one character of stored JSON is charged once parsed."""
AGING_FACTOR = 8
MIN_AGING_USES = 1_000


class _Context(msgspec.Struct):
    """One session's context: the compaction summary (or None), the kept messages with their
    entry ids, its charged size, and the session's own entry count it matches."""

    summary: AgentMessage | None
    ids: list[str | None] = msgspec.field(default_factory=list)
    messages: list[AgentMessage] = msgspec.field(default_factory=list)
    sizes: list[int] = msgspec.field(default_factory=list)
    size: int = 0
    entry_count: int = 0


class ContextCache:
    """The contexts of one manager's sessions; see the module docstring. `budget()` returns the
    byte budget in force (0 keeps nothing)."""

    def __init__(self, budget: Callable[[], int]) -> None:
        self._budget = budget
        # Most recently used last.
        self._contexts: OrderedDict[str, _Context] = OrderedDict()
        self._size = 0
        self._uses: dict[str, int] = {}
        """Recent uses per session (admission; see the module docstring)."""
        self._since_aging = 0

    def __len__(self) -> int:
        return len(self._contexts)

    @property
    def size(self) -> int:
        """Bytes charged for the contexts kept now."""
        return self._size

    def get(self, session_id: str, entry_count: int) -> list[AgentMessage] | None:
        """A new list of the session's context messages, or None when it is not cached or was
        cached at another own-entry count than `entry_count` (then it is dropped)."""
        self._used(session_id)
        context = self._contexts.get(session_id)
        if context is None:
            return None
        if context.entry_count != entry_count:
            self.drop(session_id)
            return None
        self._contexts.move_to_end(session_id)
        head = [] if context.summary is None else [context.summary]
        return [*head, *context.messages]

    def fill(self, session_id: str, entry_count: int, entries: Sequence[ContextEntry]) -> list[AgentMessage]:
        """The context built from a fresh read of the session's context entries (as
        `build_context` builds it), kept for the session at `entry_count` own entries when it
        fits the budget."""
        view = view_of(entries)
        summary = None if view.compaction is None else summary_message(view.compaction)
        texts = {entry.id: len(entry.payload) for entry in entries}
        context = _Context(summary, entry_count=entry_count)
        for entry_id, message in view.messages:
            context.ids.append(entry_id)
            context.messages.append(message)
            context.sizes.append(texts.get(entry_id, 0) * _BYTES_PER_CHAR)
        context.size = sum(context.sizes) + _summary_size(view.compaction)
        self.drop(session_id)
        if self._admits(session_id, context.size):
            self._keep(session_id, context)
        head = [] if summary is None else [summary]
        return [*head, *context.messages]

    def committed(self, session_id: str, entries: Iterable[NewEntry]) -> None:
        """Apply entries the journal has just committed for the session (in order) to its
        cached context, if it has one."""
        context = self._contexts.get(session_id)
        if context is None:
            return
        before = context.size
        for entry in entries:
            context.entry_count += 1
            if entry.kind == "message":
                text = dumps(entry.payload)
                context.ids.append(entry.id)
                context.messages.append(parse_message_json(text))
                context.sizes.append(len(text) * _BYTES_PER_CHAR)
                context.size += context.sizes[-1]
            elif entry.kind == "compaction" and not _compact(context, entry.payload):
                self._size += context.size - before
                self.drop(session_id)
                return
        self._size += context.size - before
        self._evict()

    def drop(self, session_id: str) -> None:
        """Forget the session's context (the next run reads it)."""
        context = self._contexts.pop(session_id, None)
        if context is not None:
            self._size -= context.size

    def clear(self) -> None:
        self._contexts.clear()
        self._size = 0

    def _used(self, session_id: str) -> None:
        self._uses[session_id] = self._uses.get(session_id, 0) + 1
        self._since_aging += 1
        if self._since_aging >= max(MIN_AGING_USES, AGING_FACTOR * len(self._contexts)):
            self._since_aging = 0
            self._uses = {sid: count // 2 for sid, count in self._uses.items() if count > 1}

    def _admits(self, session_id: str, size: int) -> bool:
        """Whether a context of `size` bytes read for the session is kept: it fits as things are,
        or the session's recent uses outnumber those of the context that would go first."""
        if self._size + size <= self._budget() or not self._contexts:
            return True
        victim = next(iter(self._contexts))
        return self._uses.get(session_id, 0) > self._uses.get(victim, 0)

    def _keep(self, session_id: str, context: _Context) -> None:
        if context.size > self._budget():
            return
        self._contexts[session_id] = context
        self._size += context.size
        self._evict()

    def _evict(self) -> None:
        budget = self._budget()
        while self._size > budget and self._contexts:
            _, context = self._contexts.popitem(last=False)
            self._size -= context.size


def _compact(context: _Context, payload: dict[str, Any]) -> bool:
    """Make `context` what a read gives after a new compaction entry with `payload`: its summary,
    then the cached messages from its first kept entry on (none when it names no entry). False
    when the first kept entry is not a cached message: only a read can tell then."""
    stored: dict[str, Any] = json.loads(dumps(payload))  # the payload as a read returns it
    first_kept = stored.get("firstKeptEntryId")
    if first_kept is None:
        start = len(context.messages)
    elif first_kept in context.ids:
        start = context.ids.index(first_kept)
    else:
        return False
    del context.ids[:start], context.messages[:start], context.sizes[:start]
    context.summary = summary_message(stored)
    context.size = sum(context.sizes) + _summary_size(stored)
    return True


def _summary_size(compaction: dict[str, Any] | None) -> int:
    return 0 if compaction is None else len(str(compaction.get("summary", ""))) * _BYTES_PER_CHAR
