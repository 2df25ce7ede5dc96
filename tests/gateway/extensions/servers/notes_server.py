"""A tiny MCP server for the tests, written with the SDK's FastMCP.

    python notes_server.py stdio
    python notes_server.py http PORT

Tools:
- add(a, b): their sum (structured output);
- fail(message): an error result (`isError`) with that message;
- count(steps): reports progress once per step, then "counted to N";
- grow(): adds the tool `extra` and tells the client its tool list changed;
- crash(): writes a line to stderr and exits at once with status 3;
- slow(seconds): answers after that long;
- env(name): the value of an environment variable the server sees, or "(unset)";
- header(name): the value of an HTTP header of the current request, or "(none)";
- read(path): the text of a file, or an error when the server cannot read it;
- picture(): a 1x1 PNG image.
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.fastmcp import Context, FastMCP, Image
from mcp.server.fastmcp.exceptions import ToolError

PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082"
)

server = FastMCP("notes", log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool()
def fail(message: str) -> str:
    """Always fails, with `message`."""
    raise ToolError(message)


@server.tool()
async def count(steps: int, ctx: Context) -> str:  # type: ignore[type-arg]
    """Count to `steps`, reporting progress at each step."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
        await anyio.sleep(0.05)
    return f"counted to {steps}"


def extra() -> str:
    """A tool that exists only after grow()."""
    return "extra tool here"


@server.tool()
async def grow(ctx: Context, wait_s: float = 0.0) -> str:  # type: ignore[type-arg]
    """Add the tool `extra` (and answer `wait_s` later)."""
    server.add_tool(extra, name="extra")
    await ctx.session.send_tool_list_changed()
    await anyio.sleep(wait_s)
    return "grown"


@server.tool()
def crash() -> str:
    """Exit at once with status 3."""
    sys.stderr.write("notes server: crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


@server.tool()
async def slow(seconds: float) -> str:
    """Answer after `seconds`."""
    await anyio.sleep(seconds)
    return "slept"


@server.tool()
def env(name: str) -> str:
    """The value of environment variable `name` as this server sees it."""
    return os.environ.get(name, "(unset)")


@server.tool()
def header(name: str, ctx: Context) -> str:  # type: ignore[type-arg]
    """The value of HTTP header `name` of this request."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    return str(headers.get(name, "(none)")) if headers is not None else "(none)"


@server.tool()
def read(path: str) -> str:
    """The text of the file at `path`."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror}") from None


@server.tool()
def picture() -> Image:
    """A one-pixel PNG."""
    return Image(data=PIXEL, format="png")


def main(argv: list[str]) -> None:
    sys.stderr.write(f"notes server: starting ({' '.join(argv[1:])})\n")
    sys.stderr.flush()
    if argv[1:2] == ["http"]:
        server.settings.port = int(argv[2])
        server.run("streamable-http")
    else:
        server.run("stdio")


if __name__ == "__main__":
    main(sys.argv)
