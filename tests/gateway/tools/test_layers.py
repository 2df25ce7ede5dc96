"""The tool pipeline's layers, each on its own, then composed."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agent_core import (
    AbortController,
    AbortSignal,
    AgentTool,
    AgentToolResult,
    TextContent,
    ToolUpdateCallback,
)
from gateway.tools.abort_wrap import ABORTED_BEFORE, ABORTED_DURING, abort_layer
from gateway.tools.gateway_tools import gateway_tools
from gateway.tools.pipeline import PipelineSpec, build_tools
from gateway.tools.policy import policy_layer
from gateway.tools.schema import normalize_schema, schema_layer


def _tool(name: str, *, scope: str | None = None, execute: Any = None) -> AgentTool:
    async def default(
        call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        return AgentToolResult(content=[TextContent(text=f"{name} ran")])

    return AgentTool(
        name=name,
        label=name,
        description=f"the {name} tool",
        parameters={
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"x": {"type": "string", "default": "a", "format": "uri"}},
            "additionalProperties": False,
        },
        execute=execute or default,
        metadata={"scope": scope} if scope else {},
    )


# --- policy -----------------------------------------------------------------------------------


def test_policy_allow_list_keeps_only_matching_tools() -> None:
    tools = [_tool("read"), _tool("grep"), _tool("bash")]
    kept = policy_layer(tools, allow=["read", "gr*"])
    assert [t.name for t in kept] == ["read", "grep"]


def test_policy_deny_wins_over_allow() -> None:
    tools = [_tool("read"), _tool("bash"), _tool("discord_send_file")]
    kept = policy_layer(tools, allow=["*"], deny=["bash", "discord_*"])
    assert [t.name for t in kept] == ["read"]


def test_policy_required_scope_filters_tools() -> None:
    tools = [_tool("plain"), _tool("reload", scope="operator.admin"), _tool("branch", scope="operator.write")]
    assert [t.name for t in policy_layer(tools, scopes=["operator.write"])] == ["plain", "branch"]
    assert [t.name for t in policy_layer(tools, scopes=["operator.admin"])] == ["plain", "reload", "branch"]
    assert [t.name for t in policy_layer(tools, scopes=["operator.read"])] == ["plain"]


# --- schema normalisation ---------------------------------------------------------------------


def test_schema_drops_meta_keywords_for_every_provider() -> None:
    schema = _tool("t").parameters
    out = normalize_schema(schema, "openai")
    assert "$schema" not in out
    assert out["additionalProperties"] is False
    assert out["properties"]["x"]["default"] == "a"
    assert schema["$schema"], "the original schema is left untouched"


def test_schema_for_google_drops_keywords_it_rejects() -> None:
    out = normalize_schema(_tool("t").parameters, "google")
    assert "additionalProperties" not in out
    assert out["properties"]["x"] == {"type": "string"}


def test_schema_root_becomes_an_object() -> None:
    assert normalize_schema({"properties": {"a": {"type": "string"}}}, "anthropic")["type"] == "object"
    assert normalize_schema({}, "openai") == {"type": "object", "properties": {}}


def test_a_schema_is_normalised_once_per_provider_and_kept_for_the_next_runs() -> None:
    schema = _tool("t").parameters
    first = normalize_schema(schema, "openai")
    assert normalize_schema(schema, "openai") is first  # the next run's tools reuse it
    google = normalize_schema(schema, "google")
    assert google is not first and "additionalProperties" not in google
    copy = {**schema}
    assert normalize_schema(copy, "openai") == first and normalize_schema(copy, "openai") is not first
    assert schema["$schema"], "the original schema is left untouched"


def test_schema_layer_keeps_everything_but_parameters() -> None:
    tool = _tool("t", scope="operator.write")
    [out] = schema_layer([tool], provider="google")
    assert (out.name, out.label, out.description, out.execute, out.metadata) == (
        tool.name,
        tool.label,
        tool.description,
        tool.execute,
        tool.metadata,
    )
    assert "$schema" not in out.parameters


# --- abort wrapping ---------------------------------------------------------------------------


async def test_abort_layer_refuses_to_start_when_already_aborted() -> None:
    started = []

    async def execute(
        call_id: str, params: Any, signal: AbortSignal | None, on_update: Any
    ) -> AgentToolResult:
        started.append(call_id)
        return AgentToolResult()

    controller = AbortController()
    controller.abort("stop")
    [tool] = abort_layer([_tool("t", execute=execute)], signal=None)
    with pytest.raises(RuntimeError, match=ABORTED_BEFORE):
        await tool.execute("c1", {}, controller.signal, None)
    assert started == []


async def test_abort_layer_cuts_off_a_tool_that_ignores_the_abort() -> None:
    cancelled = asyncio.Event()

    async def execute(
        call_id: str, params: Any, signal: AbortSignal | None, on_update: Any
    ) -> AgentToolResult:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return AgentToolResult()

    controller = AbortController()
    [tool] = abort_layer([_tool("t", execute=execute)], signal=controller.signal, grace_s=0.05)
    task = asyncio.ensure_future(tool.execute("c1", {}, None, None))
    await asyncio.sleep(0.02)
    controller.abort()
    with pytest.raises(RuntimeError, match=ABORTED_DURING):
        await asyncio.wait_for(task, timeout=2)
    assert cancelled.is_set()


async def test_abort_layer_lets_a_tool_clean_up_within_the_grace_period() -> None:
    async def execute(
        call_id: str, params: Any, signal: AbortSignal | None, on_update: Any
    ) -> AgentToolResult:
        assert signal is not None
        await signal.wait()
        return AgentToolResult(content=[TextContent(text="cleaned up")])

    controller = AbortController()
    [tool] = abort_layer([_tool("t", execute=execute)], signal=None, grace_s=1)
    task = asyncio.ensure_future(tool.execute("c1", {}, controller.signal, None))
    await asyncio.sleep(0.01)
    controller.abort()
    result = await asyncio.wait_for(task, timeout=2)
    assert result.content[0].text == "cleaned up"  # type: ignore[union-attr]


async def test_abort_layer_passes_results_through() -> None:
    [tool] = abort_layer([_tool("t")], signal=None)
    result = await tool.execute("c1", {}, None, None)
    assert result.content[0].text == "t ran"  # type: ignore[union-attr]


# --- gateway tools ----------------------------------------------------------------------------


class _Host:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def branch_session(self, session_id: str, label: str | None) -> dict[str, Any]:
        self.calls.append(("branch", (session_id, label)))
        return {"key": "agent:main:main:branch:1", "sessionId": "s-branch"}

    async def spawn_subagent(
        self,
        parent_session_id: str,
        prompt: str,
        *,
        agent_id: str | None,
        label: str | None,
        signal: AbortSignal | None,
    ) -> dict[str, Any]:
        self.calls.append(("spawn", (parent_session_id, prompt)))
        if prompt == "fail":
            return {"status": "error", "errorMessage": "model exploded"}
        return {"status": "ok", "text": f"done: {prompt}"}

    async def interrupt_run(self, session_id: str, reason: str | None) -> None:
        self.calls.append(("interrupt", (session_id, reason)))

    async def reload_config(self) -> dict[str, Any]:
        self.calls.append(("reload", None))
        return {"changed": []}


async def test_gateway_tools_act_on_their_own_session() -> None:
    host = _Host()
    tools = {t.name: t for t in gateway_tools(host, "s-1")}
    assert set(tools) == {"session_branch", "session_spawn", "agent_interrupt", "gateway_reload"}
    assert tools["gateway_reload"].metadata["scope"] == "operator.admin"
    out = await tools["session_branch"].execute("c", {"label": "try"}, None, None)
    assert "agent:main:main:branch:1" in out.content[0].text  # type: ignore[union-attr]
    out = await tools["session_spawn"].execute("c", {"prompt": "sum it"}, None, None)
    assert out.content[0].text == "done: sum it"  # type: ignore[union-attr]
    with pytest.raises(RuntimeError, match="model exploded"):
        await tools["session_spawn"].execute("c", {"prompt": "fail"}, None, None)
    await tools["agent_interrupt"].execute("c", {}, None, None)
    assert [c[0] for c in host.calls] == ["branch", "spawn", "spawn", "interrupt"]
    assert all(c[1][0] == "s-1" for c in host.calls)


# --- composed ---------------------------------------------------------------------------------


class _Session:
    id = "s-1"


def test_pipeline_composes_every_layer(tmp_path: Path) -> None:
    from gateway.sandbox import SandboxMachine, SandboxSettings

    audits: list[dict[str, Any]] = []
    channel = _tool("discord_add_reaction")
    spec = PipelineSpec(
        session=_Session(),
        provider="google",
        workspace=tmp_path / "ws",
        sandbox=SandboxSettings(workspace=tmp_path / "ws"),
        machine=SandboxMachine(home=tmp_path / "home"),
        audit=audits.append,
        host=_Host(),
        channel_tools=lambda session: [channel],
        deny=["write"],
        scopes=["operator.write"],
    )
    names = [t.name for t in build_tools(spec)]
    assert {"read", "edit", "bash", "grep", "find", "ls"} <= set(names)
    assert "write" not in names, "deny list applied"
    assert "gateway_reload" not in names, "admin-only tool filtered by scope"
    assert {"session_branch", "session_spawn", "agent_interrupt", "discord_add_reaction"} <= set(names)
    assert (tmp_path / "ws").is_dir()


async def test_pipeline_bash_goes_through_exec_mediation(tmp_path: Path) -> None:
    from gateway.sandbox import SandboxMachine, SandboxSettings

    audits: list[dict[str, Any]] = []
    spec = PipelineSpec(
        session=_Session(),
        provider="openai",
        workspace=tmp_path / "ws",
        sandbox=SandboxSettings(workspace=tmp_path / "ws"),
        machine=SandboxMachine(home=tmp_path / "home"),
        audit=audits.append,
    )
    bash = next(t for t in build_tools(spec) if t.name == "bash")
    with pytest.raises(Exception, match=r"(?i)refused|denied|dangerous"):
        await bash.execute("c1", {"command": "rm -rf /"}, None, None)
    assert audits, "the refused command is audited"
    ok = await bash.execute("c2", {"command": "echo fine"}, None, None)
    assert "fine" in ok.content[0].text  # type: ignore[union-attr]


def test_sessions_of_one_workspace_share_what_does_not_depend_on_the_session(tmp_path: Path) -> None:
    from gateway.sandbox import SandboxMachine, SandboxSettings

    def spec(session_id: str) -> PipelineSpec:
        return PipelineSpec(
            session=SimpleNamespace(id=session_id),
            provider="openai",
            workspace=tmp_path / "ws",
            sandbox=SandboxSettings(workspace=tmp_path / "ws"),
            machine=SandboxMachine(home=tmp_path / "home"),
            audit=lambda record: None,
            host=_Host(),
        )

    first = {tool.name: tool for tool in build_tools(spec("s-1"))}
    shutil.rmtree(tmp_path / "ws")
    second = {tool.name: tool for tool in build_tools(spec("s-2"))}
    assert (tmp_path / "ws").is_dir(), "every build makes sure the workspace exists"
    assert first.keys() == second.keys()
    for name, tool in first.items():
        # Normalised once: the gateway's own tools' schemas are built once, not per session.
        assert second[name].parameters is tool.parameters, name
        assert second[name].execute is not tool.execute, f"{name}: each session has its own wrappers"
