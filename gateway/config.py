"""Configuration: one validated, immutable `GatewayConfig`, built from three layers.

1. Defaults. The field defaults of the models below are the single source of truth; the
   installed package needs no data file. `config/gateway.toml` in the repository writes the same
   values out with comments, as documentation and a starting point, and a test keeps the two
   identical.
2. The user file: `load_config(path)`, else the path in `GATEWAY_CONFIG`. Relative paths inside
   it are relative to the file; `~` is the user's home.
3. Environment variables (`ENV_OVERRIDES`, plus each provider's `api_key_env`).

Errors never surface as tracebacks: `load_config` raises `ConfigError` whose message names the
source (file or environment variable) and the key path, e.g.
``config error in /etc/gateway.toml: runs.max_concurrent: Input should be greater than 0``.
Unknown keys are errors too, except inside `[bindings]`, which the binding adapters validate.

An agent `main` always exists, configured or not. Its system prompt is read from
`<config dir>/agents/<id>/SYSTEM.md` (or `<home>/agents/<id>/SYSTEM.md` without a user file)
and falls back to `DEFAULT_SYSTEM_PROMPT` when that file does not exist.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
)

from gateway.errors import ConfigError, ConfigProblem
from gateway.logging import redact

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 18789
DEFAULT_AGENT_ID = "main"
DEFAULTS_SOURCE = "built-in defaults"

QueueMode = Literal["steer", "followup", "collect", "interrupt"]
ThinkingLevel = Literal["off", "minimal", "low", "medium", "high", "xhigh"]
SandboxMode = Literal["auto", "bwrap", "subprocess"]
RiskTier = Literal["low", "medium", "high", "critical"]
LogLevel = Literal["debug", "info", "warning", "error", "critical"]

_MODEL_REF = re.compile(r"^[^/\s]+/\S+$")
_AGENT_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def _model_ref(value: str) -> str:
    if not _MODEL_REF.match(value):
        raise ValueError(f"model must be written provider/model-id, got {value!r}")
    return value


def _lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _non_empty_secret(value: SecretStr | None) -> SecretStr | None:
    if value is not None and not value.get_secret_value():
        raise ValueError("must not be empty (leave the key out instead)")
    return value


ModelRef = Annotated[str, AfterValidator(_model_ref)]
Secret = Annotated[SecretStr | None, AfterValidator(_non_empty_secret)]
Positive = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GatewaySection(_Section):
    host: str = DEFAULT_HOST
    port: Annotated[int, Field(ge=0, le=65535)] = DEFAULT_PORT
    """0 picks a free port (tests)."""
    home: Path | None = None
    """State directory (database, token, lock); `~/.gateway` when unset. Always set after load."""
    token: Secret = None
    password: Secret = None
    allowed_origins: list[str] = Field(default_factory=list)
    """Browser origins besides the gateway's own, e.g. `https://dash.example.com`."""
    max_payload: Positive = 25 * 1024 * 1024
    max_buffered_bytes: Positive = 50 * 1024 * 1024
    tick_interval_ms: Positive = 30_000
    preauth_max_payload: Positive = 64 * 1024
    preauth_max_frames: Positive = 15
    handshake_timeout_s: PositiveFloat = 15.0
    request_rate_per_s: PositiveFloat = 50.0
    """Sustained requests per second one connection may send."""
    request_burst: Positive = 100
    """Requests a connection may send at once above the sustained rate."""
    auth_max_failures: Positive = 10
    auth_failure_window_s: PositiveFloat = 60.0
    auth_lockout_s: Annotated[float, Field(ge=0)] = 300.0
    shutdown_grace_s: Annotated[float, Field(ge=0)] = 30.0


class LoggingSection(_Section):
    level: Annotated[LogLevel, BeforeValidator(_lower)] = "info"
    format: Literal["auto", "json", "console"] = "auto"


class DatabaseSection(_Section):
    url: str | None = None
    """SQLAlchemy URL; unset means SQLite at `<home>/gateway.db`."""
    busy_timeout_ms: Positive = 5_000
    """SQLite: how long a statement waits for another process's lock on the database file before
    the request fails with a retryable UNAVAILABLE."""


class RunsSection(_Section):
    max_concurrent: Positive = 16
    max_duration_s: PositiveFloat = 48 * 3600.0
    idle_timeout_s: PositiveFloat = 120.0
    """Abort a run when its model stream or tool produces nothing for this long."""
    lane_depth: Positive = 64
    """Operations one session may have queued behind the running one."""
    max_live_sessions: Positive = 1000
    live_session_idle_ttl_s: PositiveFloat = 600.0
    default_queue_mode: QueueMode = "steer"
    collect_window_ms: Annotated[int, Field(ge=0)] = 1500


class CompactionSection(_Section):
    enabled: bool = True
    reserve_tokens: Positive = 16_384
    keep_recent_tokens: Positive = 20_000


class SandboxSection(_Section):
    mode: SandboxMode = "auto"
    """`auto`: bubblewrap when available, else a confined subprocess."""
    deny_threshold: RiskTier = "high"
    """Commands classified at this risk tier or above are refused."""
    timeout_s: PositiveFloat = 120.0
    output_cap_bytes: Positive = 1024 * 1024


class AgentDefaultsSection(_Section):
    model: ModelRef | None = None
    """`provider/model-id` for agents that name none (env `GATEWAY_MODEL`)."""
    thinking_level: ThinkingLevel = "off"


class AgentConfig(_Section):
    id: str
    label: str | None = None
    workspace: Path | None = None
    """Defaults to `<home>/workspaces/<id>`."""
    system_prompt_file: Path | None = None
    """Defaults to `<agent dir>/SYSTEM.md`; an explicitly named file must exist."""
    model: ModelRef | None = None
    thinking_level: ThinkingLevel | None = None
    tools_allow: list[str] | None = None
    """Only these tools (None: all)."""
    tools_deny: list[str] = Field(default_factory=list)
    sandbox_mode: SandboxMode | None = None
    queue_mode: QueueMode | None = None

    @field_validator("id")
    @classmethod
    def _valid_id(cls, value: str) -> str:
        if not _AGENT_ID.match(value):
            raise ValueError(
                "agent id must be 1-64 characters of a-z, 0-9, '_' or '-', starting with a letter or digit"
            )
        return value


class ModelCost(_Section):
    """USD per million tokens."""

    input: Annotated[float, Field(ge=0)] = 0.0
    output: Annotated[float, Field(ge=0)] = 0.0
    cache_read: Annotated[float, Field(ge=0)] = 0.0
    cache_write: Annotated[float, Field(ge=0)] = 0.0


def _text_only() -> list[Literal["text", "image"]]:
    return ["text"]


class ModelConfig(_Section):
    """A model the built-in catalogue does not know (a local server, a new release)."""

    id: str = Field(min_length=1)
    provider: str = Field(min_length=1)
    api: str = Field(min_length=1)
    """Wire API, e.g. `openai-completions`, `openai-responses`, `anthropic-messages`."""
    name: str | None = None
    base_url: str | None = None
    context_window: Positive = 128_000
    max_tokens: Positive = 16_384
    reasoning: bool = False
    input: list[Literal["text", "image"]] = Field(default_factory=_text_only)
    cost: ModelCost = Field(default_factory=ModelCost)
    headers: dict[str, str] = Field(default_factory=dict)


class ProviderConfig(_Section):
    api_key_env: str | None = None
    """Environment variable holding the API key (read at load into `api_key`)."""
    api_key: Secret = None
    base_url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)


def _default_providers() -> dict[str, ProviderConfig]:
    return {
        "anthropic": ProviderConfig(api_key_env="ANTHROPIC_API_KEY"),
        "openai": ProviderConfig(api_key_env="OPENAI_API_KEY"),
    }


def _default_agents() -> list[AgentConfig]:
    return [AgentConfig(id=DEFAULT_AGENT_ID)]


@dataclass(frozen=True, slots=True)
class ResolvedAgent:
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


class GatewayConfig(_Section):
    gateway: GatewaySection = Field(default_factory=GatewaySection)
    logging: LoggingSection = Field(default_factory=LoggingSection)
    database: DatabaseSection = Field(default_factory=DatabaseSection)
    runs: RunsSection = Field(default_factory=RunsSection)
    compaction: CompactionSection = Field(default_factory=CompactionSection)
    sandbox: SandboxSection = Field(default_factory=SandboxSection)
    agent_defaults: AgentDefaultsSection = Field(default_factory=AgentDefaultsSection)
    agents: list[AgentConfig] = Field(default_factory=_default_agents)
    models: list[ModelConfig] = Field(default_factory=list)
    providers: dict[str, ProviderConfig] = Field(default_factory=_default_providers)
    bindings: dict[str, dict[str, dict[str, Any]]] = Field(default_factory=dict)
    """`[bindings.<channel>.<account>]` tables, validated by the binding adapters."""

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

    @field_validator("providers", mode="before")
    @classmethod
    def _with_default_providers(cls, value: Any) -> Any:
        """A `[providers.openai]` table adds to the built-in one instead of replacing it."""
        if not isinstance(value, dict):
            return value
        merged: dict[str, Any] = {
            name: {"api_key_env": p.api_key_env} for name, p in _default_providers().items()
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
    def agent_ids(self) -> tuple[str, ...]:
        return tuple(agent.id for agent in self.agents)

    def agent_dir(self, agent_id: str) -> Path:
        base = self._source.parent if self._source is not None else self.home
        return base / "agents" / agent_id

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
        )


# --- loading ----------------------------------------------------------------------------------

ENV_OVERRIDES: Mapping[str, tuple[str, ...]] = {
    "GATEWAY_HOST": ("gateway", "host"),
    "GATEWAY_PORT": ("gateway", "port"),
    "GATEWAY_TOKEN": ("gateway", "token"),
    "GATEWAY_PASSWORD": ("gateway", "password"),
    "GATEWAY_HOME": ("gateway", "home"),
    "GATEWAY_MODEL": ("agent_defaults", "model"),
    "GATEWAY_LOG_LEVEL": ("logging", "level"),
    "GATEWAY_DATABASE_URL": ("database", "url"),
    "OPENAI_BASE_URL": ("providers", "openai", "base_url"),
    "ANTHROPIC_BASE_URL": ("providers", "anthropic", "base_url"),
}
"""Environment variable -> key path it overrides. API keys come from each provider's
`api_key_env` (by default `OPENAI_API_KEY`, `ANTHROPIC_API_KEY`)."""

_FILE_PATH_KEYS = (("gateway", "home"),)
_AGENT_PATH_KEYS = ("workspace", "system_prompt_file")

Loc = tuple[str | int, ...]


def default_home(env: Mapping[str, str]) -> Path:
    """`GATEWAY_HOME`, else `~/.gateway`."""
    if env.get("GATEWAY_HOME"):
        return _expand(env["GATEWAY_HOME"], env).absolute()
    return _user_home(env) / ".gateway"


def _user_home(env: Mapping[str, str]) -> Path:
    return Path(env["HOME"]) if env.get("HOME") else Path.home()


def _expand(value: str, env: Mapping[str, str]) -> Path:
    if value == "~" or value.startswith("~/"):
        return _user_home(env) / value[2:]
    return Path(value)


def load_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> GatewayConfig:
    """Build the configuration: defaults, then the user file (`path`, else `GATEWAY_CONFIG`, else
    none), then environment variables. `env` defaults to `os.environ`.

    Raises ConfigError (one line per problem, naming the source and the key) for an unreadable
    or invalid file, an unknown key, an invalid value, or an explicitly configured system prompt
    file that does not exist.
    """
    env = os.environ if env is None else env
    if path is None and env.get("GATEWAY_CONFIG"):
        path = _expand(env["GATEWAY_CONFIG"], env)
    source = path.absolute() if path is not None else None

    raw: dict[str, Any] = {}
    origins: dict[Loc, str] = {}
    if source is not None:
        _merge(raw, _read_file(source, env), str(source), origins)
    _merge(raw, _env_layer(raw, env), "environment", origins)

    try:
        config = GatewayConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_problems(exc, origins, str(source) if source else DEFAULTS_SOURCE)) from None

    home = config.gateway.home or default_home(env)
    config = config.model_copy(update={"gateway": config.gateway.model_copy(update={"home": home})})
    config._source = source
    _check_files(config, origins)
    return config


def _read_file(path: Path, env: Mapping[str, str]) -> dict[str, Any]:
    def fail(message: str) -> ConfigError:
        return ConfigError([ConfigProblem(str(path), "", message)])

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise fail("file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read file: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise fail(f"invalid TOML: {exc}") from None
    _absolutize(data, path.parent, env)
    return data


def _absolutize(data: dict[str, Any], base: Path, env: Mapping[str, str]) -> None:
    """Paths written in a file are relative to that file."""

    def fix(value: Any) -> Any:
        if isinstance(value, str) and value:
            expanded = _expand(value, env)
            return str(expanded if expanded.is_absolute() else base / expanded)
        return value

    for section, key in _FILE_PATH_KEYS:
        table = data.get(section)
        if isinstance(table, dict) and key in table:
            table[key] = fix(table[key])
    agents = data.get("agents")
    if isinstance(agents, list):
        for agent in agents:
            if isinstance(agent, dict):
                for key in _AGENT_PATH_KEYS:
                    if key in agent:
                        agent[key] = fix(agent[key])


def _env_layer(merged: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The environment as a nested dict whose leaves remember their variable name."""
    layer: dict[str, Any] = {}

    def put(path: tuple[str, ...], name: str, value: str) -> None:
        node = layer
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = _EnvValue(name, value)

    for name, path in ENV_OVERRIDES.items():
        value = env.get(name)
        if value:
            if name == "GATEWAY_HOME":
                value = str(_expand(value, env).absolute())
            put(path, name, value)

    providers = dict(_default_providers())
    file_providers = merged.get("providers")
    names = set(providers) | (set(file_providers) if isinstance(file_providers, dict) else set())
    for provider in sorted(names):
        key_env = providers[provider].api_key_env if provider in providers else None
        if isinstance(file_providers, dict) and isinstance(file_providers.get(provider), dict):
            key_env = file_providers[provider].get("api_key_env", key_env)
        if isinstance(key_env, str) and env.get(key_env):
            put(("providers", provider, "api_key"), key_env, env[key_env])
    return layer


@dataclass(frozen=True, slots=True)
class _EnvValue:
    name: str
    value: str


def _merge(
    base: dict[str, Any],
    overlay: Mapping[str, Any],
    source: str,
    origins: dict[Loc, str],
    path: Loc = (),
) -> None:
    """Merge `overlay` into `base` (tables merge, everything else replaces) and record where each
    value came from."""
    for key, value in overlay.items():
        here = (*path, key)
        if isinstance(value, Mapping):
            node = base.get(key)
            if not isinstance(node, dict):
                node = base[key] = {}
            _merge(node, value, source, origins, here)
            continue
        if isinstance(value, _EnvValue):
            base[key] = value.value
            origins[here] = f"environment variable {value.name}"
        else:
            base[key] = value
            origins[here] = source
        for stale in [loc for loc in origins if len(loc) > len(here) and loc[: len(here)] == here]:
            del origins[stale]


def _problems(exc: ValidationError, origins: Mapping[Loc, str], fallback: str) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    for error in exc.errors(include_url=False):
        loc: Loc = tuple(error["loc"])
        problems.append(ConfigProblem(_origin(loc, origins, fallback), _dotted(loc), _message(error)))
    return problems


def _origin(loc: Loc, origins: Mapping[Loc, str], fallback: str) -> str:
    for end in range(len(loc), 0, -1):
        found = origins.get(loc[:end])
        if found is not None:
            return found
    # An error on a table (a missing key, a cross-field check): blame whoever set keys in it.
    under = sorted({src for key, src in origins.items() if key[: len(loc)] == loc})
    return under[0] if len(under) == 1 else fallback


def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


def _check_files(config: GatewayConfig, origins: Mapping[Loc, str]) -> None:
    problems: list[ConfigProblem] = []
    for index, agent in enumerate(config.agents):
        if agent.system_prompt_file is not None and not agent.system_prompt_file.is_file():
            loc: Loc = ("agents", index, "system_prompt_file")
            problems.append(
                ConfigProblem(
                    _origin(loc, origins, DEFAULTS_SOURCE),
                    _dotted(loc),
                    f"file not found: {agent.system_prompt_file}",
                )
            )
    if problems:
        raise ConfigError(problems)


# --- views ------------------------------------------------------------------------------------


def redacted(config: GatewayConfig) -> dict[str, Any]:
    """The configuration as JSON-ready data with every secret masked (set secrets read `***`,
    unset ones stay null): for `config.get` and `gatewayctl config show`."""
    data = config.model_dump(mode="python")
    view: dict[str, Any] = _jsonable(redact(_unwrap_secrets(data)))
    return view


def config_hash(config: GatewayConfig) -> str:
    """A stable fingerprint of the configuration (of its redacted form, so secrets do not leak
    through it): `sha256:<hex>`."""
    canonical = json.dumps(redacted(config), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _unwrap_secrets(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return "***"
    if isinstance(value, dict):
        return {key: _unwrap_secrets(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unwrap_secrets(item) for item in value]
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value


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
