"""Tools from MCP servers and from Python extensions.

- `mcp_config`: the `[[mcp_servers]]` tables;
- `mcp_launch`: a stdio server's process inside the agent's sandbox;
- `mcp_client`: one connection to a server through the official `mcp` SDK (the only module that
  touches the SDK's client side);
- `mcp_results`: a server's answer as a tool result;
- `mcp_server`: one supervised server (state machine, restarts with backoff, idle stop);
- `mcp_tools`: a server's tools as the agent's tools (`<server>__<tool>`);
- `mcp_registry`: every server of every agent;
- `discovery`: finding extensions without importing them;
- `trust`: their trust states (pending, enabled, disabled), stored and audited;
- `extension_api`: the public API an extension's `register(ext)` uses;
- `python_extensions`: the host that loads enabled extensions and holds their registrations;
- `tool_hooks`, `lifecycle_hooks`: extensions' tools and hooks in the running gateway;
- `command_registry`: extensions' slash commands (`registered_commands()`);
- `runtime`: `Extensions`, what the app starts and stops;
- `errors`: the exception trees.

Importing this package imports only the command registry: the rest is imported when used, so a
daemon without MCP servers or extensions loads none of it (and never the `mcp` package).
"""

from __future__ import annotations

from gateway.extensions.command_registry import (
    CommandContext,
    ExtensionCommand,
    registered_commands,
)

__all__ = ["CommandContext", "ExtensionCommand", "registered_commands"]
