"""An MCP tool's answer as the agent's tool result."""

from __future__ import annotations

import base64

import pytest
from mcp import types
from pydantic import AnyUrl

from agent_core import ImageContent, TextContent
from gateway.extensions.errors import McpToolError
from gateway.extensions.mcp_results import to_tool_result

PNG = base64.b64encode(b"\x89PNG fake").decode()


def result(
    *content: types.ContentBlock, structured: dict[str, object] | None = None, error: bool = False
) -> types.CallToolResult:
    return types.CallToolResult(content=list(content), structuredContent=structured, isError=error)


def test_text_and_images_map_to_their_kinds() -> None:
    answer = to_tool_result(
        result(
            types.TextContent(type="text", text="hi"),
            types.ImageContent(type="image", data=PNG, mimeType="image/png"),
        ),
        server="notes",
        tool="look",
    )
    assert answer.content == [TextContent(text="hi"), ImageContent(data=PNG, mime_type="image/png")]
    assert answer.details == {"server": "notes", "tool": "look"}


def test_resources_become_text_or_images() -> None:
    uri = AnyUrl("file:///notes/a.txt")
    answer = to_tool_result(
        result(
            types.EmbeddedResource(
                type="resource", resource=types.TextResourceContents(uri=uri, text="note a")
            ),
            types.EmbeddedResource(
                type="resource", resource=types.BlobResourceContents(uri=uri, blob=PNG, mimeType="image/png")
            ),
            types.EmbeddedResource(
                type="resource",
                resource=types.BlobResourceContents(uri=uri, blob=PNG, mimeType="application/pdf"),
            ),
            types.ResourceLink(type="resource_link", name="b", uri=AnyUrl("file:///notes/b.txt")),
            types.AudioContent(type="audio", data=PNG, mimeType="audio/wav"),
        ),
        server="notes",
        tool="get",
    )
    assert answer.content[0] == TextContent(text="file:///notes/a.txt\nnote a")
    assert answer.content[1] == ImageContent(data=PNG, mime_type="image/png")
    assert answer.content[2] == TextContent(
        text="[resource file:///notes/a.txt: application/pdf, 9 bytes, not shown]"
    )
    assert answer.content[3] == TextContent(text="[resource link b: file:///notes/b.txt]")
    assert answer.content[4] == TextContent(text="[audio audio/wav, 9 bytes, not shown]")


def test_structured_content_goes_to_the_details_and_stands_in_for_missing_text() -> None:
    answer = to_tool_result(result(structured={"result": 5}), server="notes", tool="add")
    assert answer.content == [TextContent(text='{"result": 5}')]
    assert answer.details["structuredContent"] == {"result": 5}


def test_an_error_answer_fails_the_call_with_its_text() -> None:
    with pytest.raises(McpToolError, match=r"^no such note$"):
        to_tool_result(
            result(types.TextContent(type="text", text="no such note"), error=True), server="n", tool="t"
        )
    with pytest.raises(McpToolError, match="n__t failed without saying why"):
        to_tool_result(result(error=True), server="n", tool="t")


def test_long_text_is_cut_like_the_built_in_tools_output() -> None:
    long = "\n".join(f"line {n}" for n in range(10_000))
    answer = to_tool_result(result(types.TextContent(type="text", text=long)), server="notes", tool="dump")
    text = answer.content[0].text  # type: ignore[union-attr]
    assert text.startswith("line 0\nline 1\n") and "line 9999" not in text
    assert text.endswith("[The server's answer was cut: 2000 of 10000 lines, 18.4KB of 96.6KB shown.]")
    assert answer.details["truncation"][0]["truncated"] is True
