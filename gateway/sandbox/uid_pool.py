"""One-off users for the uid runner: each call runs as a user no other call has at the same time,
so calls cannot signal each other and RLIMIT_NPROC counts exactly one call's processes."""

from __future__ import annotations

import threading

from gateway.sandbox.errors import SandboxUnavailableError

DEFAULT_UID_BASE = 2_000_000_000
DEFAULT_UID_COUNT = 4096


class UidPool:
    """Hands out user ids from ``[base, base + count)``; lives as long as the daemon."""

    def __init__(self, base: int = DEFAULT_UID_BASE, count: int = DEFAULT_UID_COUNT) -> None:
        self.base = base
        self.count = count
        self._used: set[int] = set()
        self._next = 0
        self._lock = threading.Lock()

    @property
    def in_use(self) -> int:
        return len(self._used)

    def allocate(self) -> int:
        """A user id no running call has. Raises `SandboxUnavailableError` when all are taken."""
        with self._lock:
            for step in range(self.count):
                uid = self.base + (self._next + step) % self.count
                if uid not in self._used:
                    self._used.add(uid)
                    self._next = (uid - self.base + 1) % self.count
                    return uid
        raise SandboxUnavailableError(
            f"all {self.count} sandbox users are busy; wait for running commands to finish"
        )

    def release(self, uid: int) -> None:
        """Return `uid` once nothing of its call runs any more."""
        with self._lock:
            self._used.discard(uid)
