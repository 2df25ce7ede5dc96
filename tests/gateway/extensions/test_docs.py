"""The MCP and Python-extension examples of docs/extensions.md are real: the config blocks load,
the packaging block declares the entry-point group the gateway reads, the extension registers and
its tool, hook and command work, and every method of the public API is documented. (The
end-to-end tests run the MCP example and the extension through the daemon.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from gateway.config import load_config
from gateway.extensions.discovery import ENTRY_POINT_GROUP
from gateway.extensions.extension_api import Block, CommandContext, Extension, ToolCallStart, ToolContext
from tests.gateway.extensions.support import DIST

DOC = Path(__file__).resolve().parents[3] / "docs" / "extensions.md"


def block(name: str) -> str:
    match = re.search(rf"<!-- example: {name} -->\n```\w+\n(.*?)```", DOC.read_text(), re.S)
    assert match, f"docs/extensions.md has no {name} example"
    return match.group(1)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


def test_the_four_line_example_configures_a_stdio_server(tmp_path: Path) -> None:
    text = block("mcp-config")
    assert len(text.strip().splitlines()) == 4
    (server,) = load_config(write(tmp_path, text), env={"HOME": str(tmp_path)}).mcp_servers
    assert (server.name, server.transport, server.command, server.args, server.sandbox) == (
        "notes",
        "stdio",
        "python3",
        ["notes_server.py"],
        True,
    )


def test_the_http_example_takes_its_secret_from_the_environment(tmp_path: Path) -> None:
    (server,) = load_config(
        write(tmp_path, block("mcp-http-config")), env={"HOME": str(tmp_path)}
    ).mcp_servers
    assert server.transport == "http" and server.headers_from == {"Authorization": "SEARCH_MCP_AUTHORIZATION"}


def test_the_server_example_defines_the_tools_the_doc_names() -> None:
    code = block("mcp-server")
    compile(code, "notes_server.py", "exec")
    assert re.findall(r"def (\w+)\(", code) == ["add_note", "list_notes"]
    for name in ("notes__add_note", "notes__list_notes"):
        assert name in DOC.read_text()


def test_the_packaging_example_uses_the_group_the_gateway_reads() -> None:
    declared = tomllib.loads(block("pyproject"))["project"]["entry-points"]
    assert list(declared) == [ENTRY_POINT_GROUP]
    fixture = tomllib.loads((DIST / "pyproject.toml").read_text())["project"]["entry-points"]
    assert fixture == declared


async def test_the_extension_example_registers_a_working_tool_hook_and_command() -> None:
    module = ModuleType("shout_example")
    exec(compile(block("extension"), "shout.py", "exec"), module.__dict__)
    ext = Extension("shout")
    module.register(ext)
    registered = ext.seal()
    (tool,) = registered.tools
    context = ToolContext(
        session_id="s", agent_id="main", tool_call_id="c", signal=None, update=lambda text: None
    )
    assert await tool.handler({"text": "hi"}, context) == "HI!"
    (guard,) = registered.before_tool

    def start(command: str) -> ToolCallStart:
        return ToolCallStart(
            session_id="s", agent_id="main", tool_call_id="c", tool_name="bash", args={"command": command}
        )

    assert guard(start("rm -rf build")) == Block("this gateway does not delete directories")
    assert guard(start("ls")) is None
    (command,) = registered.commands
    assert await command.handler(CommandContext(args="hello")) == "HELLO!"
    assert registered.run_end


@pytest.mark.parametrize(
    "method",
    [name for name in vars(Extension) if not name.startswith("_") and name != "seal"],
)
def test_every_method_of_the_api_is_documented(method: str) -> None:
    assert f"ext.{method}" in DOC.read_text()
