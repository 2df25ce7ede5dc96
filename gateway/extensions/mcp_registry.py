"""Every configured MCP server of every agent, by `(agent id, server name)`.

A server object is made the first time a run of its agent needs its tools, and started then; it
belongs to the registry until the daemon stops or a reload changes or removes its table (or the
agent's sandbox settings change), when it is closed and a fresh one is made at the next need.
The registry owns the servers' supervisor tasks (`Background`), so nothing outlives `aclose()`.

Each stdio server of an agent runs inside that agent's sandbox (`mcp_launch`), so a global
server used by two agents runs twice, once per workspace. Its stderr goes to
`<home>/logs/mcp/<agent>-<server>.log` (the previous file is kept as `.log.1` when it passes
`LOG_ROTATE_BYTES` at a start).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog
from mcp import types

from agent_core import AgentTool
from gateway.background import Background
from gateway.config import GatewayConfig
from gateway.extensions.errors import McpStartError, McpUnavailableError, UnknownServerError
from gateway.extensions.mcp_client import HttpTarget, StdioTarget
from gateway.extensions.mcp_config import McpServerConfig
from gateway.extensions.mcp_launch import plan_launch
from gateway.extensions.mcp_server import McpServer, Prepared
from gateway.extensions.mcp_tools import model_tool_name, server_tools
from gateway.sandbox import SandboxMachine, SandboxSettings

log = structlog.get_logger("gateway.extensions.mcp")

LOG_ROTATE_BYTES = 4 * 1024 * 1024
CLOSE_WAIT_S = 10.0
Audit = Callable[[dict[str, Any]], None]


def _no_audit(record: dict[str, Any]) -> None:
    log.warning(str(record.get("event", "mcp.audit")), **{k: v for k, v in record.items() if k != "event"})


class McpRegistry:
    """See the module docstring. `env` is the daemon's environment (for `env_from` and
    `headers_from`)."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        machine: SandboxMachine,
        env: Mapping[str, str],
        backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
    ) -> None:
        self.config = config
        self.machine = machine
        self.env = dict(env)
        self.logs = config.home / "logs" / "mcp"
        self._backoff = (backoff_s, max_backoff_s)
        self._servers: dict[tuple[str, str], tuple[McpServer, SandboxSettings]] = {}
        """`(agent, name)` -> the server and the sandbox settings it was started with."""
        self._audits: dict[tuple[str, str], Audit] = {}
        self._tasks = Background("mcp servers")

    def configured(self, agent_id: str) -> bool:
        """Whether `agent_id` uses any MCP server."""
        return bool(self.config.mcp_servers_for(agent_id))

    def tools_changed(self, agent_id: str) -> bool:
        """Whether a running server of `agent_id` said its tool list changed since it was read
        (the next `tools_for` reads it again)."""
        return any(
            server.tools_stale for (agent, _), (server, _) in self._servers.items() if agent == agent_id
        )

    def any_configured(self) -> bool:
        return any(self.configured(agent) for agent in self.config.agent_ids)

    def configure(self, config: GatewayConfig) -> None:
        """Apply a reloaded configuration: servers whose table changed or went away are closed
        (a fresh one starts at the next need); new ones start when first needed."""
        self.config = config
        for key, (server, _) in list(self._servers.items()):
            agent_id, name = key
            wanted = {cfg.name: cfg for cfg in config.mcp_servers_for(agent_id)}.get(name)
            if wanted != server.config:
                self._retire(key)

    async def tools_for(self, agent_id: str, sandbox: SandboxSettings, audit: Audit) -> list[AgentTool]:
        """The tools of `agent_id`'s servers for one run: starts the servers not running yet (in
        parallel, each bounded by its startup timeout). A server that cannot start contributes
        its last known tools (they answer why it is down), or none."""
        servers = [
            self._server(agent_id, cfg, sandbox, audit) for cfg in self.config.mcp_servers_for(agent_id)
        ]
        lists = await asyncio.gather(*(self._tools_of(server) for server in servers))
        tools: list[AgentTool] = []
        for server, listed in zip(servers, lists, strict=True):
            tools += server_tools(server, listed, audit=audit)
        return tools

    async def _tools_of(self, server: McpServer) -> tuple[types.Tool, ...]:
        try:
            return await server.available_tools()
        except McpUnavailableError:
            return server.tools

    def _server(
        self, agent_id: str, cfg: McpServerConfig, sandbox: SandboxSettings, audit: Audit
    ) -> McpServer:
        key = (agent_id, cfg.name)
        self._audits[key] = audit
        current = self._servers.get(key)
        if (
            current is not None
            and current[0].config == cfg
            and _launch_key(current[1]) == _launch_key(sandbox)
        ):
            return current[0]
        if current is not None:
            self._retire(key)
        server = McpServer(
            cfg,
            agent_id=agent_id,
            prepare=lambda: self._prepare(key, cfg, sandbox),
            background=self._tasks,
            backoff_s=self._backoff[0],
            max_backoff_s=self._backoff[1],
        )
        self._servers[key] = (server, sandbox)
        return server

    def _retire(self, key: tuple[str, str]) -> None:
        server, _ = self._servers.pop(key)
        server.retire()
        self._tasks.spawn(server.aclose(), name=f"mcp-close-{key[0]}-{key[1]}")

    async def _prepare(
        self, key: tuple[str, str], cfg: McpServerConfig, sandbox: SandboxSettings
    ) -> Prepared:
        audit = self._audits.get(key, _no_audit)
        if cfg.url is not None:
            headers = dict(cfg.headers)
            for header, variable in cfg.headers_from.items():
                value = self.env.get(variable)
                if not value:
                    raise McpStartError(
                        f"MCP server {cfg.name}: headers_from.{header} names the environment variable "
                        f"{variable}, which is not set in the daemon's environment"
                    )
                headers[header] = value
            audit({"event": "mcp.server_start", "server": cfg.name, "runner": "http", "url": cfg.url})
            return Prepared(target=HttpTarget(url=cfg.url, headers=headers), runner="http", cleanup=_nothing)
        plan = await plan_launch(cfg, sandbox=sandbox, machine=self.machine, source_env=self.env, audit=audit)
        stderr = self.log_path(*key)
        await asyncio.to_thread(_rotate, stderr)
        target = StdioTarget(argv=plan.argv, env=plan.env, cwd=plan.cwd, stderr_path=stderr)
        return Prepared(target=target, runner=plan.runner, cleanup=plan.cleanup)

    def log_path(self, agent_id: str, name: str) -> Path:
        return self.logs / f"{agent_id}-{name}.log"

    # --- operators ----------------------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """One row per configured server per agent (`mcp.list`)."""
        rows = []
        for agent_id in self.config.agent_ids:
            for cfg in self.config.mcp_servers_for(agent_id):
                entry = self._servers.get((agent_id, cfg.name))
                server = entry[0] if entry is not None and entry[0].config == cfg else None
                state: dict[str, Any] = (
                    server.status()
                    if server is not None
                    else {
                        "state": "stopped",
                        "error": None,
                        "restarts": 0,
                        "pid": None,
                        "runner": None,
                        "retryInMs": None,
                    }
                )
                tools = server.tools if server is not None else ()
                rows.append(
                    {
                        "agentId": agent_id,
                        "name": cfg.name,
                        "transport": cfg.transport,
                        "target": cfg.url
                        if cfg.url is not None
                        else " ".join([cfg.command or "", *cfg.args]),
                        **state,
                        "tools": [model_tool_name(cfg.name, tool.name) for tool in tools],
                        "log": str(self.log_path(agent_id, cfg.name)) if cfg.url is None else None,
                    }
                )
        return rows

    async def restart(self, name: str, agent_id: str | None = None) -> list[dict[str, Any]]:
        """Restart server `name` of `agent_id` (default: of every agent that uses it): a running
        one is stopped and started again, a failed one retries at once, one that was stopped
        (idle) starts again. One an agent never needed yet starts at that agent's next run (it
        runs in the sandbox of that run). Returns the status rows of those servers afterwards.
        Raises UnknownServerError when no such server is configured."""
        agents = [agent_id] if agent_id is not None else list(self.config.agent_ids)
        targets = [
            (agent, cfg) for agent in agents for cfg in self.config.mcp_servers_for(agent) if cfg.name == name
        ]
        if not targets:
            where = f" for agent {agent_id}" if agent_id is not None else ""
            raise UnknownServerError(f"no MCP server named {name!r} is configured{where}")
        servers = []
        for agent, cfg in targets:
            entry = self._servers.get((agent, cfg.name))
            if entry is not None:
                audit = self._audits.get((agent, cfg.name), _no_audit)
                servers.append(self._server(agent, cfg, entry[1], audit))
        await asyncio.gather(*(server.restart() for server in servers), return_exceptions=True)
        keys = {(agent, cfg.name) for agent, cfg in targets}
        return [row for row in self.status() if (row["agentId"], row["name"]) in keys]

    async def aclose(self) -> None:
        """Stop every server (concurrently) and end their tasks. Idempotent."""
        servers = [server for server, _ in self._servers.values()]
        self._servers.clear()
        await asyncio.gather(*(server.aclose() for server in servers), return_exceptions=True)
        # Servers retired by a reload may still be stopping: let them, within bounds.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._tasks.join(), CLOSE_WAIT_S)
        await self._tasks.aclose()


def _launch_key(sandbox: SandboxSettings) -> tuple[Any, ...]:
    """The sandbox settings a running server depends on (a change restarts it)."""
    return (sandbox.workspace, sandbox.mode, sandbox.threshold, sandbox.limits)


def _rotate(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.stat().st_size > LOG_ROTATE_BYTES:
            os.replace(path, path.with_name(path.name + ".1"))


async def _nothing() -> None:
    return None
