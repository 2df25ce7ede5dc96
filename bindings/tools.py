"""Helpers for channel tools: the tools a binding offers to the sessions that came from it.

A channel tool acts on the conversation the session came from (the latest message the binding
relayed for it), never on a channel the model names: the model cannot pick a destination.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from typing import Any

from agent_core import AbortSignal, AgentTool, AgentToolResult, TextContent, ToolError, ToolUpdateCallback
from bindings.errors import PlatformError
from bindings.inbound import SessionOrigin

FILE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "filename": {"type": "string", "description": "Name of the file as shown in the chat."},
        "content": {"type": "string", "description": "The file's content."},
        "encoding": {
            "type": "string",
            "enum": ["text", "base64"],
            "description": "How `content` is written: plain UTF-8 text (default) or base64 bytes.",
        },
        "comment": {"type": "string", "description": "Optional message shown with the file."},
    },
    "required": ["filename", "content"],
    "additionalProperties": False,
}


def file_bytes(params: dict[str, Any]) -> bytes:
    """The bytes of a `FILE_PARAMETERS` call. Raises `ToolError` for bad base64."""
    content = str(params["content"])
    if params.get("encoding") == "base64":
        try:
            return base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ToolError("content is not valid base64") from exc
    return content.encode()


Action = Callable[[SessionOrigin, dict[str, Any], str], Awaitable[str]]
"""`(origin, params, tool_call_id) -> text of the result`."""


def channel_tool(
    *,
    name: str,
    label: str,
    description: str,
    parameters: dict[str, Any],
    origin: Callable[[], Awaitable[SessionOrigin | None]],
    action: Action,
    platform: str,
) -> AgentTool:
    """An `AgentTool` that runs `action` on the session's current origin. Platform failures
    become `ToolError`s (an error result the model sees), as does a missing origin."""

    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        if signal is not None:
            signal.throw_if_aborted()
        where = await origin()
        if where is None:
            raise ToolError(f"{name}: this session has no {platform} conversation")
        try:
            text = await action(where, dict(params or {}), tool_call_id)
        except PlatformError as exc:
            raise ToolError(f"{name} failed: {exc}") from exc
        return AgentToolResult(content=[TextContent(text=text)])

    return AgentTool(
        name=name,
        label=label,
        description=description,
        parameters=parameters,
        execute=execute,
        metadata={"origin": f"binding:{platform}", "channel_tool": True},
    )
