"""The tools factory handed to `sessions`: builds each run's pipeline from config."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agent_core import AgentTool
from gateway.config import GatewayConfig
from gateway.tools.host import ManagerToolsHost
from gateway.tools.pipeline import PipelineSpec, build_tools
from sessions.profiles import RunContext

if TYPE_CHECKING:
    from gateway.state import GatewayState

audit_log = structlog.get_logger("gateway.audit")


def _audit(record: dict[str, Any]) -> None:
    # The record's own `event` (`sandbox.exec_mediation`, `sandbox.path_refused`, ...) names the
    # log line; passed as a keyword it would collide with structlog's `event` argument, the
    # audit would raise, and the command would be refused without an audit line.
    fields = dict(record)
    audit_log.warning(str(fields.pop("event", "sandbox.audit")), **fields)


def make_tools_factory(
    config: GatewayConfig, state: Callable[[], GatewayState]
) -> Callable[[RunContext], list[AgentTool]]:
    def factory(ctx: RunContext) -> list[AgentTool]:
        from gateway.sandbox import SandboxSettings

        extra = ctx.profile.extra
        workspace = Path(ctx.profile.workspace or config.home / "workspaces" / ctx.profile.id)
        sandbox = SandboxSettings(
            workspace=workspace,
            mode=extra.get("sandbox_mode") or config.sandbox.mode,
            deny_threshold=config.sandbox.deny_threshold,
            timeout_s=config.sandbox.timeout_s,
            output_cap_bytes=config.sandbox.output_cap_bytes,
        )
        gw = state()
        channels = gw.channels
        spec = PipelineSpec(
            session=ctx.session,
            provider=ctx.model.provider,
            workspace=workspace,
            sandbox=sandbox,
            audit=_audit,
            host=ManagerToolsHost(gw),
            channel_tools=getattr(channels, "tools_for", None),
            allow=tuple(extra.get("tools_allow") or ()),
            deny=tuple(extra.get("tools_deny") or ()),
        )
        return build_tools(spec)

    return factory
