"""Gateway-wide methods: health, status, presence, agents, models, usage, commands, config,
channels, pairing."""

from __future__ import annotations

import time
from typing import Any

from gateway.errors import ConfigError
from gateway.methods.base import Call, MethodError, from_sessions_error
from gateway.protocol import params as p
from sessions import SessionsError, agent_from_key


async def health(call: Call, params: p.EmptyParams) -> Any:
    return await call.state.health_snapshot()


async def status(call: Call, params: p.EmptyParams) -> Any:
    return await call.state.status_snapshot()


async def system_presence(call: Call, params: p.EmptyParams) -> Any:
    """The presence entries, a bare list as OpenClaw answers it."""
    return call.state.presence.entries()


async def agents_list(call: Call, params: p.EmptyParams) -> Any:
    agents = []
    for profile in call.state.directory.profiles():
        agents.append(
            {
                "id": profile.id,
                "agentId": profile.id,
                "model": profile.model,
                "thinkingLevel": profile.thinking_level,
                "queueMode": profile.queue_mode,
                "workspace": profile.workspace,
                "default": profile.id == call.state.directory.default_agent_id,
            }
        )
    return {"defaultAgentId": call.state.directory.default_agent_id, "agents": agents}


async def models_list(call: Call, params: p.ModelsListParams) -> Any:
    """The model catalogue with prices, context windows and the keys of each provider."""
    from gateway.models.reports import model_rows

    return {"models": model_rows(call.state.directory)}


async def usage_summary(call: Call, params: p.UsageSummaryParams) -> Any:
    """Tokens and cost of the finished runs of the last `days` days, per agent and UTC day."""
    from gateway.models.reports import DAY_MS, usage_rows

    today = int(time.time() * 1000) // DAY_MS * DAY_MS
    since = today - (params.days - 1) * DAY_MS
    try:
        runs = await call.state.store.runs.usage_since(since)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    return {"days": params.days, "usage": usage_rows(runs, params.agent_id)}


async def commands_list(call: Call, params: p.CommandsListParams) -> Any:
    """The slash commands a message to the agent may start with (`gateway.commands.registry`):
    chat commands, extensions' commands, prompt templates and skills of the agent `agentId`
    names (else the one of `sessionKey`, else the default agent)."""
    directory = call.state.directory
    agent = params.agent_id
    if agent is None and params.session_key is not None:
        agent = agent_from_key(params.session_key)
    try:
        commands = call.state.commands.entries(
            agent or directory.default_agent_id, scope=params.scope, include_args=bool(params.include_args)
        )
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    return {"commands": commands}


async def config_get(call: Call, params: p.EmptyParams) -> Any:
    return {"config": call.state.redacted_config(), "path": call.state.config_path}


async def config_reload(call: Call, params: p.NativeEmptyParams) -> Any:
    try:
        result = await call.state.reload_config()
    except ConfigError as exc:
        raise MethodError("INVALID_REQUEST", str(exc)) from exc
    return {
        "ok": True,
        "reloaded": True,
        "changed": list(result.get("changed", [])),
        "restartRequired": list(result.get("restartRequired", [])),
    }


async def question_list(call: Call, params: p.EmptyParams) -> Any:
    """The OpenClaw TUI asks on start; the gateway has no pending questions."""
    return {"questions": []}


async def plugin_approval_list(call: Call, params: p.EmptyParams) -> Any:
    """The OpenClaw TUI asks on start; the gateway has no plugin approvals."""
    return {"approvals": []}


async def channels_status(call: Call, params: p.ChannelsStatusParams) -> Any:
    return {"channels": call.state.channels_status()}


async def pairing_list(call: Call, params: p.PairingListParams) -> Any:
    return {"requests": await call.state.pairing_list()}


async def pairing_approve(call: Call, params: p.PairingApproveParams) -> Any:
    approved = await call.state.pairing_approve(
        params.code, channel=params.channel, account_id=params.account_id
    )
    if approved is None:
        where = f" for {params.channel}" if params.channel is not None else ""
        raise MethodError("NOT_FOUND", f"no pending pairing request{where} with code {params.code}")
    return {"ok": True, "approved": approved}
