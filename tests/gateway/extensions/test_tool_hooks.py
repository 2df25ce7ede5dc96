"""Extensions' tools and tool hooks in a run: a block refuses, a failing hook is skipped, an
after-hook replaces a good result, a failing tool is an error result."""

from __future__ import annotations

from typing import Any

import pytest

from agent_core import AgentTool, AgentToolResult, TextContent
from gateway.extensions import tool_hooks
from gateway.extensions.errors import ExtensionHookError, ExtensionToolError
from gateway.extensions.extension_api import Block, ExtensionTool, ToolCallEnd, ToolCallStart, ToolContext
from gateway.extensions.tool_hooks import extension_tools, hook_layer


def plain_tool(name: str = "echo", fail: bool = False) -> AgentTool:
    async def execute(tool_call_id: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult:
        if fail:
            raise RuntimeError("the tool broke")
        return AgentToolResult(content=[TextContent(text=f"echo {params['text']}")])

    return AgentTool(name=name, label=name, description="", parameters={"type": "object"}, execute=execute)


def text(result: AgentToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


def hooked(before: list[Any] = (), after: list[Any] = (), *, fail: bool = False) -> AgentTool:  # type: ignore[assignment]
    layer = hook_layer(
        [plain_tool(fail=fail)],
        before=[("ext", hook) for hook in before],
        after=[("ext", hook) for hook in after],
        session_id="s1",
        agent_id="main",
    )
    return layer[0]


async def test_without_hooks_the_tools_are_unchanged() -> None:
    tools = [plain_tool()]
    assert hook_layer(tools, before=[], after=[], session_id="s", agent_id="a") is tools


async def test_a_before_hook_sees_the_call_and_a_block_refuses_it() -> None:
    seen: list[ToolCallStart] = []

    def guard(call: ToolCallStart) -> Block | None:
        seen.append(call)
        return Block("not today") if call.args["text"] == "no" else None

    tool = hooked([guard])
    assert text(await tool.execute("c1", {"text": "yes"}, None, None)) == "echo yes"
    with pytest.raises(ExtensionHookError, match="echo was blocked by extension ext: not today"):
        await tool.execute("c2", {"text": "no"}, None, None)
    assert (seen[0].session_id, seen[0].agent_id, seen[0].tool_call_id, seen[0].tool_name) == (
        "s1",
        "main",
        "c1",
        "echo",
    )


async def test_a_hook_that_raises_or_hangs_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tool_hooks, "HOOK_TIMEOUT_S", 0.05)

    def broken(call: ToolCallStart) -> None:
        raise RuntimeError("hook bug")

    async def hangs(call: ToolCallStart) -> None:
        import asyncio

        await asyncio.sleep(10)

    async def broken_after(end: ToolCallEnd) -> None:
        raise ValueError("after bug")

    tool = hooked([broken, hangs], [broken_after])
    assert text(await tool.execute("c1", {"text": "still works"}, None, None)) == "echo still works"


async def test_an_after_hook_replaces_a_good_result_but_not_an_error() -> None:
    ends: list[ToolCallEnd] = []

    async def rewrite(end: ToolCallEnd) -> AgentToolResult:
        ends.append(end)
        return AgentToolResult(content=[TextContent(text=text(end.result).upper())])

    assert text(await hooked(after=[rewrite]).execute("c1", {"text": "hi"}, None, None)) == "ECHO HI"
    with pytest.raises(RuntimeError, match="the tool broke"):
        await hooked(after=[rewrite], fail=True).execute("c2", {"text": "hi"}, None, None)
    assert [end.is_error for end in ends] == [False, True]


async def test_an_extension_tool_answers_text_shows_updates_and_fails_cleanly() -> None:
    async def greet(args: dict[str, Any], ctx: ToolContext) -> str:
        ctx.update("working")
        if args.get("fail"):
            raise KeyError("no such person")
        return f"hi {args['name']} in {ctx.session_id}"

    async def odd(args: dict[str, Any], ctx: ToolContext) -> Any:
        return 42

    entries = [
        ("demo", ExtensionTool(name="greet", description="", parameters={"type": "object"}, handler=greet)),
        ("demo", ExtensionTool(name="odd", description="", parameters={"type": "object"}, handler=odd)),
    ]
    greet_tool, odd_tool = extension_tools(entries, session_id="s1", agent_id="main")
    assert greet_tool.metadata["origin"] == "extension:demo"
    updates: list[AgentToolResult] = []
    assert text(await greet_tool.execute("c", {"name": "Ada"}, None, updates.append)) == "hi Ada in s1"
    assert [text(update) for update in updates] == ["working"]
    with pytest.raises(ExtensionToolError, match="greet failed: 'no such person'"):
        await greet_tool.execute("c", {"name": "x", "fail": True}, None, None)
    with pytest.raises(ExtensionToolError, match="answered int, not text or a result"):
        await odd_tool.execute("c", {}, None, None)
