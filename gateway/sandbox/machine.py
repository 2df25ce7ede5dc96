"""What this machine can confine commands with, found out once and kept for the daemon's life.

`SandboxMachine` probes each runner by really trying it: bubblewrap starts a sandbox; the uid
runner starts a command as a one-off user and checks that it did change user and cannot list
the state directory, read the daemon's environment or signal the daemon. Then, per sandbox mode:

- ``auto``: bubblewrap if it works, else the uid runner if it works, else nothing: commands are
  refused with the reasons and the fixes;
- ``bwrap`` / ``uid``: that runner or nothing;
- ``unsafe-host``: the daemon's own user, unconfined (never chosen unless named).

`status(mode)` is what `health`/`status` report; `runner(...)` builds the runner of one call.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import msgspec
import structlog

from gateway.sandbox.cgroups import Cgroups
from gateway.sandbox.errors import SandboxUnavailableError
from gateway.sandbox.limits import ResourceLimits
from gateway.sandbox.runners import (
    BwrapRunner,
    HostRunner,
    SandboxRunner,
    UidRunner,
    bwrap_argv,
    launcher_argv,
)
from gateway.sandbox.settings import SandboxMode, SandboxSettings
from gateway.sandbox.uid_pool import DEFAULT_UID_BASE, DEFAULT_UID_COUNT, UidPool
from gateway.sandbox.uid_workspace import DEFAULT_GID_BASE, seal_home, share_file, workspace_group

log = structlog.get_logger("gateway.sandbox")
PROBE_TIMEOUT_S = 10.0


class Probe(msgspec.Struct, frozen=True, dict=True):
    ok: bool
    detail: str


class Choice(msgspec.Struct, frozen=True, dict=True):
    """The runner a mode gets here: `runner` is ``bwrap``, ``uid``, ``host`` or ``None``
    (commands refused, `reason` says why and how to fix it)."""

    mode: SandboxMode
    runner: str | None
    confined: bool
    reason: str

    def describe(self) -> dict[str, Any]:
        return {"mode": self.mode, "runner": self.runner or "none", "confined": self.confined,
                "reason": self.reason}  # fmt: skip


class SandboxMachine:
    """The sandbox runners this machine offers (see the module docstring). Thread-safe."""

    def __init__(
        self,
        *,
        home: Path,
        bwrap: str = "bwrap",
        uid_base: int = DEFAULT_UID_BASE,
        uid_count: int = DEFAULT_UID_COUNT,
        gid_base: int = DEFAULT_GID_BASE,
        cgroups: Cgroups | None = None,
    ) -> None:
        self.home = Path(home).resolve()
        self.bwrap = bwrap
        self.pool = UidPool(uid_base, uid_count)
        self.gid_base = gid_base
        self.cgroups = cgroups if cgroups is not None else Cgroups.discover()
        self._probes: dict[str, Probe] = {}
        self._groups: dict[Path, int] = {}
        self._lock = threading.Lock()

    # --- probing --------------------------------------------------------------------------------

    def probe(self, runner: str) -> Probe:
        """Whether `runner` (``bwrap`` or ``uid``) works here; tried once, then remembered."""
        with self._lock:
            if runner not in self._probes:
                self._probes[runner] = self._probe_bwrap() if runner == "bwrap" else self._probe_uid()
            return self._probes[runner]

    def _probe_bwrap(self) -> Probe:
        path = shutil.which(self.bwrap)
        if path is None:
            return Probe(False, f"bubblewrap ({self.bwrap}) is not installed")
        scratch = Path(tempfile.gettempdir()).resolve()
        try:
            done = subprocess.run(
                bwrap_argv(path, scratch, scratch, ["true"]),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=PROBE_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Probe(False, f"bubblewrap could not start: {exc}")
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip().splitlines()
            detail = said[-1] if said else f"exit {done.returncode}"
            return Probe(False, f"bubblewrap cannot create a sandbox here ({detail})")
        return Probe(True, f"bubblewrap at {path}")

    def _probe_uid(self) -> Probe:
        if os.geteuid() != 0:
            return Probe(False, "the uid runner needs the daemon to run as root")
        if self.pool.count <= 0:
            return Probe(False, "the uid runner is disabled ([sandbox] uid_count = 0)")
        uid = self.pool.allocate()
        try:
            check = (
                f'[ "$(id -u)" = {uid} ] || exit 10; ls {self.home} >/dev/null 2>&1 && exit 11; '
                f"cat /proc/{os.getpid()}/environ >/dev/null 2>&1 && exit 12; "
                f"kill -0 {os.getpid()} 2>/dev/null && exit 13; exit 0"
            )
            argv = launcher_argv({"uid": uid, "gid": self.gid_base, "umask": 0o007}, ["sh", "-c", check])
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=PROBE_TIMEOUT_S, check=False, cwd="/")  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Probe(False, f"the uid runner could not start: {exc}")
        finally:
            self.pool.release(uid)
        failures = {
            10: "the user did not change",
            11: "the state directory was listable",
            12: "the daemon's environment was readable",
            13: "the daemon could be signalled",
        }
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip()
            why = failures.get(done.returncode, said)
            return Probe(False, f"the uid runner does not confine here: {why}")
        return Probe(True, f"one-off users from uid {self.pool.base}")

    # --- choosing -------------------------------------------------------------------------------

    def choose(self, mode: SandboxMode) -> Choice:
        if mode == "unsafe-host":
            reason = "mode unsafe-host: commands run unconfined as the daemon's user"
            return Choice(mode, "host", False, reason)
        candidates = {"auto": ("bwrap", "uid"), "bwrap": ("bwrap",), "uid": ("uid",)}[mode]
        failures = []
        for runner in candidates:
            probe = self.probe(runner)
            if probe.ok:
                return Choice(mode, runner, True, probe.detail)
            failures.append(probe.detail)
        fix = (
            "allow bubblewrap to create namespaces (unprivileged user namespaces, or the container "
            "capabilities docs/security.md lists), or run the daemon as root for the uid runner, or "
            'set [sandbox] mode = "unsafe-host" to run commands unconfined'
        )
        reason = f"no sandbox can confine commands here: {'; '.join(failures)}. Fix: {fix}"
        return Choice(mode, None, False, reason)

    def status(self, mode: SandboxMode, limits: ResourceLimits | None = None) -> dict[str, Any]:
        """The `sandbox` object of `health` and `status`."""
        choice = self.choose(mode)
        return {
            **choice.describe(),
            "limits": (limits or ResourceLimits()).describe(),
            "cgroups": self.cgroups.describe(),
        }

    def announce(self, mode: SandboxMode) -> Choice:
        """Probe for `mode` and log what was chosen (a warning when unconfined or refusing)."""
        choice = self.choose(mode)
        fields = {"mode": mode, "runner": choice.runner or "none", "confined": choice.confined,
                  "reason": choice.reason, "cgroups": self.cgroups.describe()}  # fmt: skip
        if choice.confined:
            log.info("sandbox ready", **fields)
        else:
            log.warning("sandbox not confining", **fields)
        return choice

    # --- runners --------------------------------------------------------------------------------

    def runner(self, settings: SandboxSettings) -> SandboxRunner:
        """The runner of one call for `settings`. Raises `SandboxUnavailableError` with the reason
        and the fix when the mode has no runner here or the workspace cannot be used."""
        choice = self.choose(settings.mode)
        workspace = settings.workspace.resolve()
        if choice.runner != "host" and (workspace == self.home or workspace in self.home.parents):
            raise SandboxUnavailableError(
                f"the workspace {workspace} contains the gateway's state directory {self.home}; "
                "give the agent a workspace of its own"
            )
        common: dict[str, Any] = {
            "limits": settings.limits,
            "cgroups": self.cgroups,
            "allowed_env": settings.allowed_env,
            "max_timeout_s": settings.timeout_s,
            "output_cap_bytes": settings.output_cap_bytes,
        }
        if choice.runner == "bwrap":
            return BwrapRunner(workspace, bwrap=self.bwrap, owner=str(self.home), **common)
        if choice.runner == "uid":
            return UidRunner(workspace, pool=self.pool, group=self.prepare(workspace), **common)
        if choice.runner == "host":
            return HostRunner(workspace, **common)
        raise SandboxUnavailableError(f"bash is unavailable: {choice.reason}")

    def prepare(self, workspace: Path) -> int:
        """Ready `workspace` for the uid runner; returns its group."""
        with self._lock:
            if self.home in workspace.parents:
                seal_home(self.home, keep=self._top_entry(workspace))
                for parent in workspace.parents:
                    if parent == self.home:
                        break
                    os.chmod(parent, (os.stat(parent).st_mode & 0o7770) | 0o001)
            for parent in workspace.parents:
                if parent == self.home or self.home in parent.parents:
                    continue
                if not os.stat(parent).st_mode & 0o001:
                    raise SandboxUnavailableError(
                        f"the sandbox users cannot reach the workspace {workspace}: {parent} is closed "
                        "to other users; allow traversal (chmod o+x) or move the gateway's state "
                        "directory or the workspace"
                    )
            if workspace not in self._groups:
                self._groups[workspace] = workspace_group(workspace, self.gid_base)
            return self._groups[workspace]

    def share(self, workspace: Path, path: Path) -> None:
        """After a file tool wrote `path`, let the uid runner's users use it too."""
        gid = self._groups.get(workspace.resolve())
        if gid is not None:
            share_file(path, gid)

    def _top_entry(self, workspace: Path) -> Path:
        relative = workspace.relative_to(self.home)
        return self.home / relative.parts[0]

    def close(self) -> None:
        self.cgroups.close()
