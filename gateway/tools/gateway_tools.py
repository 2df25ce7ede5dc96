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
            parameters={"type": "object", "properties": {"label": {"type": "string"}}},
            execute=branch,
            metadata={"origin": "gateway", "scope": "operator.write"},
        ),
        AgentTool(
            name="session_spawn",
            label="Spawn sub-agent",
            description="Run a task in a separate sub-agent session and return its final answer. "
            "Use for self-contained subtasks.",
            parameters={
                "type": "object",
                "properties": {
                    "prompt": {"type": "string", "description": "The task for the sub-agent."},
                    "agentId": {"type": "string"},
                    "label": {"type": "string"},
                },
                "required": ["prompt"],
            },
            execute=spawn,
            metadata={"origin": "gateway", "scope": "operator.write"},
        ),
        AgentTool(
            name="agent_interrupt",
            label="Interrupt run",
            description="Stop the current run now, for example when the task cannot be completed.",
            parameters={"type": "object", "properties": {"reason": {"type": "string"}}},
            execute=interrupt,
            metadata={"origin": "gateway", "scope": "operator.write"},
        ),
        AgentTool(
            name="gateway_reload",
            label="Reload gateway config",
            description="Re-read the gateway configuration file without restarting.",
            parameters={"type": "object", "properties": {}},
            execute=reload,
            metadata={"origin": "gateway", "scope": "operator.admin"},
        ),
    ]
