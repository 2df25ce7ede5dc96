"""The tables of the config file, one model each: `[gateway]`, `[logging]`, `[database]`, `[runs]`,
`[compaction]`, `[sandbox]`, `[metrics]`, `[skills]`, `[prompts]`, `[[models]]` and
`[providers.<name>]` (the agents' tables are in `gateway.config.agents`), and the field types they
share.

Field defaults are the built-in defaults (`config/gateway.toml` writes the same values out). Every
table refuses unknown keys and is immutable once validated.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 18789

QueueMode = Literal["steer", "followup", "collect", "interrupt"]
ThinkingLevel = Literal["off", "minimal", "low", "medium", "high", "xhigh"]
SandboxMode = Literal["auto", "bwrap", "uid", "unsafe-host"]
RiskTier = Literal["low", "medium", "high", "critical"]
LogLevel = Literal["debug", "info", "warning", "error", "critical"]

_MODEL_REF = re.compile(r"^[^/\s]+/\S+$")


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


def current_sandbox_mode(value: Any) -> Any:
    """A `before` validator refusing a sandbox mode this version retired, with its replacement."""
    from gateway.sandbox.settings import RETIRED_MODES, retired_mode_message

    if isinstance(value, str) and value in RETIRED_MODES:
        raise ValueError(retired_mode_message(value))
    return value


RETIRED_AUTH_KEYS = ("auth_max_failures", "auth_lockout_s")
"""`[gateway]` keys of the old lockout, refused with a message naming their replacement."""
PREAUTH_HEAD_ROOM = 32 * 1024
"""What `preauth_max_bytes` must allow beyond one connect frame: the HTTP upgrade request."""

ModelRef = Annotated[str, AfterValidator(_model_ref)]
Secret = Annotated[SecretStr | None, AfterValidator(_non_empty_secret)]
Positive = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]


class Section(BaseModel):
    """A config table: unknown keys are errors, and it cannot change once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class GatewaySection(Section):
    host: str = DEFAULT_HOST
    port: Annotated[int, Field(ge=0, le=65535)] = DEFAULT_PORT
    """0 picks a free port (tests)."""
    home: Path | None = None
    """State directory (database, token, lock); `~/.gateway` when unset. Always set after load."""
    token: Secret = None
    password: Secret = None
    allowed_origins: list[str] = Field(default_factory=list)
    """Browser origins besides the gateway's own, e.g. `https://dash.example.com`."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """`Host` names requests may carry besides the loopback names and `host` itself, e.g.
    `gateway.example.com` (`*.example.com` for a domain's subdomains, `*` for any)."""
    max_payload: Positive = 25 * 1024 * 1024
    max_buffered_bytes: Positive = 50 * 1024 * 1024
    tick_interval_ms: Positive = 30_000
    compat_delta_interval_ms: Annotated[int, Field(ge=0)] = 75
    """Least time between two OpenClaw `agent`/`chat` text deltas of a run (0: every delta)."""
    preauth_max_payload: Positive = 64 * 1024
    preauth_max_frames: Positive = 15
    preauth_max_bytes: Positive = 256 * 1024
    """Bytes a connection may send before it is authenticated (upgrade request and frames)."""
    max_unauthenticated_per_address: Positive = 128
    """Connections one address may hold open before they authenticate."""
    handshake_timeout_s: PositiveFloat = 10.0
    """From TCP accept until authenticated (and until each HTTP request head has arrived)."""
    request_rate_per_s: PositiveFloat = 50.0
    """Sustained requests per second one connection may send."""
    request_burst: Positive = 100
    """Requests a connection may send at once above the sustained rate."""
    auth_failure_delay_s: Annotated[float, Field(ge=0)] = 0.25
    """How long the answer to an address's first wrong credential waits; doubles with each
    further failure in the window."""
    auth_failure_max_delay_s: Annotated[float, Field(ge=0)] = 5.0
    """The longest such wait (never more than half of `handshake_timeout_s`)."""
    auth_failure_window_s: PositiveFloat = 300.0
    """How long a failed authentication counts towards its address's delay."""
    shutdown_grace_s: Annotated[float, Field(ge=0)] = 30.0
    memory_trim_s: Annotated[float, Field(ge=0)] = 30.0
    """Seconds between two hand-backs of the C allocator's free pages to the system (0: never)."""
    collector_young_threshold: Positive = 20_000
    """Tracked objects allocated (net of those freed) between two collections of the cyclic
    collector's youngest generation (Python's default is 700; docs/performance.md)."""

    @model_validator(mode="before")
    @classmethod
    def _retired_keys(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for key in RETIRED_AUTH_KEYS:
                if key in value:
                    raise ValueError(
                        f"{key} was removed: wrong credentials are slowed down, never locked out "
                        "(see auth_failure_delay_s and auth_failure_max_delay_s)"
                    )
        return value

    @model_validator(mode="after")
    def _front_door(self) -> GatewaySection:
        if self.preauth_max_bytes < self.preauth_max_payload + PREAUTH_HEAD_ROOM:
            raise ValueError(
                f"preauth_max_bytes must be at least preauth_max_payload + {PREAUTH_HEAD_ROOM} "
                "(room for the upgrade request and the connect frame)"
            )
        return self


class LoggingSection(Section):
    level: Annotated[LogLevel, BeforeValidator(_lower)] = "info"
    format: Literal["auto", "json", "console"] = "auto"


class MetricsSection(Section):
    enabled: bool = True
    """Serve Prometheus metrics (`docs/operations.md`)."""
    port: Annotated[int, Field(ge=0, le=65535)] = 0
    """0: `GET /metrics` on the gateway's port, with the gateway's token as a Bearer token;
    another number: a plain listener on 127.0.0.1 at that port, without a token."""


class DatabaseSection(Section):
    url: str | None = None
    """SQLAlchemy URL; unset means SQLite at `<home>/gateway.db`."""
    busy_timeout_ms: Positive = 5_000
    """SQLite: how long a statement waits for another process's lock on the database file before
    the request fails with a retryable UNAVAILABLE."""


class ClusterSection(Section):
    """`[cluster]`: a node joins a cluster when the database is PostgreSQL and `redis_url` is set
    (`docs/cluster.md`)."""

    redis_url: str | None = None
    """Redis for cross-node wake-ups and event fan-out (`GATEWAY_REDIS_URL`); unset: one node."""
    node_id: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:-]+$")] | None = None
    """This node's name (`GATEWAY_NODE_ID`); default `<host name>-<pid>`."""
    lease_ttl_s: Annotated[float, Field(ge=1.0, le=600.0)] = 10.0
    """A node that misses heartbeats for this long loses its sessions and channel accounts to
    the others."""
    redis_prefix: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9._:-]+$")] = (
        "agent-gateway"
    )
    """Prefix of the Redis channel names, so several clusters can share one Redis."""


class RunsSection(Section):
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
    context_cache_bytes: Annotated[int, Field(ge=0)] = 64 * 1024 * 1024
    """Parsed contexts kept for live sessions, so a run does not read its history again (0:
    none; `docs/performance.md`)."""


class CompactionSection(Section):
    enabled: bool = True
    reserve_tokens: Positive = 16_384
    keep_recent_tokens: Positive = 20_000


class SandboxSection(Section):
    mode: SandboxMode = "auto"
    """`auto`: the strongest confining runner that works here (bubblewrap, else a one-off user
    when running as root), else bash is refused; `unsafe-host` runs commands unconfined."""
    deny_threshold: RiskTier = "high"
    """Commands classified at this risk tier or above are refused."""
    timeout_s: PositiveFloat = 120.0
    output_cap_bytes: Positive = 1024 * 1024
    bwrap_path: str = Field(default="bwrap", min_length=1)
    """The bubblewrap executable (a name on PATH or a path)."""
    uid_base: Annotated[int, Field(ge=1000, le=4_000_000_000)] = 2_000_000_000
    """First user (and group) id of the uid runner's one-off users."""
    uid_count: Annotated[int, Field(ge=0, le=1_000_000)] = 4096
    """How many one-off users the uid runner may use at once; 0 disables it."""
    max_processes: Positive | None = 64
    memory_bytes: Positive | None = 1024**3
    cpu_seconds: Positive | None = None
    file_size_bytes: Positive | None = None
    open_files: Positive | None = 1024

    _mode = field_validator("mode", mode="before")(classmethod(lambda cls, v: current_sandbox_mode(v)))


class SkillsSection(Section):
    dirs: list[Path] = Field(default_factory=list)
    """Directories of skill folders (each holding a SKILL.md), searched after the agent
    workspace's `.agents/skills/` and before `<home>/skills/`."""


class PromptsSection(Section):
    dirs: list[Path] = Field(default_factory=list)
    """Directories of prompt templates (`<name>.md`), searched after the agent workspace's
    `.agents/prompts/` and before `<home>/prompts/`."""


class ModelCost(Section):
    """USD per million tokens."""

    input: Annotated[float, Field(ge=0)] = 0.0
    output: Annotated[float, Field(ge=0)] = 0.0
    cache_read: Annotated[float, Field(ge=0)] = 0.0
    cache_write: Annotated[float, Field(ge=0)] = 0.0


def _text_only() -> list[Literal["text", "image"]]:
    return ["text"]


class ModelConfig(Section):
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


class ProviderConfig(Section):
    api_key_env: str | None = None
    """Environment variable holding the API key (read at load into `api_key`)."""
    api_key: Secret = None
    api_keys: list[SecretStr] = Field(default_factory=list)
    """More keys for the same provider, rotated on 401/403/429 (each key rests after a failure)."""
    base_url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)


def default_providers() -> dict[str, ProviderConfig]:
    """The built-in `[providers]` tables; a file's table of the same name adds to one of them."""
    return {
        "anthropic": ProviderConfig(api_key_env="ANTHROPIC_API_KEY"),
        "openai": ProviderConfig(api_key_env="OPENAI_API_KEY"),
    }
