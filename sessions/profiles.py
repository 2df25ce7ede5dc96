"""What a live session needs to know about agents and run limits, supplied by the caller.

`sessions` never reads the gateway's config: the gateway turns its config into an
`AgentDirectory` (agent id -> `AgentProfile`) and `RunSettings`, and passes a `ToolsFactory` that
builds each run's tool pipeline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol

import msgspec

from agent_core import AgentTool, Model, ThinkingLevel
from agent_core.agent_types import RefreshTools

if TYPE_CHECKING:
    from sessions.store import SessionRecord

QueueModeName = Literal["steer", "followup", "collect", "interrupt"]
QUEUE_MODES: tuple[str, ...] = ("steer", "followup", "collect", "interrupt")


class AgentProfile(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    id: str
    model: str | None = None
    """`provider/model-id`; None means no usable model is configured."""
    system_prompt: str = ""
    thinking_level: ThinkingLevel = "off"
    queue_mode: QueueModeName = "followup"
    workspace: str | None = None
    extra: dict[str, Any] = msgspec.field(default_factory=dict)


class AgentDirectory(Protocol):
    def profile(self, agent_id: str) -> AgentProfile:
        """The agent's profile; raise NotFound for an unknown agent."""
        ...

    def resolve_model(self, ref: str) -> Model:
        """Raise an error whose message tells the user how to configure a model."""
        ...

    def api_key(self, provider: str) -> str | None: ...


class RunContext(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    """What a tools factory knows about the run it builds tools for."""

    session: SessionRecord
    run_id: str
    profile: AgentProfile
    model: Model


class RunTools(msgspec.Struct, frozen=True):
    """The tools of one run, and (`refresh`) how the run asks for them again before each later
    turn: None keeps them, a list replaces them (a tool server announced a new list)."""

    tools: list[AgentTool]
    refresh: RefreshTools | None = None


ToolsFactory = Callable[[RunContext], "Awaitable[list[AgentTool] | RunTools] | list[AgentTool] | RunTools"]
"""Builds a run's tools: a plain list (fixed for the run) or `RunTools`."""


class RunSettings(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    """Limits of runs and live sessions. Durations are seconds.

    `max_duration_s` and `idle_timeout_s` abort a run (`max_duration`, `idle_timeout`); a run that
    has not ended `abort_grace_s` after any abort is stopped hard (its agent task is cancelled and
    the cut-off reply recorded as after a crash). `collect_window_s` is the quiet window of the
    `collect` queue mode. Compaction starts when a run's context comes within
    `compaction_reserve_tokens` of the model's context window and keeps about
    `compaction_keep_recent_tokens` of recent history. `context_cache_bytes` bounds the parsed
    contexts kept for live sessions (`sessions.context_cache`; 0 keeps none).
    """

    max_concurrent_runs: int = 16
    max_duration_s: float = 48 * 3600
    idle_timeout_s: float = 120.0
    lane_depth: int = 64
    live_cap: int = 1_000
    live_idle_ttl_s: float = 600.0
    collect_window_s: float = 1.5
    compaction_enabled: bool = True
    compaction_reserve_tokens: int = 16_384
    compaction_keep_recent_tokens: int = 20_000
    shutdown_grace_s: float = 10.0
    abort_grace_s: float = 10.0
    context_cache_bytes: int = 64 * 1024 * 1024
