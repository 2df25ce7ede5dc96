"""Configuration: one validated, immutable `GatewayConfig`, built from defaults, the user file and
the environment.

- `sections`: the tables of the file (`[gateway]`, `[runs]`, `[sandbox]`, `[[models]]`,
  `[providers.<name>]`, ...) and the field types they share;
- `agents`: `[agent_defaults]`, `[[agents]]` and an agent's effective settings;
- `gateway_config`: `GatewayConfig`, the tables together and what is derived from them;
- `paths`: `~` and the state directory's default;
- `loading`: `load_config`, the three layers, and errors that name the key and the source;
- `view`: the configuration as clients see it, secrets masked;
- `gateway.extensions.mcp_config`: the `[[mcp_servers]]` tables (global and per agent).

What applies live on `config.reload` and what waits for a restart is decided by the running
daemon (`gateway.app.Gateway.reload`), which owns the parts a change reaches.
"""

from __future__ import annotations

from gateway.config.agents import DEFAULT_AGENT_ID, DEFAULT_SYSTEM_PROMPT, AgentConfig, ResolvedAgent
from gateway.config.gateway_config import GatewayConfig
from gateway.config.loading import DEFAULTS_SOURCE, ENV_OVERRIDES, load_config
from gateway.config.paths import default_home
from gateway.config.sections import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    ModelConfig,
    ProviderConfig,
    QueueMode,
    SandboxMode,
    ThinkingLevel,
)
from gateway.config.view import config_hash, redacted

__all__ = [
    "DEFAULTS_SOURCE",
    "DEFAULT_AGENT_ID",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEFAULT_SYSTEM_PROMPT",
    "ENV_OVERRIDES",
    "AgentConfig",
    "GatewayConfig",
    "ModelConfig",
    "ProviderConfig",
    "QueueMode",
    "ResolvedAgent",
    "SandboxMode",
    "ThinkingLevel",
    "config_hash",
    "default_home",
    "load_config",
    "redacted",
]
