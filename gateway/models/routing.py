"""The gateway's stream function: an agent's model, then its fallbacks, with rotating keys.

Every model call of the session manager (runs and compactions) goes through `ModelRouter.stream`.
While no agent has fallbacks and the model's provider has at most one key, a call goes straight to
the provider, started at once; otherwise `agent_core.providers.fallback.stream_resilient` drives
it. The agent of a
call is found from its session id (runs set it; compactions have none and so use their model
alone). Switches and rested keys are logged; the reply of a fallback says which model wrote it.

Key pools and model health live as long as the router (the daemon); a config reload that
changes a provider's keys starts that provider's pool afresh.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable

import structlog

from agent_core import Model
from agent_core.event_stream import AssistantMessageEventStream
from agent_core.llm import Context, StreamOptions
from agent_core.providers import stream_simple
from agent_core.providers.fallback import FallbackStep, KeyRest, ModelHealth, Resilience, stream_resilient
from agent_core.providers.key_pool import KeyPool
from gateway.directory import Directory

log = structlog.get_logger("gateway.models")

AgentOfSession = Callable[[str], Awaitable[str | None]]
_AGENT_CACHE_SIZE = 4096


def provider_keys(directory: Directory, provider: str) -> list[str]:
    """Every key configured for `provider`, in order: `api_key` (or its variable), `api_keys`,
    then the comma-separated ``<PROVIDER>_API_KEYS`` variable."""
    keys: list[str] = []
    first = directory.api_key(provider)
    if first:
        keys.append(first)
    config = directory.config.providers.get(provider)
    if config is not None:
        keys.extend(k.get_secret_value() for k in config.api_keys)
    variable = re.sub(r"[^A-Z0-9]+", "_", provider.upper()).strip("_") + "_API_KEYS"
    keys.extend(k.strip() for k in os.environ.get(variable, "").split(",") if k.strip())
    return list(dict.fromkeys(keys))


def _has_fallbacks(directory: Directory) -> bool:
    config = directory.config
    return bool(config.agent_defaults.fallbacks) or any(agent.fallbacks for agent in config.agents)


class ModelRouter:
    """Routes model calls for one gateway. `bind(directory, agent_of)` gives it the current agent
    directory and the lookup of a session's agent once the session manager exists; before that
    every call goes to its model alone."""

    def __init__(self) -> None:
        self._directory: Callable[[], Directory] | None = None
        self._agent_of: AgentOfSession | None = None
        self._agents: OrderedDict[str, str] = OrderedDict()
        self._pools: dict[str, tuple[tuple[str, ...], KeyPool]] = {}
        self.health = ModelHealth()

    def bind(self, directory: Callable[[], Directory], agent_of: AgentOfSession) -> None:
        self._directory = directory
        self._agent_of = agent_of

    def pool(self, provider: str) -> KeyPool | None:
        """The provider's key pool when it has more than one key (rebuilt when its keys change)."""
        if self._directory is None:
            return None
        keys = tuple(provider_keys(self._directory(), provider))
        if len(keys) < 2:
            self._pools.pop(provider, None)
            return None
        known = self._pools.get(provider)
        if known is None or known[0] != keys:
            known = (keys, KeyPool(provider, keys))
            self._pools[provider] = known
        return known[1]

    def stream(
        self, model: Model, context: Context, options: StreamOptions
    ) -> AssistantMessageEventStream | Awaitable[AssistantMessageEventStream]:
        """A `StreamFn`: stream `model`'s reply, falling back as the agent's config says. Without
        fallbacks configured anywhere and with one key for the model's provider, this is the
        provider's own stream, started at once."""
        directory = self._directory() if self._directory is not None else None
        if directory is None or (not _has_fallbacks(directory) and self.pool(model.provider) is None):
            return stream_simple(model, context, options)
        return self._routed(model, context, options)

    async def _routed(
        self, model: Model, context: Context, options: StreamOptions
    ) -> AssistantMessageEventStream:
        route = [model, *await self._fallbacks(model, options.session_id)]
        pools = {m.provider: p for m in route if (p := self.pool(m.provider)) is not None}
        if len(route) == 1 and not pools:
            return stream_simple(model, context, options)
        resilience = Resilience(
            pools=pools, health=self.health, on_step=self._on_step, on_key_rest=self._on_key_rest
        )
        return stream_resilient(stream_simple, route, context, options, resilience)

    async def _fallbacks(self, model: Model, session_id: str | None) -> list[Model]:
        agent_id = await self._agent(session_id)
        if agent_id is None or self._directory is None:
            return []
        directory = self._directory()
        try:
            refs = directory.profile(agent_id).extra.get("fallbacks") or ()
        except Exception:
            return []
        route: list[Model] = []
        seen = {model.ref}
        for ref in refs:
            if ref in seen:
                continue
            seen.add(ref)
            try:
                route.append(directory.resolve_model(ref))
            except Exception as exc:
                log.warning("fallback model cannot be used", agent_id=agent_id, model=ref, error=str(exc))
        return route

    async def _agent(self, session_id: str | None) -> str | None:
        if not session_id or self._agent_of is None:
            return None
        cached = self._agents.get(session_id)
        if cached is not None:
            self._agents.move_to_end(session_id)
            return cached
        try:
            agent_id = await self._agent_of(session_id)
        except Exception:
            return None
        if agent_id is not None:
            self._agents[session_id] = agent_id  # a session's agent never changes
            if len(self._agents) > _AGENT_CACHE_SIZE:
                self._agents.popitem(last=False)
        return agent_id

    def _on_step(self, step: FallbackStep) -> None:
        log.warning(
            "model fallback",
            from_model=step.from_ref,
            to_model=step.to_ref,
            reason=step.reason,
            error=step.error,
        )

    def _on_key_rest(self, rest: KeyRest) -> None:
        log.warning(
            "API key rested", provider=rest.provider, key=rest.label, reason=rest.reason, seconds=rest.seconds
        )
