"""The API an extension's `register` uses: what it records, and misuse refused with a reason."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.extensions.errors import ExtensionApiError
from gateway.extensions.extension_api import CommandContext, Extension, ToolContext


async def _tool(args: dict[str, Any], ctx: ToolContext) -> str:
    return "ok"


async def _command(ctx: CommandContext) -> str:
    return "ok"


def test_register_records_tools_hooks_commands_and_providers() -> None:
    ext = Extension("demo")
    ext.tool("demo_tool", "A tool.")(_tool)
    ext.on_run_start(lambda event: None)
    ext.before_tool_call(lambda call: None)
    ext.command("demo", "A command.")(_command)
    ext.provider("demo-api", lambda model, context, options: None)  # type: ignore[arg-type,return-value]
    registered = ext.seal()
    assert [tool.name for tool in registered.tools] == ["demo_tool"]
    assert registered.tools[0].parameters == {"type": "object", "properties": {}}
    assert len(registered.run_start) == 1 and len(registered.before_tool) == 1
    assert registered.has_lifecycle_hooks
    assert [command.name for command in registered.commands] == ["demo"]
    assert [provider.api for provider in registered.providers] == ["demo-api"]


@pytest.mark.parametrize(
    ("misuse", "message"),
    [
        (lambda ext: ext.tool("bad name", "x"), "a tool name is"),
        (lambda ext: ext.tool("t", "x", {"type": "string"}), 'must be a JSON Schema with "type": "object"'),
        (lambda ext: ext.command("Bad", "x"), "a command name is"),
        (lambda ext: ext.provider("", lambda *a: None), "empty or registered twice"),
    ],
)
def test_misuse_is_refused_with_the_reason(misuse: Any, message: str) -> None:
    with pytest.raises(ExtensionApiError, match=message):
        misuse(Extension("demo"))


def test_a_tool_registered_twice_and_registering_after_register_are_refused() -> None:
    ext = Extension("demo")
    ext.tool("t", "x")(_tool)
    with pytest.raises(ExtensionApiError, match="registered twice"):
        ext.tool("t", "x")
    ext.seal()
    with pytest.raises(ExtensionApiError, match="inside register"):
        ext.on_run_end(lambda event: None)
