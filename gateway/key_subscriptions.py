"""`KeySubscriptions`: what one connection asked of session keys no session has used yet.

Two kinds, both kept until the hub learns which session the key names (`take`, called by
`Outlet.bind_key` when that session publishes):

- waits (`KeyWait`): a subscribe call answered that no session uses the key yet; the session the
  key comes to name is followed live from its first event. A wait lives until it is cancelled or
  bound, or the connection closes.
- look-ups (`KeyLookup`): a subscribe call is looking the key up in the store right now. A
  session the key comes to name meanwhile has already published when the call learns of it, so
  the outlet holds that session's live events (`Outlet.hold`) and the call resumes it from the
  event log, which holds every event published: nothing reaches the client twice or before the
  call's answer. A look-up lives from `begin_lookup` to `end_lookup`.

At most `KEY_WAIT_LIMIT` keys per connection, both kinds together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from gateway.outlet import Hold

KEY_WAIT_LIMIT = 256
"""Most keys one connection may wait on (or look up) before any session uses them."""


class KeyWait(msgspec.Struct, dict=True):
    """What a connection asked of a key no session has used yet."""

    events_after: int | None = None
    """Follow the session's native events after this `sessionSeq` (None: not asked)."""
    messages: bool = False


class KeyLookup(msgspec.Struct, eq=False, dict=True):
    """A subscribe call looking `key` up."""

    key: str
    session_id: str | None = None
    """The session the key came to name during the look-up (None: none published meanwhile)."""
    hold: Hold | None = None
    """Where that session's live events wait, when the connection did not follow it already."""


class KeySubscriptions:
    """The waits and look-ups of one connection, by key."""

    def __init__(self) -> None:
        self._waits: dict[str, KeyWait] = {}
        self._lookups: dict[str, list[KeyLookup]] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._waits or key in self._lookups

    def waited(self) -> set[str]:
        """Every key waited on or looked up."""
        return set(self._waits) | set(self._lookups)

    def wait(self, key: str, *, events_after: int | None, messages: bool) -> bool:
        """Add to the wait on `key`; False (nothing changed) when the limit is reached."""
        if not self._room_for(key):
            return False
        wait = self._waits.setdefault(key, KeyWait())
        if events_after is not None:
            wait.events_after = events_after
        wait.messages = wait.messages or messages
        return True

    def stop(self, key: str, *, events: bool, messages: bool) -> bool:
        """Cancel part of the wait on `key`; True when there was one to cancel."""
        wait = self._waits.get(key)
        if wait is None:
            return False
        had = (events and wait.events_after is not None) or (messages and wait.messages)
        if events:
            wait.events_after = None
        if messages:
            wait.messages = False
        if wait.events_after is None and not wait.messages:
            del self._waits[key]
        return had

    def begin_lookup(self, key: str) -> KeyLookup | None:
        """None (nothing changed) when the limit is reached."""
        if not self._room_for(key):
            return None
        lookup = KeyLookup(key)
        self._lookups.setdefault(key, []).append(lookup)
        return lookup

    def end_lookup(self, lookup: KeyLookup) -> None:
        looking = self._lookups.get(lookup.key)
        if looking is not None and lookup in looking:
            looking.remove(lookup)
            if not looking:
                del self._lookups[lookup.key]

    def take(self, key: str) -> tuple[KeyWait | None, list[KeyLookup]]:
        """Remove and return what was asked of `key` (the key now names a session)."""
        return self._waits.pop(key, None), self._lookups.pop(key, [])

    def _room_for(self, key: str) -> bool:
        return key in self or len(self.waited()) < KEY_WAIT_LIMIT
