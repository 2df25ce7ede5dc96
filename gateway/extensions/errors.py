"""Errors of MCP servers and Python extensions.

Two roots, because two kinds of reader see them. What an operator or a method handler sees
derives from the daemon's `GatewayError`; what the model reads as a failed tool call derives from
the engine's `ToolError` (the agent loop turns it into an error tool result with this message).

ExtensionsError (gateway.errors.GatewayError)
├── TrustError                  an extension's trust state cannot change as asked
│   ├── UnknownExtensionError   no extension of that name was ever discovered
│   └── TrustTransitionError    the change is not allowed from the current state
├── ExtensionLoadError          an enabled extension failed to import or to register (logged and
│                               contained: the daemon carries on without it)
├── ExtensionApiError           an extension used the public API wrongly (a bad tool name, a
│                               name already taken); raised into the extension's `register`
├── ExtensionCommandError       an extension's slash command failed (logged with its traceback;
│                               the message is one line for the user)
├── McpStartError               an MCP server cannot start (no sandbox runner here, a refused
│                               command line, a missing env_from variable, a failed handshake)
├── McpStateError               a server was asked to move between states in a way its state
│                               machine forbids (a bug: the message names the states expected)
└── UnknownServerError          no MCP server of that name is configured

ExtensionToolError (agent_core.ToolError)
├── McpToolError                a call to an MCP server's tool failed
│   ├── McpUnavailableError     the server is not running (starting, restarting after a crash,
│   │                           failed to start, or gone from the configuration)
│   ├── McpTimeoutError         no answer within the server's per-call timeout
│   └── McpConnectionLostError  the server went away during the call
└── ExtensionHookError          a `before_tool_call` hook blocked the call (its reason)

SDK and transport errors (the `mcp` package, anyio, httpx) are translated at the boundary of
`gateway.extensions.mcp_client`; they never reach a caller of the registry.
"""

from __future__ import annotations

from agent_core.errors import ToolError
from gateway.errors import GatewayError


class ExtensionsError(GatewayError):
    """Root of the operator-facing errors of MCP servers and extensions."""


class TrustError(ExtensionsError):
    """An extension's trust state cannot change as asked."""


class UnknownExtensionError(TrustError):
    pass


class TrustTransitionError(TrustError):
    pass


class ExtensionLoadError(ExtensionsError):
    pass


class ExtensionApiError(ExtensionsError):
    pass


class ExtensionCommandError(ExtensionsError):
    pass


class McpStartError(ExtensionsError):
    pass


class McpStateError(ExtensionsError):
    pass


class UnknownServerError(ExtensionsError):
    pass


class ExtensionToolError(ToolError):
    """Root of the tool-call failures the model reads."""


class McpToolError(ExtensionToolError):
    pass


class McpUnavailableError(McpToolError):
    pass


class McpTimeoutError(McpToolError):
    pass


class McpConnectionLostError(McpToolError):
    pass


class ExtensionHookError(ExtensionToolError):
    pass
