"""A tiny extension for the tests (the distribution `hello-gateway-ext`, entry point `hello`).

Importing it appends "imported" to the file named by `HELLO_EXT_IMPORTED` (when set), so a test
can tell whether the gateway imported it. It adds the tool `hello` (with a progress update), the
command `/hello`, and two hooks that always raise: a `before_tool_call` hook and an
`on_message_end` hook (the gateway must log and skip them).
"""

from __future__ import annotations

import os
from typing import Any

from gateway.extensions.extension_api import (
    CommandContext,
    Extension,
    MessageEnd,
    ToolCallStart,
    ToolContext,
)

_MARKER = os.environ.get("HELLO_EXT_IMPORTED")
if _MARKER:
    with open(_MARKER, "a", encoding="utf-8") as marker:
        marker.write("imported\n")

HELLO = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
}


def register(ext: Extension) -> None:
    @ext.tool("hello", "Greet someone by name.", HELLO)
    async def hello(args: dict[str, Any], ctx: ToolContext) -> str:
        ctx.update(f"looking up {args['name']}")
        return f"hello, {args['name']} (agent {ctx.agent_id})"

    @ext.before_tool_call
    def explode(call: ToolCallStart) -> None:
        raise RuntimeError(f"the hook fails on purpose ({call.tool_name})")

    @ext.on_message_end
    async def broken(message: MessageEnd) -> None:
        raise ValueError("the message hook fails on purpose")

    @ext.command("hello", "Say hello")
    async def hello_command(ctx: CommandContext) -> str:
        return f"hello, {ctx.args or 'world'}"
