"""Bubblewraps a daemon left behind when it was killed, found and ended by the next daemon of the
same state directory.

bubblewrap drops its parent-death signal when it changes credentials while it sets the sandbox
up, and sets it again afterwards; a daemon killed (SIGKILL) in between leaves that bubblewrap
without a parent to die with, waiting for a sandbox that never finishes starting. Each
bubblewrap the sandbox starts carries the daemon's state directory in its own environment
(`runners.OWNER_ENV`, unset inside the sandbox). Only one daemon runs per state directory (its
lock), so at start-up every process that carries this directory's mark is a leftover of an earlier
one: `sweep_leftovers` kills each with its process group.

Linux only (it reads ``/proc``); elsewhere it finds nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import structlog

from gateway.sandbox.runners import OWNER_ENV

__all__ = ["sweep_leftovers"]

log = structlog.get_logger("gateway.sandbox")

PROC = Path("/proc")


def sweep_leftovers(owner: str, proc: Path = PROC) -> list[int]:
    """Kill (SIGKILL, with their process groups) the processes marked as started by a daemon of
    state directory `owner`; return their pids. Processes this user cannot read are skipped."""
    mark = f"{OWNER_ENV}={owner}".encode()
    own = os.getpid()
    own_group = os.getpgid(0)
    found: list[int] = []
    try:
        entries = list(proc.iterdir())
    except OSError:
        return found
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or another user's
            continue
        if mark not in environ.split(b"\0"):
            continue
        pid = int(entry.name)
        with contextlib.suppress(OSError):
            group = os.getpgid(pid)
            if group != own_group:  # a sandbox runs in a session of its own
                os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        found.append(pid)
    if found:
        log.warning("killed sandbox processes an earlier daemon left behind", pids=found, home=owner)
    return found
