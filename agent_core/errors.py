"""Errors of the engine.

AgentCoreError
├── AgentBusyError        prompt()/continue_() while a run is active
├── ContinueError         nothing valid to continue from
├── InvalidMessageError   JSON that is not a valid message (also a ValueError)
├── ProviderError         a provider could not be reached or configured (never escapes a
│                         stream function: it becomes an `error` event)
├── ModelNotFoundError    unknown `provider/model` reference
└── ToolError             raised by a tool's execute(); becomes an error tool result
"""

from __future__ import annotations


class AgentCoreError(Exception):
    """Root of the engine's errors."""


class AgentBusyError(AgentCoreError):
    pass


class ContinueError(AgentCoreError):
    pass


class InvalidMessageError(AgentCoreError, ValueError):
    pass


class ProviderError(AgentCoreError):
    pass


class ModelNotFoundError(AgentCoreError):
    pass


class ToolError(AgentCoreError):
    pass
