"""How a stdio MCP server's process is started: the same confinement as the agent's `bash`.

A sandboxed server (the default) gets the runner the agent's sandbox mode chooses on this
machine (`gateway.sandbox.machine.SandboxMachine.runner`), used exactly as `bash` uses it: the
launcher joins a cgroup when there are controllers, applies the resource limits, forbids gaining
privileges and ties the server's life to the daemon's; bubblewrap gives it no network (unless the
server sets `network = true`), the system read-only, the workspace as the only writable host
directory, and nothing else of the host but the `read_only` paths; the uid runner gives it a
one-off user, held for the server's life. Its first words pass exec mediation like a command
line. When the mode has no runner here, the server does not start and the reason says how to fix
it.

`sandbox = false` starts the server as the daemon's own user, on the host, with the network: only
the environment is scrubbed and its life tied to the daemon's.

Either way the environment is PATH, LANG, TERM, HOME (the agent's workspace), the server's `env`
and its `env_from` values read from the daemon's environment: nothing else of the daemon's (no
API keys, no gateway token).
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.extensions.errors import McpStartError
from gateway.extensions.mcp_config import McpServerConfig
from gateway.sandbox import (
    BwrapRunner,
    SandboxError,
    SandboxMachine,
    SandboxSettings,
    classify,
    resolve_in_workspace,
    scrub_env,
)
from gateway.sandbox.runners import launcher_argv

Audit = Callable[[dict[str, Any]], None]
_RESOLV_CONF = "/etc/resolv.conf"


@dataclass(frozen=True, kw_only=True)
class LaunchPlan:
    """A stdio server's process, ready to start. Call `cleanup()` once it has exited."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    runner: str
    """``bwrap``, ``uid``, ``host`` (mode unsafe-host) or ``unsandboxed`` (`sandbox = false`)."""
    confined: bool
    cleanup: Callable[[], Awaitable[None]]


def server_env(server: McpServerConfig, workspace: Path, source: Mapping[str, str]) -> dict[str, str]:
    """The server's environment (see the module docstring). Raises McpStartError naming the
    variable when an `env_from` variable is not set."""
    env = scrub_env(workspace, (), source=source)
    env.update(server.env)
    for name, variable in server.env_from.items():
        value = source.get(variable)
        if not value:
            raise McpStartError(
                f"MCP server {server.name}: env_from.{name} names the environment variable "
                f"{variable}, which is not set in the daemon's environment"
            )
        env[name] = value
    return env


async def plan_launch(
    server: McpServerConfig,
    *,
    sandbox: SandboxSettings,
    machine: SandboxMachine,
    source_env: Mapping[str, str],
    audit: Audit,
) -> LaunchPlan:
    """Prepare `server`'s process under `sandbox` (the agent's settings). Raises McpStartError
    when it may not or cannot start (no runner here, a refused command line, a working directory
    outside the workspace, a missing `env_from` variable)."""
    if server.command is None:
        raise McpStartError(f"MCP server {server.name} has no command")
    workspace = sandbox.workspace
    workspace.mkdir(parents=True, exist_ok=True)
    words = [server.command, *server.args]
    env = server_env(server, workspace.resolve(), source_env)
    if not server.sandbox:
        cwd = (workspace / server.cwd) if server.cwd is not None else workspace
        audit({"event": "mcp.server_start", "server": server.name, "runner": "unsandboxed", "argv": words})
        return LaunchPlan(
            argv=launcher_argv({}, words),
            env=env,
            cwd=cwd,
            runner="unsandboxed",
            confined=False,
            cleanup=_nothing,
        )
    _mediate(server, words, sandbox, audit)
    try:
        runner = machine.runner(sandbox)
        cwd = resolve_in_workspace(runner.workspace, server.cwd or ".")
    except SandboxError as exc:
        raise McpStartError(
            f"MCP server {server.name} cannot start in the agent's sandbox: {exc} "
            "(or set sandbox = false on the server to run it unconfined)"
        ) from exc
    call = await asyncio.to_thread(runner.cgroups.create, runner.limits)
    await runner.begin()
    try:
        spec: dict[str, Any] = {**runner.spec(cwd), "rlimits": runner.rlimits()}
        if call is not None:
            spec["cgroups"] = call.procs_files
        program = runner.program("exec " + shlex.join(words), cwd)
        if isinstance(runner, BwrapRunner):
            _bwrap_extras(program, server)
    except BaseException:
        await runner.end()
        if call is not None:
            await asyncio.to_thread(call.close)
        raise

    async def cleanup() -> None:
        if call is not None:
            await asyncio.to_thread(call.close)
        await runner.end()

    audit({"event": "mcp.server_start", "server": server.name, "runner": runner.kind, "argv": words})
    return LaunchPlan(
        argv=launcher_argv(spec, program),
        env=env,
        cwd=cwd,
        runner=runner.kind,
        confined=runner.confined,
        cleanup=cleanup,
    )


def _bwrap_extras(argv: list[str], server: McpServerConfig) -> None:
    """The server's `read_only` paths and `network` in bubblewrap's options (in place). The
    binds go after the sandbox's own `/tmp` and workspace mounts, so a path under `/tmp` stays
    visible; `--share-net` must follow `--unshare-all`. The options come before the command, so
    the first occurrence of each marker is bubblewrap's own."""
    binds = [arg for path in server.read_only for arg in ("--ro-bind-try", str(path), str(path))]
    at = argv.index("--remount-ro")
    argv[at:at] = binds
    if server.network:
        at = argv.index("--unshare-all") + 1
        argv[at:at] = ["--share-net", "--ro-bind-try", _RESOLV_CONF, _RESOLV_CONF]


def _mediate(server: McpServerConfig, words: list[str], sandbox: SandboxSettings, audit: Audit) -> None:
    """The server's command line through exec mediation, like a `bash` command."""
    line = shlex.join(words)
    verdict = classify(line)
    threshold = sandbox.threshold
    if not verdict.classes:
        return
    refused = threshold is not None and verdict.risk >= threshold
    audit(
        {
            "event": "sandbox.exec_mediation",
            "tool": "mcp_server",
            "server": server.name,
            "command": line,
            "risk": verdict.risk.label,
            "classes": verdict.classes,
            "decision": "refused" if refused else "allowed",
        }
    )
    if refused:
        raise McpStartError(
            f"MCP server {server.name}: its command line was refused by exec mediation "
            f"({verdict.risk.label} risk: {verdict.reason})"
        )


async def _nothing() -> None:
    return None
