"""Agents in the config: `[agent_defaults]`, the `[[agents]]` tables, and an agent's effective
settings once the defaults are filled in (`ResolvedAgent`).

An agent `main` always exists, configured or not. Its system prompt is read from
`<config dir>/agents/<id>/SYSTEM.md` (or `<home>/agents/<id>/SYSTEM.md` without a user file)
and falls back to `DEFAULT_SYSTEM_PROMPT` when that file does not exist.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import msgspec
from pydantic import Field, field_validator

from gateway.config.sections import (
    ModelRef,
    PositiveFloat,
    QueueMode,
    RiskTier,
    SandboxMode,
    Section,
    ThinkingLevel,
    current_sandbox_mode,
)
from gateway.errors import ConfigError, ConfigProblem
from gateway.extensions.mcp_config import McpServerConfig, unique_servers

DEFAULT_AGENT_ID = "main"

ApprovalMode = Literal["never", "risky", "always"]

_AGENT_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


class AgentDefaultsSection(Section):
    model: ModelRef | None = None
    """`provider/model-id` for agents that name none (env `GATEWAY_MODEL`)."""
    thinking_level: ThinkingLevel = "off"
    fallbacks: list[ModelRef] = Field(default_factory=list)
    """Models to try, in order, when the agent's model is overloaded or its context too small."""
    compaction_model: ModelRef | None = None
    """A (cheaper) model for compaction summaries; None: the session's own model."""


class AgentConfig(Section):
    id: str
    label: str | None = None
    workspace: Path | None = None
    """Defaults to `<home>/workspaces/<id>`."""
    system_prompt_file: Path | None = None
    """Defaults to `<agent dir>/SYSTEM.md`; an explicitly named file must exist."""
    model: ModelRef | None = None
    fallbacks: list[ModelRef] | None = None
    """None: `[agent_defaults] fallbacks`; `[]` turns them off for this agent."""
    compaction_model: ModelRef | None = None
    thinking_level: ThinkingLevel | None = None
    tools_allow: list[str] | None = None
    """Only these tools (None: all)."""
    tools_deny: list[str] = Field(default_factory=list)
    sandbox_mode: SandboxMode | None = None
    queue_mode: QueueMode | None = None
    mcp_servers: list[McpServerConfig] = Field(default_factory=list)
    """`[[agents.mcp_servers]]`: MCP servers of this agent alone."""
    approvals: ApprovalMode = "never"
    """Which tool calls wait for a person's decision: `never`, `risky` (the rules below) or
    `always` (every call). docs/approvals.md."""
    approval_tools: list[str] = Field(default_factory=list)
    """`risky`: these tools always ask."""
    ask_threshold: RiskTier | None = "medium"
    """`risky`: shell commands classified at this tier or above ask (below `[sandbox]`'s
    `deny_threshold`, which refuses them outright); None: no command asks for its risk."""
    approval_outside_workspace: bool = True
    """`risky`: a file tool's path, or an absolute path in a command, outside the workspace asks."""
    approval_mcp_servers: list[str] = Field(default_factory=list)
    """`risky`: tools of these MCP servers (`<server>__<tool>`) ask; `"*"` for every server."""
    approval_timeout_s: PositiveFloat = 600.0
    """A request nobody decides within this ends as denied (`expired`)."""

    _mcp_servers = field_validator("mcp_servers")(classmethod(lambda cls, v: unique_servers(v)))
    _sandbox_mode = field_validator("sandbox_mode", mode="before")(
        classmethod(lambda cls, v: current_sandbox_mode(v))
    )

    @field_validator("id")
    @classmethod
    def _valid_id(cls, value: str) -> str:
        if not _AGENT_ID.match(value):
            raise ValueError(
                "agent id must be 1-64 characters of a-z, 0-9, '_' or '-', starting with a letter or digit"
            )
        return value


def default_agents() -> list[AgentConfig]:
    """The agents of a config that configures none: `main` alone."""
    return [AgentConfig(id=DEFAULT_AGENT_ID)]


class ResolvedAgent(msgspec.Struct, frozen=True):
    """An agent's effective settings: its own, else `[agent_defaults]`, `[runs]`, `[sandbox]`."""

    id: str
    label: str | None
    workspace: Path
    system_prompt_file: Path
    system_prompt_explicit: bool
    model: str | None
    thinking_level: ThinkingLevel
    tools_allow: tuple[str, ...] | None
    tools_deny: tuple[str, ...]
    sandbox_mode: SandboxMode
    queue_mode: QueueMode
    fallbacks: tuple[str, ...] = ()
    compaction_model: str | None = None

    def system_prompt(self) -> str:
        """The agent's system prompt: its file, or `DEFAULT_SYSTEM_PROMPT` when the default file
        does not exist. Raises ConfigError when an explicitly configured file cannot be read."""
        try:
            return self.system_prompt_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            if not self.system_prompt_explicit:
                return DEFAULT_SYSTEM_PROMPT
            problem = f"system prompt file not found: {self.system_prompt_file}"
        except (OSError, UnicodeDecodeError) as exc:
            problem = f"cannot read system prompt file {self.system_prompt_file}: {exc}"
        raise ConfigError([ConfigProblem(f"agent {self.id!r}", "system_prompt_file", problem)])


DEFAULT_SYSTEM_PROMPT = """\
You are a capable assistant working inside a gateway that keeps your conversation in a session.

You can use tools to read, write and edit files, run shell commands, and search your workspace.
Work in your workspace directory unless you are asked otherwise.

- Before changing a file, read it. Make focused changes and say what you changed.
- Prefer small, verifiable steps. Run commands to check your work when you can.
- Shell commands run in a sandbox; some dangerous commands are refused. If a command is refused,
  explain what you wanted to do instead of trying to get around the refusal.
- If a request is ambiguous, ask one short question before acting.
- Keep answers concise. Show code and command output only when it helps.
"""
