"""Control groups for sandboxed calls: a process limit and a memory limit for the whole call, a
count of forks refused at the limit, and a way to kill everything a call started.

`Cgroups.discover()` looks for controllers the daemon may create children in: cgroup v1 ``pids``
and ``memory`` hierarchies (each mounted on its own), or cgroup v2 where the daemon's own cgroup
can give ``pids`` (and ``memory``) to its children. It actually creates a child to find out.
Each call gets `CallCgroup`s named ``gateway-<daemon pid>/call-<n>`` below the daemon's own
cgroup; the launcher moves the command into them before it starts, so everything the command
forks stays inside (a process cannot leave without write access to the cgroup file system, which
the sandbox never grants). The directories live as long as the call.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from pathlib import Path

import msgspec

from gateway.sandbox.limits import ResourceLimits

_V1_ROOT = Path("/sys/fs/cgroup")
_KILL_ROUNDS = 50


class _Controller(msgspec.Struct, frozen=True, dict=True):
    name: str
    """``pids`` or ``memory`` (v1), ``unified`` (v2: both in one directory)."""
    base: Path
    """The daemon's directory for calls (created by `discover`)."""


def _own_paths() -> dict[str, str]:
    """Controller name -> the daemon's cgroup path, from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else ["unified"]:
            paths[name] = path
    return paths


def _v2_mount() -> Path | None:
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split(" - ", 1)
        if len(fields) == 2 and fields[1].split(" ", 1)[0] == "cgroup2":
            return Path(line.split(" ")[4])
    return None


def _try_base(directory: Path, wanted: str) -> Path | None:
    """Create the daemon's directory of calls in `directory`; ``None`` unless `wanted` (a file a
    working controller provides) shows up in a child."""
    base = directory / f"gateway-{os.getpid()}"
    try:
        base.mkdir(exist_ok=True)
        probe = base / "probe"
        probe.mkdir(exist_ok=True)
        usable = (probe / wanted).exists() and os.access(probe / wanted, os.W_OK)
        probe.rmdir()
    except OSError:
        return None
    if not usable:
        with contextlib.suppress(OSError):
            base.rmdir()
        return None
    return base


class CallCgroup:
    """The cgroups of one call. `procs_files` are what the launcher joins."""

    def __init__(self, directories: list[Path], events: Path | None) -> None:
        self.directories = directories
        self._events = events

    @property
    def procs_files(self) -> list[str]:
        return [str(directory / "cgroup.procs") for directory in self.directories]

    def limit_hits(self) -> int:
        """How many forks the process limit refused so far."""
        if self._events is None:
            return 0
        try:
            for line in self._events.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "max":
                    return int(value)
        except (OSError, ValueError):
            return 0
        return 0

    def oom_kills(self) -> int:
        """How many processes the memory limit killed."""
        for directory in self.directories:
            for name in ("memory.oom_control", "memory.events"):
                with contextlib.suppress(OSError, ValueError):
                    for line in (directory / name).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill" and int(value) > 0:
                            return int(value)
        return 0

    def pids(self) -> set[int]:
        found: set[int] = set()
        for directory in self.directories:
            with contextlib.suppress(OSError, ValueError):
                found |= {int(pid) for pid in (directory / "cgroup.procs").read_text().split()}
        return found

    def close(self) -> None:
        """Kill every process left in the call's cgroups and remove them. Blocking (a few ms);
        idempotent."""
        for _ in range(_KILL_ROUNDS):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        for directory in self.directories:
            with contextlib.suppress(OSError):
                directory.rmdir()


class Cgroups:
    """The controllers this daemon may use for its calls (found once by `discover`)."""

    def __init__(self, controllers: list[_Controller]) -> None:
        self._controllers = controllers
        self._numbers = itertools.count(1)

    @classmethod
    def discover(cls) -> Cgroups:
        """Find usable controllers; never raises (none found means none used)."""
        own = _own_paths()
        found: list[_Controller] = []
        v2 = _v2_mount()
        for name, wanted in (("pids", "pids.max"), ("memory", "memory.limit_in_bytes")):
            if name in own and (_V1_ROOT / name).is_dir():
                base = _try_base(_V1_ROOT / name / own[name].lstrip("/"), wanted)
                if base is not None:
                    found.append(_Controller(name, base))
        if not found and v2 is not None and "unified" in own:
            own_dir = v2 / own["unified"].lstrip("/")
            with contextlib.suppress(OSError):
                (own_dir / "cgroup.subtree_control").write_text("+pids +memory")
            base = _try_base(own_dir, "pids.max")
            if base is not None:
                with contextlib.suppress(OSError):
                    (base / "cgroup.subtree_control").write_text("+pids +memory")
                found.append(_Controller("unified", base))
        return cls(found)

    @property
    def limits_processes(self) -> bool:
        return any(c.name in ("pids", "unified") for c in self._controllers)

    @property
    def limits_memory(self) -> bool:
        return any(
            c.name == "memory" or (c.name == "unified" and (c.base / "cgroup.subtree_control").exists())
            for c in self._controllers
        )

    def describe(self) -> str:
        if not self._controllers:
            return "none"
        return ", ".join(f"{c.name} ({c.base.parent})" for c in self._controllers)

    def create(self, limits: ResourceLimits) -> CallCgroup | None:
        """The cgroups of a new call with `limits` set; ``None`` when there are no controllers.
        Raises `OSError` when the directories cannot be created."""
        if not self._controllers:
            return None
        number = next(self._numbers)
        directories: list[Path] = []
        events: Path | None = None
        try:
            for controller in self._controllers:
                directory = controller.base / f"call-{number}"
                directory.mkdir()
                directories.append(directory)
                if controller.name in ("pids", "unified") and limits.max_processes is not None:
                    (directory / "pids.max").write_text(str(limits.max_processes))
                    events = directory / "pids.events"
                if limits.memory_bytes is not None:
                    if controller.name == "memory":
                        (directory / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
                    elif controller.name == "unified" and (directory / "memory.max").exists():
                        (directory / "memory.max").write_text(str(limits.memory_bytes))
        except OSError:
            CallCgroup(directories, None).close()
            raise
        return CallCgroup(directories, events)

    def close(self) -> None:
        """Remove the daemon's (empty) directories of calls."""
        for controller in self._controllers:
            with contextlib.suppress(OSError):
                controller.base.rmdir()
