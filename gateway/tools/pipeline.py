"""The tool pipeline: a run's tools, built from seven small layers when the run starts.

1. base coding tools rooted at the agent's workspace;
2. sandbox (path confinement, exec mediation, bubblewrap or a confined subprocess);
3. gateway tools (branch, spawn, interrupt, reload);
4. channel tools of the binding the session came from;
5. policy (allow/deny lists, required scopes), then approvals (a call the agent's policy asks
   about waits for a person's decision);
6. schema normalisation for the session's provider;
7. abort wrapping with the run's signal.

Each layer is a function from a tool list to a tool list and is tested on its own. Tools from
MCP servers and Python extensions join with the channel tools (`extra`, layer 4; a name a
built-in tool already has is left out), so the policy and every later layer apply to them too;
extensions' `before_tool_call`/`after_tool_call` hooks wrap every tool the policy kept (`hooks`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import structlog

from agent_core import AbortSignal, AgentTool
from gateway.sandbox import SandboxMachine, SandboxSettings
from gateway.tools.abort_wrap import abort_layer
from gateway.tools.gateway_tools import GatewayToolsHost, gateway_tools
from gateway.tools.policy import policy_layer
from gateway.tools.schema import schema_layer

log = structlog.get_logger("gateway.tools")

ChannelTools = Callable[[Any], list[AgentTool]]
ToolsLayer = Callable[[list[AgentTool]], list[AgentTool]]


class PipelineSpec(msgspec.Struct, kw_only=True, dict=True):
    """Everything the layers need for one run."""

    session: Any
    provider: str
    workspace: Path
    sandbox: SandboxSettings
    audit: Callable[[dict[str, Any]], None]
    machine: SandboxMachine
    """The daemon's sandbox runners."""
    host: GatewayToolsHost | None = None
    channel_tools: ChannelTools | None = None
    allow: Sequence[str] = ()
    deny: Sequence[str] = ()
    scopes: Sequence[str] = ("operator.write",)
    signal: AbortSignal | None = None
    base: bool = True
    extra: list[AgentTool] = msgspec.field(default_factory=list)
    """Tools of MCP servers and extensions (`gateway.extensions`)."""
    hooks: ToolsLayer | None = None
    """Extensions' tool hooks around every tool the policy kept."""
    approvals: ToolsLayer | None = None
    """Calls the agent's approval policy asks about wait for a decision (`gateway.approvals`)."""


BASE_TOOL_SETS = 256
"""Workspaces whose base coding tools are kept for the next session built there."""
_base_tools: OrderedDict[Path, tuple[AgentTool, ...]] = OrderedDict()
"""The base coding tools by workspace, most recently used last. Tools hold no state between
calls and are never changed in place (layers make changed copies), so sessions of one workspace
share them."""


def base_layer(workspace: Path) -> list[AgentTool]:
    workspace.mkdir(parents=True, exist_ok=True)
    tools = _base_tools.get(workspace)
    if tools is None:
        from agent_core.tools import create_coding_tools

        tools = _base_tools[workspace] = tuple(create_coding_tools(workspace))
        while len(_base_tools) > BASE_TOOL_SETS:
            _base_tools.popitem(last=False)
    else:
        _base_tools.move_to_end(workspace)
    return list(tools)


def sandbox_stage(tools: list[AgentTool], spec: PipelineSpec) -> list[AgentTool]:
    from gateway.sandbox import sandbox_layer

    return list(sandbox_layer(tools, spec.sandbox, spec.audit, machine=spec.machine))


def build_tools(spec: PipelineSpec) -> list[AgentTool]:
    tools: list[AgentTool] = base_layer(spec.workspace) if spec.base else []
    tools = sandbox_stage(tools, spec) if spec.base else tools
    if spec.host is not None:
        tools += gateway_tools(spec.host, spec.session.id)
    if spec.channel_tools is not None:
        tools += spec.channel_tools(spec.session)
    taken = {tool.name for tool in tools}
    for tool in spec.extra:
        if tool.name in taken:
            log.warning(
                "tool left out: a tool of that name exists",
                tool=tool.name,
                origin=tool.metadata.get("origin"),
            )
            continue
        taken.add(tool.name)
        tools.append(tool)
    tools = policy_layer(tools, allow=spec.allow, deny=spec.deny, scopes=spec.scopes)
    if spec.approvals is not None:
        tools = spec.approvals(tools)
    if spec.hooks is not None:
        tools = spec.hooks(tools)
    tools = schema_layer(tools, provider=spec.provider)
    return abort_layer(tools, signal=spec.signal)
