"""Layer 3: tools that act on the gateway itself.

- `session_branch`: fork the current session at its latest message into a new branch.
- `session_spawn`: run a prompt in a sub-agent child session and return its final answer; an
  abort of the parent run aborts the child.
- `agent_interrupt`: end the current run (the agent decides it is done or stuck).
- `gateway_reload`: re-read the gateway's configuration (needs `operator.admin`).
"""

from __future__ import annotations

from typing import Any, Protocol

from agent_core import AbortSignal, AgentTool, AgentToolResult, TextContent, ToolUpdateCallback


class GatewayToolsHost(Protocol):
    async def branch_session(self, session_id: str, label: str | None) -> dict[str, Any]: ...

    async def spawn_subagent(
        self,
        parent_session_id: str,
        prompt: str,
        *,
        agent_id: str | None,
        label: str | None,
        signal: AbortSignal | None,
    ) -> dict[str, Any]: ...

    async def interrupt_run(self, session_id: str, reason: str | None) -> None: ...

    async def reload_config(self) -> dict[str, Any]: ...


# Built once: every session's tools share these (a tool never changes its schema or metadata),
# so the schema layer normalises each once (`gateway.tools.schema` keys by identity).
_BRANCH_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {"label": {"type": "string"}}}
_SPAWN_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "prompt": {"type": "string", "description": "The task for the sub-agent."},
        "agentId": {"type": "string"},
        "label": {"type": "string"},
    },
    "required": ["prompt"],
}
_INTERRUPT_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {"reason": {"type": "string"}}}
_RELOAD_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
_WRITE_METADATA: dict[str, Any] = {"origin": "gateway", "scope": "operator.write"}
_ADMIN_METADATA: dict[str, Any] = {"origin": "gateway", "scope": "operator.admin"}


def _text(text: str, details: Any = None) -> AgentToolResult:
    return AgentToolResult(content=[TextContent(text=text)], details=details)


def gateway_tools(host: GatewayToolsHost, session_id: str) -> list[AgentTool]:
    async def branch(
        call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        info = await host.branch_session(session_id, params.get("label"))
        return _text(f"Created branch {info.get('key')} (session {info.get('sessionId')}).", info)

    async def spawn(
        call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        result = await host.spawn_subagent(
            session_id,
            params["prompt"],
            agent_id=params.get("agentId"),
            label=params.get("label"),
            signal=signal,
        )
        status = result.get("status")
        text = str(result.get("text") or "")
        if status != "ok":
            detail = result.get("errorMessage") or text or "no answer"
            raise RuntimeError(f"The sub-agent ended with status {status}: {detail}")
        return _text(text or "(the sub-agent gave no text answer)", result)

    async def interrupt(
        call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        await host.interrupt_run(session_id, params.get("reason"))
        return _text("The run is being interrupted.", {"interrupted": True})

    async def reload(
        call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        info = await host.reload_config()
        return _text("Configuration reloaded.", info)

    return [
        AgentTool(
            name="session_branch",
            label="Branch session",
            description="Fork this conversation at its latest message into a new branch session that "
            "can be continued separately. Returns the new session key.",
            parameters=_BRANCH_PARAMETERS,
            execute=branch,
            metadata=_WRITE_METADATA,
        ),
        AgentTool(
            name="session_spawn",
            label="Spawn sub-agent",
            description="Run a task in a separate sub-agent session and return its final answer. "
            "Use for self-contained subtasks.",
            parameters=_SPAWN_PARAMETERS,
            execute=spawn,
            metadata=_WRITE_METADATA,
        ),
        AgentTool(
            name="agent_interrupt",
            label="Interrupt run",
            description="Stop the current run now, for example when the task cannot be completed.",
            parameters=_INTERRUPT_PARAMETERS,
            execute=interrupt,
            metadata=_WRITE_METADATA,
        ),
        AgentTool(
            name="gateway_reload",
            label="Reload gateway config",
            description="Re-read the gateway configuration file without restarting.",
            parameters=_RELOAD_PARAMETERS,
            execute=reload,
            metadata=_ADMIN_METADATA,
        ),
    ]
