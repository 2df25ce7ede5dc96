"""An MCP tool's answer as the agent's tool result.

| MCP content                         | tool result content                                   |
|-------------------------------------|-------------------------------------------------------|
| text                                | text                                                  |
| image                               | image (base64 data and MIME type as sent)             |
| audio                               | a text note naming the type and size (models here do  |
|                                     | not take audio)                                       |
| embedded text resource              | text, headed by the resource's URI                    |
| embedded blob resource              | an image when its MIME type is an image, else a note  |
| resource link                       | a text line naming the link                           |

`structuredContent` goes to the result's `details` (and becomes the text when there is no other
content). Text is capped like the built-in tools' output (`agent_core.tools.truncate`: the head
is kept, with a notice, and `details["truncation"]` says what was cut), so a server cannot flood
the model's context. An answer with `isError: true` becomes a failed call (`McpToolError` with the
answer's text), which the model reads as an error result.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from mcp import types

from agent_core import AgentToolResult, ImageContent, TextContent
from agent_core.tools.truncate import format_size, truncate_head
from gateway.extensions.errors import McpToolError

Content = TextContent | ImageContent


def to_tool_result(result: types.CallToolResult, *, server: str, tool: str) -> AgentToolResult:
    """`result` as a tool result. Raises McpToolError when the server flagged an error."""
    content = [block for item in result.content for block in _content(item)]
    structured = result.structuredContent
    if not content and structured is not None:
        content = [TextContent(text=json.dumps(structured, ensure_ascii=False))]
    if result.isError:
        text = "\n".join(block.text for block in content if isinstance(block, TextContent)).strip()
        raise McpToolError(text or f"{server}__{tool} failed without saying why")
    details: dict[str, Any] = {"server": server, "tool": tool}
    if structured is not None:
        details["structuredContent"] = structured
    cuts = []
    for index, block in enumerate(content):
        if isinstance(block, TextContent):
            cut = truncate_head(block.text)
            if cut.truncated:
                notice = (
                    f"[The server's answer was cut: {cut.output_lines} of {cut.total_lines} lines, "
                    f"{format_size(cut.output_bytes)} of {format_size(cut.total_bytes)} shown.]"
                )
                content[index] = TextContent(text=f"{cut.content}\n\n{notice}")
                cuts.append(cut.details())
    if cuts:
        details["truncation"] = cuts
    return AgentToolResult(content=content, details=details)


def _content(item: types.ContentBlock) -> list[Content]:
    if isinstance(item, types.TextContent):
        return [TextContent(text=item.text)]
    if isinstance(item, types.ImageContent):
        return [ImageContent(data=item.data, mime_type=item.mimeType)]
    if isinstance(item, types.AudioContent):
        return [TextContent(text=f"[audio {item.mimeType}, {_size(item.data)} bytes, not shown]")]
    if isinstance(item, types.EmbeddedResource):
        resource = item.resource
        if isinstance(resource, types.TextResourceContents):
            return [TextContent(text=f"{resource.uri}\n{resource.text}")]
        mime = resource.mimeType or "application/octet-stream"
        if mime.startswith("image/"):
            return [ImageContent(data=resource.blob, mime_type=mime)]
        return [
            TextContent(text=f"[resource {resource.uri}: {mime}, {_size(resource.blob)} bytes, not shown]")
        ]
    if isinstance(item, types.ResourceLink):
        title = f" ({item.description})" if item.description else ""
        return [TextContent(text=f"[resource link {item.name}: {item.uri}{title}]")]
    return [TextContent(text=f"[{type(item).__name__} not shown]")]


def _size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)
