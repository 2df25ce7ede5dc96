"""One daemon per state directory: an exclusive lock on `<home>/gateway.lock`.

The lock is an `flock` on an open file, so the kernel drops it when the process ends however it
ends (no stale lock after a crash), and it conflicts between any two open files, including two in
the same process. The file holds the pid of the holder, for the message another process gets. The
file itself is left in place on release: deleting it could let two processes lock two different
files of the same name.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from types import TracebackType

from sessions.errors import StateDirLocked

__all__ = ["LOCK_FILE", "StateDirLock"]

LOCK_FILE = "gateway.lock"


class StateDirLock:
    """Hold `home/gateway.lock` exclusively from `acquire()` (or entering the context) until
    `release()` / `aclose()` (idempotent) or the process ends.

    `acquire()` creates `home` (mode 0700) when missing and raises StateDirLocked, naming the pid
    of the holder and the directory, when another holder exists.
    """

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.path = self.home / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise StateDirLocked(self.home, holder) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the last descriptor of the file drops the flock

    async def aclose(self) -> None:
        self.release()

    def __enter__(self) -> StateDirLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    async def __aenter__(self) -> StateDirLock:
        self.acquire()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
