"""File access for the uid runner: the one-off users reach their workspace and nothing else of
the gateway's.

A workspace gets a group of its own (``gid_base`` + a number no sibling workspace uses) and mode
``2770`` (group members read and write; new files inherit the group). Every call of that
workspace runs with that group and umask 007, so files one call creates stay usable by the next.
The state directory becomes ``0711`` so a workspace inside it can be reached by path, and every
other entry in it loses all access for others (``o-rwx``), so the token, the database, the lock
and logs stay unreadable; `seal_home` re-applies this before each call.
"""

from __future__ import annotations

import os
import stat
import zlib
from pathlib import Path

from gateway.sandbox.errors import SandboxUnavailableError

DEFAULT_GID_BASE = 2_000_000_000
GID_COUNT = 65_536


def seal_home(home: Path, keep: Path | None) -> None:
    """Make `home` traversable but not listable, and every entry but `keep` closed to others."""
    os.chmod(home, 0o711)
    for entry in os.scandir(home):
        path = Path(entry.path)
        if keep is not None and path == keep:
            continue
        mode = entry.stat(follow_symlinks=False).st_mode
        if not stat.S_ISLNK(mode) and mode & 0o007:
            os.chmod(path, stat.S_IMODE(mode) & ~0o007)


def _used_groups(workspace: Path) -> set[int]:
    used: set[int] = set()
    parent = workspace.parent
    try:
        for entry in os.scandir(parent):
            if entry.is_dir(follow_symlinks=False) and Path(entry.path) != workspace:
                used.add(entry.stat(follow_symlinks=False).st_gid)
    except OSError:
        pass
    return used


def workspace_group(workspace: Path, gid_base: int = DEFAULT_GID_BASE) -> int:
    """The workspace's group, chosen and applied on first use (see the module docstring).
    Raises `SandboxUnavailableError` when the workspace cannot be prepared."""
    try:
        info = workspace.stat()
        if gid_base <= info.st_gid < gid_base + GID_COUNT and stat.S_IMODE(info.st_mode) == 0o2770:
            return info.st_gid
        used = _used_groups(workspace)
        start = zlib.crc32(str(workspace).encode()) % GID_COUNT
        gid = next(
            gid_base + (start + step) % GID_COUNT
            for step in range(GID_COUNT)
            if gid_base + (start + step) % GID_COUNT not in used
        )
        _give_tree(workspace, gid)
    except OSError as exc:
        raise SandboxUnavailableError(
            f"cannot prepare the workspace {workspace} for the sandbox users: {exc.strerror or exc}"
        ) from exc
    return gid


def _give_tree(workspace: Path, gid: int) -> None:
    """Group `gid` may read and write everything in the workspace; others nothing."""
    os.chown(workspace, 0, gid)
    os.chmod(workspace, 0o2770)
    for root, dirs, files in os.walk(workspace):
        for name in dirs + files:
            path = os.path.join(root, name)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                continue
            os.chown(path, -1, gid)
            mode = stat.S_IMODE(info.st_mode)
            group = 0o060 | (0o010 if mode & 0o100 or stat.S_ISDIR(info.st_mode) else 0)
            extra = 0o2000 if stat.S_ISDIR(info.st_mode) else 0
            os.chmod(path, (mode | group | extra) & ~0o007)


def share_file(path: Path, gid: int) -> None:
    """A file a tool of the daemon wrote becomes the workspace group's to read and write."""
    try:
        info = path.lstat()
        if stat.S_ISREG(info.st_mode):
            os.chown(path, -1, gid)
            os.chmod(path, (stat.S_IMODE(info.st_mode) | 0o060) & ~0o007)
    except OSError:
        pass
