"""The sandbox layer of the tool pipeline (layer 2): confine file tools, mediate and confine bash.

`sandbox_layer(tools, settings, audit)` returns the same tools, wrapped:

- `read`, `write`, `edit`, `grep`, `find`, `ls`: the `path` argument (default: the workspace) is
  resolved with `resolve_in_workspace`; a path leading outside is refused, otherwise the tool
  receives the resolved absolute path;
- `bash`: the command is classified by exec mediation; every command with a risk above none is
  audited with the decision, and those at or above the deny threshold are refused; the rest run
  through the runner the sandbox mode selects;
- any other tool passes through untouched.

The workspace directory is created when missing. Wrapping keeps each tool's name, label,
description, parameters, metadata, argument preparation and execution mode. The audit callback
is called synchronously; if it raises, the call fails (a command is never run unaudited).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from agent_core.abort import AbortSignal
from agent_core.agent_types import AgentTool, AgentToolResult, ToolUpdateCallback
from agent_core.errors import ToolError
from agent_core.tools import FILE_TOOL_NAMES, CommandRunner, LocalRunner, create_bash_tool
from gateway.sandbox.errors import CommandRefusedError, PathOutsideWorkspaceError, SandboxUnavailableError
from gateway.sandbox.exec_mediation import Classification, classify
from gateway.sandbox.paths import resolve_in_workspace
from gateway.sandbox.risk import RiskTier
from gateway.sandbox.runners import BwrapRunner, ConfinedRunner, bwrap_available
from gateway.sandbox.settings import SandboxSettings

AuditCallback = Callable[[dict[str, Any]], None]


def select_runner(
    settings: SandboxSettings, bwrap_probe: Callable[[], bool] = bwrap_available
) -> CommandRunner | None:
    """The runner for `settings.mode`; ``None`` when mode ``"bwrap"`` cannot be honoured."""
    workspace = settings.workspace.resolve()
    common: dict[str, Any] = {
        "max_timeout_s": settings.timeout_s,
        "output_cap_bytes": settings.output_cap_bytes,
    }
    if settings.mode == "off":
        return LocalRunner(**common)
    if settings.mode in ("auto", "bwrap") and bwrap_probe():
        return BwrapRunner(workspace, allowed_env=settings.allowed_env, **common)
    if settings.mode == "bwrap":
        return None
    return ConfinedRunner(workspace, allowed_env=settings.allowed_env, **common)


def _confine_paths(tool: AgentTool, settings: SandboxSettings, audit: AuditCallback) -> AgentTool:
    inner = tool.execute
    workspace = settings.workspace

    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        if not isinstance(params, Mapping):
            raise ToolError(f"Tool arguments must be an object, got {type(params).__name__}")
        raw = params.get("path")
        if raw is None:
            raw = "."
        if not isinstance(raw, str):
            raise ToolError(f"Argument 'path' must be a string, got {type(raw).__name__}")
        try:
            resolved = resolve_in_workspace(workspace, raw)
        except PathOutsideWorkspaceError as exc:
            audit(
                {
                    "event": "sandbox.path_refused",
                    "tool": tool.name,
                    "tool_call_id": tool_call_id,
                    "path": raw,
                    "reason": str(exc),
                }
            )
            raise
        return await inner(tool_call_id, {**params, "path": str(resolved)}, signal, on_update)

    return dataclasses.replace(tool, execute=execute)


def _refusal(classification: Classification) -> str:
    classes = ", ".join(classification.classes)
    return (
        f"Command refused by the sandbox ({classes}, risk {classification.risk.label}): "
        f"{classification.reason}. Find a way that stays inside the workspace, or ask the user "
        "to run it themselves."
    )


def _mediate_bash(
    tool: AgentTool, settings: SandboxSettings, audit: AuditCallback, runner: CommandRunner | None
) -> AgentTool:
    workspace = settings.workspace.resolve()
    inner = create_bash_tool(workspace, runner=runner) if runner is not None else None
    threshold = settings.threshold

    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        command = params.get("command") if isinstance(params, Mapping) else None
        if not isinstance(command, str):
            raise ToolError("Missing required argument 'command'")
        # Off the event loop: a long line takes up to a second to read.
        classification = await asyncio.to_thread(classify, command)
        denied = threshold is not None and classification.risk >= threshold
        if classification.risk > RiskTier.NONE:
            audit(
                {
                    "event": "sandbox.exec_mediation",
                    "tool": tool.name,
                    "tool_call_id": tool_call_id,
                    "command": command,
                    "risk": classification.risk.label,
                    "classes": list(classification.classes),
                    "reason": classification.reason,
                    "threshold": threshold.label if threshold is not None else None,
                    "decision": "denied" if denied else "allowed",
                    "mode": settings.mode,
                }
            )
        if denied:
            raise CommandRefusedError(_refusal(classification), classification)
        if inner is None:
            audit({"event": "sandbox.unavailable", "tool": tool.name, "tool_call_id": tool_call_id})
            raise SandboxUnavailableError(
                "Sandbox mode 'bwrap' is configured but bubblewrap cannot run on this machine, so "
                "commands are refused; install bubblewrap or set the sandbox mode to 'auto' or 'confined'"
            )
        return await inner.execute(tool_call_id, params, signal, on_update)

    return dataclasses.replace(tool, execute=execute)


def sandbox_layer(
    tools: list[AgentTool],
    settings: SandboxSettings,
    audit: AuditCallback,
    *,
    bwrap_probe: Callable[[], bool] = bwrap_available,
) -> list[AgentTool]:
    """Wrap `tools` for `settings` (see the module docstring). `bwrap_probe` decides whether
    bubblewrap is usable (tests replace it). The workspace is created if it does not exist yet
    (bubblewrap can only bind an existing directory)."""
    settings.workspace.mkdir(parents=True, exist_ok=True)
    runner = select_runner(settings, bwrap_probe) if any(tool.name == "bash" for tool in tools) else None
    wrapped: list[AgentTool] = []
    for tool in tools:
        if tool.name in FILE_TOOL_NAMES:
            wrapped.append(_confine_paths(tool, settings, audit))
        elif tool.name == "bash":
            wrapped.append(_mediate_bash(tool, settings, audit, runner))
        else:
            wrapped.append(tool)
    return wrapped
