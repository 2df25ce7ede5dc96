"""The sandbox layer of the tool pipeline (layer 2): confine file tools, mediate and confine bash.

`sandbox_layer(tools, settings, audit, machine=...)` returns the same tools, wrapped:

- `read`, `write`, `edit`, `grep`, `find`, `ls`: the `path` argument (default: the workspace) is
  resolved with `resolve_in_workspace`; a path leading outside is refused (except an absolute
  path inside one of `read_roots` for the reading tools), otherwise the tool receives the
  resolved absolute path;
- `bash`: the command is classified by exec mediation; every refusal and every allowed command
  at or above medium is audited with the decision and the parsed reason, and those at or above
  the deny threshold are refused; the rest run through the runner the machine chooses for the
  sandbox mode, or are refused with the reason and the fix when no runner can confine them;
- any other tool passes through untouched.

The workspace directory is created when missing. Wrapping keeps each tool's name, label,
description, parameters, metadata, argument preparation and execution mode. The audit callback
is called synchronously; if it raises, the call fails (a command is never run unaudited).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from agent_core.abort import AbortSignal
from agent_core.agent_types import AgentTool, AgentToolResult, ToolUpdateCallback
from agent_core.errors import ToolError
from agent_core.tools import FILE_TOOL_NAMES, create_bash_tool
from gateway.sandbox.errors import CommandRefusedError, PathOutsideWorkspaceError, SandboxUnavailableError
from gateway.sandbox.exec_mediation import Classification, classify
from gateway.sandbox.machine import SandboxMachine
from gateway.sandbox.paths import resolve_in_workspace
from gateway.sandbox.risk import RiskTier
from gateway.sandbox.settings import SandboxSettings

AuditCallback = Callable[[dict[str, Any]], None]
_WRITING_TOOLS = frozenset({"write", "edit"})


def _confine_paths(
    tool: AgentTool, settings: SandboxSettings, audit: AuditCallback, machine: SandboxMachine
) -> AgentTool:
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
            resolved = _resolve(tool.name, settings, raw)
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
        result = await inner(tool_call_id, {**params, "path": str(resolved)}, signal, on_update)
        if tool.name in _WRITING_TOOLS:
            machine.share(workspace, resolved)
        return result

    return msgspec.structs.replace(tool, execute=execute)


def _resolve(tool_name: str, settings: SandboxSettings, raw: str) -> Path:
    """`raw` resolved in the workspace, or (for a reading tool and an absolute path) in one of
    the read-only roots. Raises the workspace's PathOutsideWorkspaceError when neither holds it."""
    try:
        return resolve_in_workspace(settings.workspace, raw)
    except PathOutsideWorkspaceError:
        if tool_name in _WRITING_TOOLS or not Path(raw.strip()).is_absolute():
            raise
        for root in settings.read_roots:
            try:
                return resolve_in_workspace(root, raw)
            except PathOutsideWorkspaceError:
                continue
        raise


def _refusal(classification: Classification) -> str:
    classes = ", ".join(classification.classes)
    return (
        f"Command refused by the sandbox ({classes}, risk {classification.risk.label}): "
        f"{classification.reason}. Find a way that stays inside the workspace, or ask the user "
        "to run it themselves."
    )


def _mediate_bash(
    tool: AgentTool, settings: SandboxSettings, audit: AuditCallback, machine: SandboxMachine
) -> AgentTool:
    threshold = settings.threshold

    def record(tool_call_id: str, command: str, classification: Classification, decision: str) -> None:
        choice = machine.choose(settings.mode)
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
                "decision": decision,
                "mode": settings.mode,
                "runner": choice.runner or "none",
            }
        )

    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        command = params.get("command") if isinstance(params, Mapping) else None
        if not isinstance(command, str):
            raise ToolError("Missing required argument 'command'")
        # Off the event loop: a long line takes a while to read.
        classification = await asyncio.to_thread(classify, command)
        denied = threshold is not None and classification.risk >= threshold
        if denied or classification.risk >= RiskTier.MEDIUM:
            record(tool_call_id, command, classification, "denied" if denied else "allowed")
        if denied:
            raise CommandRefusedError(_refusal(classification), classification)
        try:
            runner = await asyncio.to_thread(machine.runner, settings)
        except SandboxUnavailableError as exc:
            audit(
                {
                    "event": "sandbox.unavailable",
                    "tool": tool.name,
                    "tool_call_id": tool_call_id,
                    "mode": settings.mode,
                    "reason": str(exc),
                }
            )
            raise
        # Resolved per command, not per session: building a session's tools stays cheap, and a
        # command runs in what the workspace path names now.
        bash = create_bash_tool(settings.workspace.resolve(), runner=runner)
        try:
            return await bash.execute(tool_call_id, params, signal, on_update)
        except ToolError as exc:
            if runner.limit_note is None:
                raise
            audit({"event": "sandbox.limit", "tool": tool.name, "tool_call_id": tool_call_id,
                   "command": command, "reason": runner.limit_note})  # fmt: skip
            raise ToolError(f"{exc}\n\n{runner.limit_note}") from exc

    return msgspec.structs.replace(tool, execute=execute)


def sandbox_layer(
    tools: list[AgentTool],
    settings: SandboxSettings,
    audit: AuditCallback,
    *,
    machine: SandboxMachine,
) -> list[AgentTool]:
    """Wrap `tools` for `settings` (see the module docstring) with the runners `machine` offers.
    The workspace is created if it does not exist yet (bubblewrap can only bind an existing
    directory)."""
    settings.workspace.mkdir(parents=True, exist_ok=True)
    wrapped: list[AgentTool] = []
    for tool in tools:
        if tool.name in FILE_TOOL_NAMES:
            wrapped.append(_confine_paths(tool, settings, audit, machine))
        elif tool.name == "bash":
            wrapped.append(_mediate_bash(tool, settings, audit, machine))
        else:
            wrapped.append(tool)
    return wrapped
