"""Command runners that confine `bash`: the `CommandRunner` seam of `agent_core.tools`.

Every runner starts the command through the launcher (`_launch.py`), which joins the call's
cgroups, applies the rlimits, forbids gaining privileges and ties the command's life to the
daemon's before the shell starts. Every runner gives the command a scrubbed environment (no API
keys, no gateway token), a timeout, an output cap and resource limits, and kills everything the
call started when it ends: its process group, its cgroup, and (`UidRunner`) every process of its
one-off user.

- `BwrapRunner`: bubblewrap. No network (every namespace unshared), its own pid namespace (it
  sees and signals only its own processes; they all die with it), the system read-only, the
  workspace the only writable host directory, a private ``/tmp``; nothing else of the host,
  so neither the gateway's state directory nor other workspaces exist inside.
- `UidRunner`: a one-off unprivileged user per call (the daemon must run as root). It cannot
  read the gateway's 0700 state directory or the daemon's ``/proc/<pid>/environ``, and cannot
  signal the daemon or any other call. It shares the host's network, ``/tmp`` and readable files.
- `HostRunner` (mode ``unsafe-host``): the daemon's own user, no confinement beyond the above.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, ClassVar

from agent_core.abort import AbortController, AbortSignal
from agent_core.tools import DEFAULT_OUTPUT_CAP_BYTES, find_shell
from agent_core.tools.runner import (
    DEFAULT_KILL_GRACE_S,
    CommandResult,
    OutputCallback,
    effective_timeout,
    run_process,
)
from gateway.sandbox.cgroups import CallCgroup, Cgroups
from gateway.sandbox.limits import ResourceLimits
from gateway.sandbox.paths import resolve_in_workspace
from gateway.sandbox.uid_pool import UidPool

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LAUNCHER = Path(__file__).with_name("_launch.py")
LIMIT_POLL_S = 0.1
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|CREDENTIALS?|PRIVATE_?KEY|AUTH|"
    r"SESSION|COOKIE|ACCESS_?KEY|DSN)(?:$|_)",
    re.IGNORECASE,
)
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_ENTRIES = (
    "/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ssl",
    "/etc/ca-certificates", "/etc/ca-certificates.conf", "/etc/pki", "/etc/localtime", "/etc/timezone",
    "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/host.conf", "/etc/mime.types",
    "/etc/bash.bashrc", "/etc/profile", "/etc/inputrc", "/etc/terminfo", "/etc/locale.alias",
    "/etc/os-release", "/etc/debian_version", "/etc/gitconfig", "/etc/magic", "/etc/papersize",
)  # fmt: skip
"""The minimal /etc a shell and common tools need; no secrets (shadow, ssh keys) are bound."""


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name suggests a credential (``*_API_KEY``, ``*_TOKEN``)."""
    return _SECRET_NAME.search(name) is not None


def scrub_env(
    workspace: Path,
    allowed: Iterable[str] = (),
    *,
    source: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment a confined command sees.

    Only PATH, LANG and TERM (from `source`, default `os.environ`), HOME set to the workspace, and
    the `allowed` variables (taken from `extra`, then `source`). An allowed name given exactly is
    passed even if it looks secret (the operator asked for it); a glob such as ``LC_*`` never
    passes names that look like credentials.
    """
    origin = os.environ if source is None else source
    env = {
        "PATH": origin.get("PATH") or DEFAULT_PATH,
        "LANG": origin.get("LANG") or "C.UTF-8",
        "TERM": origin.get("TERM") or "dumb",
        "HOME": str(workspace),
    }
    merged = {**origin, **(extra or {})}
    for pattern in allowed:
        if any(char in pattern for char in "*?["):
            for name, value in merged.items():
                if fnmatchcase(name, pattern) and not is_secret_name(name) and name != "HOME":
                    env[name] = value
        elif pattern in merged and pattern != "HOME":
            env[pattern] = merged[pattern]
    return env


def launcher_argv(spec: Mapping[str, Any], program: Sequence[str]) -> list[str]:
    """The command line that starts `program` through the launcher with `spec`."""
    return [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(dict(spec)), "--", *program]


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for path in _SYSTEM_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in _ETC_ENTRIES:
        args += ["--ro-bind-try", path, path]
    return args


OWNER_ENV = "GATEWAY_SANDBOX_OWNER"
"""Set in bubblewrap's own environment to the daemon's state directory (and unset inside the
sandbox): how a later daemon of that directory finds a bubblewrap the last one left behind
(`SandboxMachine.sweep_leftovers`)."""


def bwrap_argv(
    bwrap: str, workspace: Path, cwd: Path, command: Sequence[str], *, extra_ro_binds: Sequence[Path] = ()
) -> list[str]:
    """The bubblewrap command line that runs `command` confined to `workspace`."""
    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    args += ["--unsetenv", OWNER_ENV]
    args += _system_binds()
    for path in extra_ro_binds:
        args += ["--ro-bind-try", str(path), str(path)]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    args += ["--bind", str(workspace), str(workspace)]
    # The sandbox's own root is a scratch tmpfs; make it read-only so only the workspace and the
    # private /tmp take writes.
    args += ["--remount-ro", "/", "--chdir", str(cwd), "--", *command]
    return args


class SandboxRunner:
    """The shared run loop of the runners (a `CommandRunner`).

    One runner serves one call at a time (the sandbox layer makes one per call). After the call,
    `limit_note` says which resource limit ended it, if one did.
    """

    kind: ClassVar[str] = ""
    confined: ClassVar[bool] = True

    def __init__(
        self,
        workspace: Path,
        *,
        limits: ResourceLimits | None = None,
        cgroups: Cgroups | None = None,
        allowed_env: Sequence[str] = (),
        max_timeout_s: float | None = None,
        output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES,
        kill_grace_s: float = DEFAULT_KILL_GRACE_S,
    ) -> None:
        self.workspace = Path(workspace).resolve()
        self.limits = limits or ResourceLimits()
        self.cgroups = cgroups or Cgroups([])
        self.allowed_env = tuple(allowed_env)
        self.max_timeout_s = max_timeout_s
        self.output_cap_bytes = output_cap_bytes
        self.kill_grace_s = kill_grace_s
        self.limit_note: str | None = None

    # hooks
    def program(self, command: str, cwd: Path) -> list[str]:
        return [find_shell(), "-c", command]

    def spec(self, cwd: Path) -> dict[str, Any]:
        """Launcher settings beyond cgroups and rlimits."""
        return {}

    def rlimits(self) -> dict[str, int]:
        return self.limits.rlimits(processes=False, memory=not self.cgroups.limits_memory)

    def marker(self) -> dict[str, str]:
        """Variables for the launched program's own environment, never the command's."""
        return {}

    async def begin(self) -> None:
        """Per-call set-up (before the command starts)."""

    async def end(self) -> None:
        """Per-call clean-up (after everything the command started is gone)."""

    # the run loop
    async def run(
        self,
        command: str,
        *,
        cwd: Path,
        env: Mapping[str, str] | None,
        timeout_s: float | None,
        signal: AbortSignal | None,
        on_output: OutputCallback | None,
    ) -> CommandResult:
        workdir = resolve_in_workspace(self.workspace, cwd)
        self.limit_note = None
        call = await asyncio.to_thread(self.cgroups.create, self.limits)
        stop = AbortController()
        watcher = asyncio.ensure_future(self._watch(call, stop)) if call is not None else None
        try:
            await self.begin()
            spec = {**self.spec(workdir), "rlimits": self.rlimits()}
            if call is not None:
                spec["cgroups"] = call.procs_files
            return await run_process(
                launcher_argv(spec, self.program(command, workdir)),
                cwd=workdir,
                env={**scrub_env(self.workspace, self.allowed_env, extra=env), **self.marker()},
                timeout_s=effective_timeout(timeout_s, self.max_timeout_s),
                signal=AbortSignal.any(signal, stop.signal),
                on_output=on_output,
                output_cap_bytes=self.output_cap_bytes,
                kill_grace_s=self.kill_grace_s,
                kill_group_on_exit=True,
            )
        finally:
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            if call is not None:
                await asyncio.shield(asyncio.to_thread(call.close))
                self._note_oom(call)
            await asyncio.shield(self.end())

    async def _watch(self, call: CallCgroup, stop: AbortController) -> None:
        """Ends the call as soon as the process limit refuses a fork (a fork bomb stops there)."""
        while True:
            await asyncio.sleep(LIMIT_POLL_S)
            if call.limit_hits() > 0:
                self.limit_note = (
                    f"Command stopped: it tried to run more than {self.limits.max_processes} processes "
                    "at once, the sandbox's process limit. Start fewer processes (or ask the operator "
                    "to raise [sandbox] max_processes)."
                )
                stop.abort("process limit")
                return

    def _note_oom(self, call: CallCgroup) -> None:
        if self.limit_note is None and call.oom_kills() > 0:
            self.limit_note = (
                f"A process was killed: the command used more than {self.limits.memory_bytes} bytes of "
                "memory, the sandbox's memory limit."
            )


class BwrapRunner(SandboxRunner):
    """Bubblewrap (see the module docstring). `bwrap` is the executable to run."""

    kind = "bwrap"

    def __init__(self, workspace: Path, *, bwrap: str = "bwrap", extra_ro_binds: Sequence[Path] = (),
                 owner: str | None = None, **kwargs: Any) -> None:  # fmt: skip
        super().__init__(workspace, **kwargs)
        self.bwrap = bwrap
        self.extra_ro_binds = tuple(extra_ro_binds)
        self.owner = owner
        """The daemon's state directory, put in bubblewrap's environment (`OWNER_ENV`)."""

    def marker(self) -> dict[str, str]:
        return {} if self.owner is None else {OWNER_ENV: self.owner}

    def program(self, command: str, cwd: Path) -> list[str]:
        shell = find_shell()
        inner = [shell, "-c", command]
        if self.limits.max_processes is not None:
            # Set inside the sandbox: in its user namespace RLIMIT_NPROC counts only the
            # sandbox's processes (set outside, it would count all of the user's). Root ignores
            # it; the cgroup limits root.
            prelude = f'ulimit -u {self.limits.max_processes} 2>/dev/null; exec "$0" -c "$1"'
            inner = [shell, "-c", prelude, shell, command]
        return bwrap_argv(self.bwrap, self.workspace, cwd, inner, extra_ro_binds=self.extra_ro_binds)


class UidRunner(SandboxRunner):
    """A one-off unprivileged user per call (see the module docstring). `prepare` readies the
    workspace and returns its group; `pool` hands out the users."""

    kind = "uid"

    def __init__(self, workspace: Path, *, pool: UidPool, group: int, **kwargs: Any) -> None:
        super().__init__(workspace, **kwargs)
        self.pool = pool
        self.group = group
        self._uid: int | None = None

    def rlimits(self) -> dict[str, int]:
        # The user is this call's alone, so RLIMIT_NPROC counts exactly the call's processes; a
        # pids cgroup does the same and also reports the refused forks, so it is preferred.
        return self.limits.rlimits(
            processes=not self.cgroups.limits_processes, memory=not self.cgroups.limits_memory
        )

    def spec(self, cwd: Path) -> dict[str, Any]:
        if self._uid is None:
            raise RuntimeError("UidRunner.spec called outside a call")
        return {"uid": self._uid, "gid": self.group, "umask": 0o007}

    async def begin(self) -> None:
        self._uid = self.pool.allocate()

    async def end(self) -> None:
        uid, self._uid = self._uid, None
        if uid is None:
            return
        sweep = await asyncio.create_subprocess_exec(
            *launcher_argv({"uid": uid, "gid": self.group, "kill_uid": True}, ["true"]),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        await sweep.wait()
        self.pool.release(uid)


class HostRunner(SandboxRunner):
    """Mode ``unsafe-host``: the daemon's own user, no isolation (see docs/security.md)."""

    kind = "host"
    confined = False
