"""Command runners that confine `bash`: the `CommandRunner` seam of `agent_core.tools`.

`ConfinedRunner` is a plain subprocess kept to the workspace: it starts there, sees a scrubbed
environment (no API keys or tokens), has a timeout and an output cap, and everything it starts
is killed by process group when it ends, times out or is aborted. `BwrapRunner` adds real
isolation with bubblewrap: no network (every namespace unshared), the system read-only, the
workspace the only writable host directory, a private ``/tmp``, and the sandbox dies with us.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from pathlib import Path

from agent_core.tools import DEFAULT_OUTPUT_CAP_BYTES, find_shell
from agent_core.tools.runner import DEFAULT_KILL_GRACE_S, ShellRunner
from gateway.sandbox.errors import SandboxUnavailableError
from gateway.sandbox.paths import resolve_in_workspace

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
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

_bwrap_probe: bool | None = None


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


class ConfinedRunner(ShellRunner):
    """Runs ``bash -c`` in the workspace with a scrubbed environment; nothing it starts outlives it.

    `cwd` must lie inside the workspace (else `PathOutsideWorkspaceError`). `env` passed to
    `run` only contributes the `allowed_env` names. `max_timeout_s` caps every call's timeout.
    """

    kill_group_on_exit = True

    def __init__(
        self,
        workspace: Path,
        *,
        allowed_env: Sequence[str] = (),
        max_timeout_s: float | None = None,
        output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES,
        kill_grace_s: float = DEFAULT_KILL_GRACE_S,
    ) -> None:
        super().__init__(
            output_cap_bytes=output_cap_bytes, max_timeout_s=max_timeout_s, kill_grace_s=kill_grace_s
        )
        self.workspace = Path(workspace).resolve()
        self.allowed_env = tuple(allowed_env)

    def workdir(self, cwd: Path) -> Path:
        return resolve_in_workspace(self.workspace, cwd)

    def child_env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        return scrub_env(self.workspace, self.allowed_env, extra=env)


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


def bwrap_argv(
    workspace: Path, cwd: Path, command: Sequence[str], *, extra_ro_binds: Sequence[Path] = ()
) -> list[str]:
    """The bubblewrap command line that runs `command` confined to `workspace`."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailableError(
            "bubblewrap (bwrap) is not installed; install it or use the confined sandbox mode"
        )
    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    args += _system_binds()
    for path in extra_ro_binds:
        args += ["--ro-bind-try", str(path), str(path)]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    args += ["--bind", str(workspace), str(workspace)]
    # The sandbox's own root is a scratch tmpfs; make it read-only so only the workspace and the
    # private /tmp take writes.
    args += ["--remount-ro", "/", "--chdir", str(cwd), "--", *command]
    return args


def bwrap_available(*, refresh: bool = False) -> bool:
    """Whether bubblewrap can actually start a sandbox here (installed and allowed to create
    namespaces). Tries a trivial run once and caches the answer; `refresh` tries again."""
    global _bwrap_probe
    if _bwrap_probe is not None and not refresh:
        return _bwrap_probe
    _bwrap_probe = False
    if shutil.which("bwrap") is not None:
        scratch = Path(tempfile.gettempdir()).resolve()
        try:
            probe = subprocess.run(
                bwrap_argv(scratch, scratch, ["true"]),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=10,
                check=False,
            )
            _bwrap_probe = probe.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _bwrap_probe = False
    return _bwrap_probe


class BwrapRunner(ConfinedRunner):
    """`ConfinedRunner` inside a bubblewrap sandbox: no network, read-only system, only the
    workspace writable, private ``/tmp``. Raises `SandboxUnavailableError` if bwrap is missing."""

    def __init__(
        self,
        workspace: Path,
        *,
        allowed_env: Sequence[str] = (),
        max_timeout_s: float | None = None,
        output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES,
        kill_grace_s: float = DEFAULT_KILL_GRACE_S,
        extra_ro_binds: Sequence[Path] = (),
    ) -> None:
        super().__init__(
            workspace,
            allowed_env=allowed_env,
            max_timeout_s=max_timeout_s,
            output_cap_bytes=output_cap_bytes,
            kill_grace_s=kill_grace_s,
        )
        self.extra_ro_binds = tuple(extra_ro_binds)

    def argv(self, command: str, cwd: Path) -> list[str]:
        return bwrap_argv(
            self.workspace, cwd, [find_shell(), "-c", command], extra_ro_binds=self.extra_ro_binds
        )
