"""Agents and models from the gateway's config, as `sessions` needs them (`AgentDirectory`).

A profile's system prompt is the agent's `SYSTEM.md` followed by the workspace's `AGENTS.md`
when there is one, then the list of the agent's skills (`gateway.commands`: name, description and
file of each, read from disk again when they change). Models come from the catalogue
(`agent_core.models`) plus `[[models]]` from config; a provider's configured base URL and headers
(`[providers.<name>]`, `OPENAI_BASE_URL`) apply to every model of that provider, so any
OpenAI-compatible server works.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from agent_core import Model
from agent_core.errors import ModelNotFoundError
from agent_core.models import register_models_from_config, resolve_model
from gateway.commands.library import Library
from gateway.commands.skills import Skill, skills_prompt
from gateway.config import GatewayConfig
from sessions.errors import NotFound
from sessions.profiles import AgentProfile

NO_MODEL_HELP = (
    "no model is configured: set GATEWAY_MODEL (e.g. GATEWAY_MODEL=faux/echo for an offline echo "
    "model, or GATEWAY_MODEL=openai/gpt-4o-mini with OPENAI_API_KEY) or `model` under "
    "[agent_defaults] in the config file"
)


class Directory:
    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self._profiles: dict[str, AgentProfile] = {}
        # Per agent: the skills of the last scan its prompt was built from, and that profile.
        self._with_skills: dict[str, tuple[list[Skill], AgentProfile]] = {}
        self.library = Library(
            home=config.home, skill_dirs=config.skills.dirs, prompt_dirs=config.prompts.dirs
        )
        """The agents' skills and prompt templates."""
        models = [m.model_dump() for m in config.models]
        if models:
            register_models_from_config(models)

    @property
    def default_agent_id(self) -> str:
        return "main"

    def profiles(self) -> list[AgentProfile]:
        return [self.profile(agent_id) for agent_id in self.config.agent_ids]

    def profile(self, agent_id: str) -> AgentProfile:
        """The agent's profile, its current skills listed at the end of its system prompt.
        Raises NotFound for an unknown agent."""
        base = self._base_profile(agent_id)
        skills = self.library.skills(Path(base.workspace or ""))
        known = self._with_skills.get(agent_id)
        if known is not None and known[0] is skills:  # the same scan: the same prompt
            return known[1]
        section = skills_prompt(skills)
        profile = base
        if section:
            prompt = f"{base.system_prompt.rstrip()}\n\n{section}\n"
            if known is not None and known[1].system_prompt == prompt:
                profile = known[1]  # a rescan that found the same: keep the profile
            else:
                profile = msgspec.structs.replace(base, system_prompt=prompt)
        self._with_skills[agent_id] = (skills, profile)
        return profile

    def _base_profile(self, agent_id: str) -> AgentProfile:
        cached = self._profiles.get(agent_id)
        if cached is not None:
            return cached
        try:
            agent = self.config.resolve_agent(agent_id)
        except KeyError:
            known = ", ".join(self.config.agent_ids)
            raise NotFound(f"unknown agent {agent_id!r} (configured agents: {known})") from None
        prompt = agent.system_prompt()
        instructions = _read(Path(agent.workspace) / "AGENTS.md")
        if instructions:
            prompt = f"{prompt.rstrip()}\n\n# Workspace instructions (AGENTS.md)\n\n{instructions}"
        profile = AgentProfile(
            id=agent.id,
            model=agent.model,
            system_prompt=prompt,
            thinking_level=agent.thinking_level,
            queue_mode=agent.queue_mode,
            workspace=str(agent.workspace),
            extra={
                "tools_allow": agent.tools_allow,
                "tools_deny": agent.tools_deny,
                "sandbox_mode": agent.sandbox_mode,
                "fallbacks": agent.fallbacks,
                "compaction_model": agent.compaction_model,
            },
        )
        self._profiles[agent_id] = profile
        return profile

    def resolve_model(self, ref: str) -> Model:
        if not ref:
            raise ModelNotFoundError(NO_MODEL_HELP)
        provider_cfg = self.config.providers.get(ref.partition("/")[0])
        allow_unknown = provider_cfg is not None and bool(provider_cfg.base_url)
        try:
            model = resolve_model(ref, allow_unknown=allow_unknown)
        except ModelNotFoundError:
            if provider_cfg is None or not provider_cfg.base_url:
                raise
            provider, _, model_id = ref.partition("/")
            model = Model(id=model_id, name=model_id, api="openai-completions", provider=provider)
        if provider_cfg is not None:
            update: dict[str, object] = {}
            if provider_cfg.base_url:
                update["base_url"] = provider_cfg.base_url
            if provider_cfg.headers:
                update["headers"] = {**(model.headers or {}), **provider_cfg.headers}
            if update:
                model = model.model_copy(update=update)
        return model

    def api_key(self, provider: str) -> str | None:
        cfg = self.config.providers.get(provider)
        if cfg is not None:
            if cfg.api_key is not None:
                return cfg.api_key.get_secret_value()
            if cfg.api_key_env:
                value = os.environ.get(cfg.api_key_env)
                if value:
                    return value
        from agent_core.providers import get_env_api_key

        return get_env_api_key(provider)

    def default_model_label(self) -> str:
        ref = self.config.agent_defaults.model
        try:
            ref = ref or self.profile("main").model
        except NotFound:
            pass
        return ref or "none (" + NO_MODEL_HELP + ")"

    def model_problem(self) -> str | None:
        """Why the default agent cannot run, or None when its model resolves."""
        ref = self.profile("main").model
        if not ref:
            return NO_MODEL_HELP
        try:
            self.resolve_model(ref)
        except ModelNotFoundError as exc:
            return str(exc)
        return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""
