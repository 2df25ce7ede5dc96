"""`GatewayConfig`: the whole configuration, one validated, immutable value.

It holds one model per table (`gateway.config.sections`, `gateway.config.agents`), checks what
spans entries (duplicate agents or models), and derives what the daemon asks of it: the state
directory, the database URL, an agent's effective settings. `load_config` builds it.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, field_validator

from gateway.config.agents import (
    DEFAULT_AGENT_ID,
    AgentConfig,
    AgentDefaultsSection,
    ResolvedAgent,
    default_agents,
)
from gateway.config.automation import CronSection, HookName, WebhookConfig
from gateway.config.paths import default_home
from gateway.config.sections import (
    ClusterSection,
    CompactionSection,
    DatabaseSection,
    GatewaySection,
    LoggingSection,
    MetricsSection,
    ModelConfig,
    PromptsSection,
    ProviderConfig,
    RunsSection,
    SandboxSection,
    Section,
    SkillsSection,
    default_providers,
)
from gateway.extensions.mcp_config import McpServerConfig, unique_servers


class GatewayConfig(Section):
    gateway: GatewaySection = Field(default_factory=GatewaySection)
    logging: LoggingSection = Field(default_factory=LoggingSection)
    database: DatabaseSection = Field(default_factory=DatabaseSection)
    cluster: ClusterSection = Field(default_factory=ClusterSection)
    runs: RunsSection = Field(default_factory=RunsSection)
    compaction: CompactionSection = Field(default_factory=CompactionSection)
    sandbox: SandboxSection = Field(default_factory=SandboxSection)
    metrics: MetricsSection = Field(default_factory=MetricsSection)
    skills: SkillsSection = Field(default_factory=SkillsSection)
    prompts: PromptsSection = Field(default_factory=PromptsSection)
    agent_defaults: AgentDefaultsSection = Field(default_factory=AgentDefaultsSection)
    agents: list[AgentConfig] = Field(default_factory=default_agents)
    models: list[ModelConfig] = Field(default_factory=list)
    providers: dict[str, ProviderConfig] = Field(default_factory=default_providers)
    bindings: dict[str, dict[str, dict[str, Any]]] = Field(default_factory=dict)
    """`[bindings.<channel>.<account>]` tables, validated by the binding adapters."""
    cron: CronSection = Field(default_factory=CronSection)
    webhooks: dict[HookName, WebhookConfig] = Field(default_factory=dict)
    """`[webhooks.<name>]`: `POST /hooks/<name>` turns signed deliveries into agent runs."""
    mcp_servers: list[McpServerConfig] = Field(default_factory=list)
    """`[[mcp_servers]]`: MCP servers every agent may use (an agent's own table of the same name
    replaces one of these for that agent)."""

    _source: Path | None = PrivateAttr(default=None)

    @field_validator("agents")
    @classmethod
    def _agents(cls, agents: list[AgentConfig]) -> list[AgentConfig]:
        seen: set[str] = set()
        for agent in agents:
            if agent.id in seen:
                raise ValueError(f"duplicate agent id {agent.id!r}")
            seen.add(agent.id)
        if DEFAULT_AGENT_ID not in seen:
            # Appended, so indices in error messages still match the user's file.
            agents = [*agents, AgentConfig(id=DEFAULT_AGENT_ID)]
        return agents

    _mcp_servers = field_validator("mcp_servers")(classmethod(lambda cls, v: unique_servers(v)))

    @field_validator("providers", mode="before")
    @classmethod
    def _with_default_providers(cls, value: Any) -> Any:
        """A `[providers.openai]` table adds to the built-in one instead of replacing it."""
        if not isinstance(value, dict):
            return value
        merged: dict[str, Any] = {
            name: {"api_key_env": p.api_key_env} for name, p in default_providers().items()
        }
        for name, table in value.items():
            base = merged.get(name)
            merged[name] = {**base, **table} if isinstance(table, dict) and base is not None else table
        return merged

    @field_validator("models")
    @classmethod
    def _models(cls, models: list[ModelConfig]) -> list[ModelConfig]:
        seen: set[tuple[str, str]] = set()
        for model in models:
            key = (model.provider, model.id)
            if key in seen:
                raise ValueError(f"duplicate model {model.provider}/{model.id}")
            seen.add(key)
        return models

    # --- derived values -----------------------------------------------------------------------

    @property
    def source_path(self) -> Path | None:
        """The user file this config was loaded from, if any."""
        return self._source

    @property
    def home(self) -> Path:
        return self.gateway.home if self.gateway.home is not None else default_home(os.environ)

    @property
    def database_url(self) -> str:
        return self.database.url or f"sqlite+aiosqlite:///{self.home / 'gateway.db'}"

    @property
    def clustered(self) -> bool:
        """Whether this node joins a cluster: PostgreSQL and a Redis URL."""
        return self.cluster.redis_url is not None and self.database_url.startswith("postgresql")

    @property
    def node_id(self) -> str:
        """This node's name in the cluster."""
        return self.cluster.node_id or f"{socket.gethostname()}-{os.getpid()}"

    @property
    def agent_ids(self) -> tuple[str, ...]:
        return tuple(agent.id for agent in self.agents)

    def agent_dir(self, agent_id: str) -> Path:
        base = self._source.parent if self._source is not None else self.home
        return base / "agents" / agent_id

    def mcp_servers_for(self, agent_id: str) -> tuple[McpServerConfig, ...]:
        """The MCP servers `agent_id` uses: the global ones, an agent's own table replacing the
        global one of the same name. Empty for an unknown agent."""
        agent = next((a for a in self.agents if a.id == agent_id), None)
        if agent is None:
            return ()
        own = {server.name: server for server in agent.mcp_servers}
        merged = [own.pop(server.name, server) for server in self.mcp_servers]
        return (*merged, *own.values())

    def resolve_agent(self, agent_id: str) -> ResolvedAgent:
        """Effective settings of `agent_id`. Raises KeyError for an unknown agent."""
        agent = next((a for a in self.agents if a.id == agent_id), None)
        if agent is None:
            raise KeyError(agent_id)
        return ResolvedAgent(
            id=agent.id,
            label=agent.label,
            workspace=agent.workspace or self.home / "workspaces" / agent.id,
            system_prompt_file=agent.system_prompt_file or self.agent_dir(agent.id) / "SYSTEM.md",
            system_prompt_explicit=agent.system_prompt_file is not None,
            model=agent.model or self.agent_defaults.model,
            thinking_level=agent.thinking_level or self.agent_defaults.thinking_level,
            tools_allow=tuple(agent.tools_allow) if agent.tools_allow is not None else None,
            tools_deny=tuple(agent.tools_deny),
            sandbox_mode=agent.sandbox_mode or self.sandbox.mode,
            queue_mode=agent.queue_mode or self.runs.default_queue_mode,
            fallbacks=tuple(
                agent.fallbacks if agent.fallbacks is not None else self.agent_defaults.fallbacks
            ),
            compaction_model=agent.compaction_model or self.agent_defaults.compaction_model,
        )
