"""Presence: the clients connected to the gateway, as OpenClaw's presence entries, and the changes
connections make to them, sent as changes and coalesced.

A connection gets an entry when its client says it is more than a one-off command (a `mode`
other than `cli`, or an `instanceId`), as OpenClaw does. Entries are keyed by instance id (the
connection id when the client gives none): a client connected twice shows once, with the newest
connection's details, until its last connection closes.

What clients see: `hello-ok` carries the whole list (`snapshot.presence`) with its version
(`snapshot.stateVersion.presence`); after that, `presence` events carry only what changed,
`{"upserted": [entry, ...], "removed": [instanceId, ...]}`, with the version reached in the frame's
`stateVersion`. Applying them by instance id on top of any snapshot or earlier change gives the
current list (an upsert of an entry already shown and a removal of one never shown are harmless);
`system-presence` answers the whole list at any time. The version counts changes, so it may
grow by more than one between two events.

Coalescing: the first change after a quiet `window_s` goes out at once; the changes that follow
within the window are merged (the last state of each instance wins) and go out together when it
ends. A storm of connections therefore costs one event per window however many connect, each
carrying only the entries that changed, instead of the whole list per connection.

`PresenceTable` is sans-I/O (the caller passes the time); `PresenceFeed` runs its timer on the
event loop and hands each batch of changes to a `send` callback. The timer lives while changes
are waiting and ends with `close()`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import msgspec
import structlog

from gateway.protocol.frames import RawJSON, dumps

log = structlog.get_logger("gateway.presence")

WINDOW_S = 0.25
"""Changes that follow a sent batch within this time are merged into the next one."""

_CLIENT_FIELDS = ("mode", "platform", "version", "host")


def presence_entry(
    conn_id: str, client: Mapping[str, Any], scopes: Collection[str], now_ms: int
) -> dict[str, Any] | None:
    """The presence entry of a connection made by `client` (the `connect.client` object), or None
    when the client does not get one (a one-off command: mode `cli` or none, no instance id)."""
    instance = client.get("instanceId")
    if client.get("mode") in (None, "cli") and not instance:
        return None
    entry: dict[str, Any] = {"ts": now_ms, "instanceId": str(instance or conn_id)}
    for name in _CLIENT_FIELDS:
        value = client.get(name)
        if value is not None:
            entry[name] = value
    entry["scopes"] = sorted(scopes)
    return entry


class PresenceChanges(msgspec.Struct, frozen=True):
    """One batch of changes, and the presence version it brings clients to."""

    upserted: list[dict[str, Any]]
    removed: list[str]
    version: int

    def payload(self) -> dict[str, Any]:
        """The `presence` event's payload."""
        return {"upserted": self.upserted, "removed": self.removed}


class PresenceTable:
    """The entries by instance id, the changes not sent yet, and the list as clients last saw
    it. Sans-I/O: times are `time.monotonic()` seconds passed in.

    `hello-ok` carries the published list (as of the last batch, with its version), not the
    current one: the batch that follows brings a new client up to date like every other, so a
    storm does not send the entries of the window twice to each client, and every `hello-ok` of
    a window shares one serialised list.
    """

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self.version = 1
        """Counts changes since start (what `stateVersion.presence` says)."""
        self.published_version = 1
        """The version of the published list (the last batch's)."""
        self._by_conn: dict[str, tuple[str, dict[str, Any], str]] = {}
        """Connection id -> (instance id, its entry, the entry as JSON text)."""
        self._holders: dict[str, dict[str, None]] = {}
        """Instance id -> its connections, oldest first (the newest one's entry is shown)."""
        self._pending: dict[str, tuple[dict[str, Any], str] | None] = {}
        """Instance id -> the entry that shows (and its JSON text), or None when it left, since
        the last batch."""
        self._published: dict[str, str] = {}
        """Instance id -> its entry's JSON text, as of the last batch."""
        self._published_json: str | None = "[]"
        """`published_json()` until the next batch."""
        self._sent_at: float | None = None

    def __len__(self) -> int:
        return len(self._holders)

    def entries(self) -> list[dict[str, Any]]:
        """The whole list now: one entry per instance."""
        return [self._by_conn[self._newest(instance)][1] for instance in self._holders]

    def published_json(self) -> str:
        """The list as of the last batch, as JSON text (kept until the next batch)."""
        if self._published_json is None:
            self._published_json = "[" + ",".join(self._published.values()) + "]"
        return self._published_json

    def connect(self, conn_id: str, entry: dict[str, Any]) -> None:
        """A connection with an entry has authenticated."""
        instance = str(entry["instanceId"])
        self._by_conn[conn_id] = (instance, entry, dumps(entry))
        holders = self._holders.setdefault(instance, {})
        holders.pop(conn_id, None)
        holders[conn_id] = None
        self._changed(instance)

    def disconnect(self, conn_id: str) -> None:
        """A connection closed (nothing happens for one without an entry)."""
        held = self._by_conn.pop(conn_id, None)
        if held is None:
            return
        instance = held[0]
        holders = self._holders[instance]
        newest = next(reversed(holders))
        del holders[conn_id]
        if not holders:
            del self._holders[instance]
            self._changed(instance)
        elif newest == conn_id:
            self._changed(instance)

    def _newest(self, instance: str) -> str:
        """The connection whose entry shows for `instance`."""
        return next(reversed(self._holders[instance]))

    def _changed(self, instance: str) -> None:
        """`instance` now shows its newest connection's entry, or is gone when it has none."""
        self.version += 1
        holders = self._holders.get(instance)
        if holders:
            _, entry, text = self._by_conn[next(reversed(holders))]
            self._pending[instance] = (entry, text)
        else:
            self._pending[instance] = None

    def next_deadline(self) -> float | None:
        """When the waiting changes are due (None: none wait)."""
        if not self._pending:
            return None
        return 0.0 if self._sent_at is None else self._sent_at + self.window_s

    def take(self, now: float) -> PresenceChanges | None:
        """The waiting changes, when they are due at `now`; they become the published list."""
        due = self.next_deadline()
        if due is None or now < due:
            return None
        pending, self._pending = self._pending, {}
        self._sent_at = now
        upserted: list[dict[str, Any]] = []
        removed: list[str] = []
        for instance, shown in pending.items():
            if shown is None:
                removed.append(instance)
                self._published.pop(instance, None)
                continue
            entry, text = shown
            upserted.append(entry)
            self._published[instance] = text
        self._published_json = None
        self.published_version = self.version
        return PresenceChanges(upserted=upserted, removed=removed, version=self.version)


class PresenceFeed:
    """The presence table on the event loop: changes go to `send` as they come, coalesced by the
    table's window. `send` must not block; what it raises is logged and the batch is lost (the
    clients' next `system-presence` or `hello-ok` has the whole list)."""

    def __init__(
        self,
        send: Callable[[PresenceChanges], None],
        *,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.table = PresenceTable(window_s)
        self._send = send
        self._clock = clock
        self._timer: asyncio.TimerHandle | None = None

    @property
    def version(self) -> int:
        return self.table.version

    def entries(self) -> list[dict[str, Any]]:
        return self.table.entries()

    def snapshot(self) -> tuple[RawJSON, int]:
        """The published list, serialised, and its version (what `hello-ok` carries)."""
        return RawJSON(self.table.published_json()), self.table.published_version

    def connect(self, conn_id: str, entry: dict[str, Any]) -> None:
        self.table.connect(conn_id, entry)
        self._flush()

    def disconnect(self, conn_id: str) -> None:
        self.table.disconnect(conn_id)
        self._flush()

    def _flush(self) -> None:
        """Send what is due now, and run the timer for what is due later."""
        if self._timer is not None:
            return
        changes = self.table.take(self._clock())
        if changes is not None:
            try:
                self._send(changes)
            except Exception:
                log.exception("sending presence changes failed")
        due = self.table.next_deadline()
        if due is not None:
            self._timer = asyncio.get_running_loop().call_later(max(0.0, due - self._clock()), self._due)

    def _due(self) -> None:
        self._timer = None
        self._flush()

    def close(self) -> None:
        """Stop the timer (changes still waiting are not sent). Idempotent."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
