"""`Extensions`: the daemon's MCP servers and Python extensions, as the rest of the gateway sees
them. The app makes one when it starts (`start`) and closes it when it stops (`aclose`); the
tools factory asks it for each run's extra tools and hooks (`run_extras`); the `mcp.*` and
`extensions.*` methods go through it.

Nothing is imported or started that is not needed: the MCP registry (and with it the `mcp`
package) only once a `[[mcp_servers]]` table exists (at start or after a reload), the extension
host's discovery only when an extension is installed or dropped into `<home>/extensions` (or an
operator asks for the list), an extension's code only once it is enabled. Extensions' run and
message hooks listen to the bridge only while a loaded extension has such hooks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import structlog

from agent_core import AgentTool
from gateway.extensions.discovery import extensions_present

if TYPE_CHECKING:
    from gateway.bridge import Bridge
    from gateway.config import GatewayConfig
    from gateway.extensions.extension_api import AfterToolHook, BeforeToolHook, Registrations
    from gateway.extensions.lifecycle_hooks import LifecycleHooks
    from gateway.extensions.mcp_registry import McpRegistry
    from gateway.extensions.python_extensions import ExtensionHost
    from gateway.extensions.trust import TrustRecord, TrustState
    from gateway.sandbox import SandboxMachine, SandboxSettings
    from sessions.db import Database

log = structlog.get_logger("gateway.extensions")

Audit = Callable[[dict[str, Any]], None]


class RunExtras(msgspec.Struct, kw_only=True, dict=True):
    """What MCP servers and extensions add to one run's tools."""

    tools: list[AgentTool] = msgspec.field(default_factory=list)
    before: list[tuple[str, BeforeToolHook]] = msgspec.field(default_factory=list)
    after: list[tuple[str, AfterToolHook]] = msgspec.field(default_factory=list)


class Extensions:
    """See the module docstring."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        database: Database,
        bridge: Bridge,
        machine: SandboxMachine,
        env: Mapping[str, str],
    ) -> None:
        self.config = config
        self.home: Path = config.home
        self._database = database
        self._bridge = bridge
        self._machine = machine
        self._env = dict(env)
        self.mcp: McpRegistry | None = None
        self._host: ExtensionHost | None = None
        self._hooks: LifecycleHooks | None = None
        self._unlisten: Callable[[], None] | None = None

    async def start(self) -> None:
        """Start what the configuration and the state directory call for (see the module
        docstring). A failure to read the trust table is logged; the daemon runs without
        extensions then."""
        self._configure_mcp(self.config)
        if extensions_present(self.home):
            try:
                await self.host().refresh()
            except Exception:
                log.exception("could not load the extensions; the gateway runs without them")
            self._sync_hooks()

    def active(self, agent_id: str) -> bool:
        """Whether a run of `agent_id` gets anything from here (else the factory skips us)."""
        mcp = self.mcp is not None and self.mcp.configured(agent_id)
        return mcp or (self._host is not None and bool(self._host.loaded()))

    def tools_changed(self, agent_id: str) -> bool:
        """Whether `agent_id`'s tools changed since a run last read them (an MCP server announced
        a new list); a running run then asks for them again before its next turn."""
        return self.mcp is not None and self.mcp.tools_changed(agent_id)

    async def run_extras(
        self, agent_id: str, sandbox: SandboxSettings, audit: Audit, session_id: str
    ) -> RunExtras:
        """The MCP tools, extension tools and tool hooks of one run of `agent_id`."""
        extras = RunExtras()
        if self.mcp is not None and self.mcp.configured(agent_id):
            extras.tools += await self.mcp.tools_for(agent_id, sandbox, audit)
        host = self._host
        if host is not None and host.loaded():
            from gateway.extensions.tool_hooks import extension_tools

            extras.tools += extension_tools(host.tools(), session_id=session_id, agent_id=agent_id)
            for loaded in host.loaded():
                extras.before += [(loaded.name, hook) for hook in loaded.registered.before_tool]
                extras.after += [(loaded.name, hook) for hook in loaded.registered.after_tool]
        return extras

    async def reload(self, config: GatewayConfig) -> None:
        """Apply a reloaded configuration: `[[mcp_servers]]` live, and a new look for extensions."""
        self.config = config
        self._configure_mcp(config)
        if self._host is not None or extensions_present(self.home):
            try:
                await self.host().refresh()
            except Exception:
                log.exception("could not refresh the extensions")
            self._sync_hooks()

    def _configure_mcp(self, config: GatewayConfig) -> None:
        if self.mcp is not None:
            self.mcp.configure(config)
            return
        if not any(config.mcp_servers_for(agent) for agent in config.agent_ids):
            return
        from gateway.extensions.mcp_registry import McpRegistry

        self.mcp = McpRegistry(config, machine=self._machine, env=self._env)

    # --- MCP methods ---------------------------------------------------------------------------

    def mcp_status(self) -> list[dict[str, Any]]:
        return self.mcp.status() if self.mcp is not None else []

    async def mcp_restart(self, name: str, agent_id: str | None) -> list[dict[str, Any]]:
        """Raises UnknownServerError when no such server is configured."""
        if self.mcp is None:
            from gateway.extensions.errors import UnknownServerError

            raise UnknownServerError(f"no MCP server named {name!r} is configured")
        return await self.mcp.restart(name, agent_id)

    # --- extension methods -----------------------------------------------------------------------

    def host(self) -> ExtensionHost:
        if self._host is None:
            from gateway.extensions.python_extensions import ExtensionHost
            from gateway.extensions.trust import TrustStore

            self._host = ExtensionHost(self.home, TrustStore(self._database))
        return self._host

    async def extensions_status(self) -> dict[str, Any]:
        """Discover again, then every extension ever found (`extensions.list`). Raises sessions'
        StoreError when the trust table cannot be used."""
        host = self.host()
        await host.refresh()
        self._sync_hooks()
        return {"extensions": host.status(), "problems": list(host.problems())}

    async def set_extension_state(self, name: str, state: TrustState, actor: str) -> TrustRecord:
        """Enable or disable extension `name` (see `ExtensionHost.set_state`)."""
        host = self.host()
        await host.refresh()
        record = await host.set_state(name, state, actor)
        self._sync_hooks()
        return record

    def extension_row(self, name: str) -> dict[str, Any] | None:
        host = self._host
        return next((row for row in host.status() if row["name"] == name), None) if host else None

    # --- lifecycle hooks ---------------------------------------------------------------------------

    def _sources(self) -> list[tuple[str, Registrations]]:
        host = self._host
        return [(loaded.name, loaded.registered) for loaded in host.loaded()] if host is not None else []

    def _sync_hooks(self) -> None:
        wanted = any(registered.has_lifecycle_hooks for _, registered in self._sources())
        if wanted and self._unlisten is None:
            from gateway.extensions.lifecycle_hooks import LifecycleHooks

            if self._hooks is None:
                self._hooks = LifecycleHooks(self._sources)
                self._hooks.start()
            self._unlisten = self._bridge.add_listener(self._hooks.on_event)
        elif not wanted and self._unlisten is not None:
            self._unlisten()
            self._unlisten = None

    async def aclose(self) -> None:
        """Stop every MCP server and the hooks' worker. Idempotent."""
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        if self._hooks is not None:
            await self._hooks.aclose()
        if self.mcp is not None:
            await self.mcp.aclose()
