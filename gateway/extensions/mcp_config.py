"""The `[[mcp_servers]]` tables: one MCP server each, global or inside an `[[agents]]` table.

A server is either a program spoken to over stdio (`command`, `args`, `env`, `env_from`, `cwd`,
`sandbox`, `read_only`, `network`) or an endpoint spoken to over streamable HTTP (`url`,
`headers`, `headers_from`). Secrets never sit in the file: `env_from` and `headers_from` name the
daemon's environment variables that hold them, and a literal `env` or `headers` entry whose name
looks like a credential is refused.

This module only describes and validates the settings (pydantic, no MCP SDK import), so the
configuration can be loaded without importing anything MCP-related.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SERVER_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_)){0,31}$")
"""1-32 letters, digits, '-' or '_', starting with a letter or digit, no '__' (the separator of
the tool names the model sees: `<server>__<tool>`)."""
SERVER_NAME_RULE = "1-32 letters, digits, '-' or '_', starting with a letter or digit, without '__'"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key"})

Transport = Literal["stdio", "http"]


def is_secret_name(name: str) -> bool:
    """The sandbox's rule for names that suggest a credential (imported when first needed, so
    that loading a configuration without MCP servers does not import the sandbox)."""
    from gateway.sandbox.runners import is_secret_name as secret

    return secret(name)


def _is_secret_header(name: str) -> bool:
    return name.lower() in _SECRET_HEADERS or is_secret_name(name.replace("-", "_"))


class McpServerConfig(BaseModel):
    """One `[[mcp_servers]]` table (see the module docstring and docs/extensions.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    """The prefix of the server's tools as the model sees them (`<name>__<tool>`)."""
    command: str | None = None
    """stdio: the program (looked up on PATH inside the sandbox, or a path)."""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    """stdio: variables the server sees besides PATH, LANG, TERM and HOME (no secrets)."""
    env_from: dict[str, str] = Field(default_factory=dict)
    """stdio: variable the server sees -> the daemon's environment variable holding its value."""
    cwd: Path | None = None
    """stdio: the working directory; relative to the agent's workspace (default: the workspace)."""
    sandbox: bool = True
    """stdio: start the server inside the agent's sandbox (false: as the daemon's user, unconfined)."""
    read_only: list[Path] = Field(default_factory=list)
    """stdio, sandboxed: host paths the server may read besides the system (a virtualenv, a
    node_modules). Relative paths are relative to the config file."""
    network: bool = False
    """stdio, sandboxed with bubblewrap: keep the host's network (default: none)."""
    url: str | None = None
    """HTTP: the streamable HTTP endpoint, e.g. `http://127.0.0.1:8000/mcp`."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP: headers sent with every request (no secrets)."""
    headers_from: dict[str, str] = Field(default_factory=dict)
    """HTTP: header -> the daemon's environment variable holding its value."""
    timeout_s: Annotated[float, Field(gt=0)] = 60.0
    """The longest one tool call may take."""
    startup_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    """The longest starting the server and listing its tools may take."""
    idle_timeout_s: Annotated[float, Field(ge=0)] = 600.0
    """Stop the server after this long without use (0: keep it running)."""

    @property
    def transport(self) -> Transport:
        return "stdio" if self.command is not None else "http"

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not SERVER_NAME.match(value):
            raise ValueError(f"an MCP server name is {SERVER_NAME_RULE}, got {value!r}")
        return value

    @field_validator("env", "env_from")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, source in value.items():
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if not source:
                raise ValueError(f"{name}: empty value")
        return value

    @field_validator("env")
    @classmethod
    def _no_literal_env_secret(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if is_secret_name(name):
                raise ValueError(
                    f"{name} looks like a secret: put it in the daemon's environment and name the "
                    f'variable in env_from (env_from = {{{name} = "MY_{name}"}})'
                )
        return value

    @field_validator("env_from", "headers_from")
    @classmethod
    def _sources(cls, value: dict[str, str]) -> dict[str, str]:
        for name, source in value.items():
            if not _ENV_NAME.match(source):
                raise ValueError(f"{name}: {source!r} is not an environment variable name")
        return value

    @field_validator("headers", "headers_from")
    @classmethod
    def _header_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _HEADER_NAME.match(name):
                raise ValueError(f"{name!r} is not an HTTP header name")
        return value

    @field_validator("headers")
    @classmethod
    def _no_literal_header_secret(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if _is_secret_header(name):
                raise ValueError(
                    f"header {name} carries a credential: put its value in the daemon's environment "
                    f'and name the variable in headers_from ({{"{name}" = "MY_SERVER_TOKEN"}})'
                )
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url must be an http:// or https:// URL, got {value!r}")
        if parts.username or parts.password:
            raise ValueError("url must not carry credentials; use headers_from")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"MCP server {self.name!r}: set either command (stdio) or url (HTTP)")
        if self.command is not None and not self.command.strip():
            raise ValueError(f"MCP server {self.name!r}: command is empty")
        stdio_only = ("args", "env", "env_from", "cwd", "read_only", "network")
        http_only = ("headers", "headers_from")
        given = self.model_fields_set
        wrong = [key for key in (stdio_only if self.url is not None else http_only) if key in given]
        if self.url is not None and "sandbox" in given:
            wrong.insert(0, "sandbox")
        if wrong:
            kind = "an HTTP server (url)" if self.url is not None else "a stdio server (command)"
            raise ValueError(f"MCP server {self.name!r}: {', '.join(wrong)} do not apply to {kind}")
        return self


def unique_servers(servers: list[McpServerConfig]) -> list[McpServerConfig]:
    """`servers` when their names are unique; raises ValueError naming the first duplicate."""
    seen: set[str] = set()
    for server in servers:
        if server.name in seen:
            raise ValueError(f"duplicate MCP server name {server.name!r}")
        seen.add(server.name)
    return servers
