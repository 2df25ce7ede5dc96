"""Gateway-wide methods: health, status, presence, agents, models, commands, config, channels,
pairing."""

from __future__ import annotations

from typing import Any

from gateway.methods.base import Call, MethodError, invalid


async def health(call: Call) -> Any:
    return await call.state.health_snapshot()


async def status(call: Call) -> Any:
    return await call.state.status_snapshot()


async def system_presence(call: Call) -> Any:
    """The presence entries, a bare list as OpenClaw answers it."""
    return call.state.presence_list()


async def agents_list(call: Call) -> Any:
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


async def models_list(call: Call) -> Any:
    from agent_core.models import list_models

    models = []
    for model in list_models():
        models.append(
            {
                "id": model.id,
                "ref": f"{model.provider}/{model.id}",
                "name": model.name or model.id,
                "provider": model.provider,
                "api": model.api,
                "contextWindow": model.context_window,
                "maxTokens": model.max_tokens,
                "reasoning": model.reasoning,
                "input": list(model.input),
                "cost": model.cost.dump(),
            }
        )
    return {"models": models}


async def commands_list(call: Call) -> Any:
    from gateway.methods import METHOD_SCOPES

    return {"commands": [{"name": name, "scope": scope} for name, scope in sorted(METHOD_SCOPES.items())]}


async def config_get(call: Call) -> Any:
    return {"config": call.state.redacted_config(), "path": call.state.config_path}


async def config_reload(call: Call) -> Any:
    from gateway.errors import ConfigError

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


async def question_list(call: Call) -> Any:
    """The OpenClaw TUI asks on start; the gateway has no pending questions."""
    return {"questions": []}


async def plugin_approval_list(call: Call) -> Any:
    """The OpenClaw TUI asks on start; the gateway has no plugin approvals."""
    return {"approvals": []}


async def channels_status(call: Call) -> Any:
    return {"channels": call.state.channels_status()}


async def pairing_list(call: Call) -> Any:
    return {"requests": await call.state.pairing_list()}


async def pairing_approve(call: Call) -> Any:
    code = call.params.get("code")
    if not isinstance(code, str) or not code:
        raise invalid(call.method, "code is required")
    channel, account_id = call.params.get("channel"), call.params.get("accountId")
    approved = await call.state.pairing_approve(
        code,
        channel=channel if isinstance(channel, str) else None,
        account_id=account_id if isinstance(account_id, str) else None,
    )
    if approved is None:
        where = f" for {channel}" if isinstance(channel, str) else ""
        raise MethodError("NOT_FOUND", f"no pending pairing request{where} with code {code}")
    return {"ok": True, "approved": approved}
