"""The `[[mcp_servers]]` tables: global and per agent, validated, secrets only by reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import load_config
from gateway.errors import ConfigError


def load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return load_config(path, env={"HOME": str(tmp_path)})


def test_stdio_and_http_servers_global_and_per_agent(tmp_path: Path) -> None:
    config = load_config(
        _write(
            tmp_path,
            """
[[mcp_servers]]
name = "notes"
command = "python3"
args = ["notes.py"]
read_only = ["venv", "/opt/tools"]

[[mcp_servers]]
name = "search"
url = "https://mcp.example.com/mcp"
headers = { "X-Client" = "gateway" }
headers_from = { Authorization = "SEARCH_AUTH" }

[[agents]]
id = "main"

[[agents]]
id = "writer"
[[agents.mcp_servers]]
name = "notes"
command = "notes-server"
sandbox = false
""",
        ),
        env={"HOME": str(tmp_path)},
    )
    main = config.mcp_servers_for("main")
    assert [(s.name, s.transport) for s in main] == [("notes", "stdio"), ("search", "http")]
    assert main[0].read_only == [tmp_path / "venv", Path("/opt/tools")]
    writer = config.mcp_servers_for("writer")
    assert [(s.name, s.command, s.sandbox) for s in writer] == [
        ("notes", "notes-server", False),
        ("search", None, True),
    ]
    assert config.mcp_servers_for("nobody") == ()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('name = "a"', "set either command (stdio) or url (HTTP)"),
        ('name = "a"\ncommand = "x"\nurl = "http://h/mcp"', "set either command"),
        ('name = "a__b"\ncommand = "x"', "without '__'"),
        (
            'name = "a"\ncommand = "x"\nenv = { OPENAI_API_KEY = "sk-1" }',
            "OPENAI_API_KEY looks like a secret",
        ),
        (
            'name = "a"\nurl = "http://h/mcp"\nheaders = { Authorization = "Bearer x" }',
            "carries a credential",
        ),
        ('name = "a"\nurl = "http://u:p@h/mcp"', "must not carry credentials"),
        ('name = "a"\nurl = "ftp://h/mcp"', "http:// or https://"),
        ('name = "a"\nurl = "http://h/mcp"\nargs = ["x"]', "args do not apply to an HTTP server"),
        ('name = "a"\nurl = "http://h/mcp"\nsandbox = false', "sandbox do not apply"),
        (
            'name = "a"\ncommand = "x"\nheaders_from = { A = "B" }',
            "headers_from do not apply to a stdio server",
        ),
        ('name = "a"\ncommand = "x"\nenv_from = { K = "not a name" }', "is not an environment variable name"),
        ('name = "a"\ncommand = "x"\ntimeout_s = 0', "greater than 0"),
        ('name = "a"\ncommand = "x"\nwhat = 1', "unknown key"),
    ],
)
def test_invalid_tables_name_the_problem(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError, match="mcp_servers\\[0\\]") as failed:
        load_config(_write(tmp_path, f"[[mcp_servers]]\n{table}\n"), env={"HOME": str(tmp_path)})
    assert message in str(failed.value)


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    text = '[[mcp_servers]]\nname = "a"\ncommand = "x"\n[[mcp_servers]]\nname = "a"\nurl = "http://h/mcp"\n'
    with pytest.raises(ConfigError, match="duplicate MCP server name 'a'"):
        load_config(_write(tmp_path, text), env={"HOME": str(tmp_path)})


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path
