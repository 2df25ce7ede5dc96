"""Errors of the sandbox layer.

They derive from the engine's `ToolError`, so a refused call becomes an error tool result the
model reads; each message says what was refused and what to do instead.

SandboxError (agent_core.ToolError)
├── PathOutsideWorkspaceError   a file tool's path resolves outside the workspace
├── CommandRefusedError         exec mediation classified a command at or above the threshold
└── SandboxUnavailableError     the configured isolation cannot run on this machine
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core.errors import ToolError

if TYPE_CHECKING:
    from gateway.sandbox.exec_mediation import Classification


class SandboxError(ToolError):
    """Root of the sandbox's errors."""


class PathOutsideWorkspaceError(SandboxError):
    pass


class CommandRefusedError(SandboxError):
    def __init__(self, message: str, classification: Classification) -> None:
        super().__init__(message)
        self.classification = classification


class SandboxUnavailableError(SandboxError):
    pass
