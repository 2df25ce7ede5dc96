"""The tools factory handed to `sessions`: builds each run's pipeline from config.

It owns the daemon's `SandboxMachine`: the runners are probed when the factory is made (at
start-up), the choice for the configured mode is logged, and `sandbox_status` answers the
`sandbox` object of `health` and `status`.

A session's pipeline is built once and reused by its later runs while nothing it is made of
changed (the session, the agent, the provider, the workspace and sandbox settings, the allow and
deny lists, the gateway's state): the tools hold no state of their own between calls, and a
session runs one run at a time. Runs whose pipeline depends on more than that are built each time:
a session from a chat (its channel tools follow the binding that last relayed it), an agent with
an approval policy (the gate names the run) or with MCP servers or extensions (their tool lists
change). At most `BUILT_PIPELINES` pipelines are kept, the least recently used going first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from msgspec.structs import replace

from agent_core import AgentTool
from gateway.config import GatewayConfig
from gateway.sandbox import ResourceLimits, SandboxMachine, SandboxSettings
from gateway.sandbox.leftovers import sweep_leftovers
from gateway.tools.host import ManagerToolsHost
from gateway.tools.pipeline import PipelineSpec, ToolsLayer, build_tools
from sessions.profiles import RunContext, RunTools

if TYPE_CHECKING:
    from gateway.extensions.runtime import Extensions
    from gateway.state import GatewayState

audit_log = structlog.get_logger("gateway.audit")

BUILT_PIPELINES = 1024
"""Sessions whose built pipeline is kept for their next run (see the module docstring)."""


def _audit_for(session_id: str, agent_id: str) -> Callable[[dict[str, Any]], None]:
    def audit(record: dict[str, Any]) -> None:
        # The record's own `event` (`sandbox.exec_mediation`, `sandbox.path_refused`, ...) names
        # the log line; passed as a keyword it would collide with structlog's `event` argument,
        # the audit would raise, and the command would be refused without an audit line.
        fields = {"session_id": session_id, "agent_id": agent_id, **record}
        audit_log.warning(str(fields.pop("event", "sandbox.audit")), **fields)

    return audit


def _approvals(gw: GatewayState, ctx: RunContext, sandbox: SandboxSettings) -> ToolsLayer | None:
    """The run's approval layer, None when the agent's policy never asks."""
    config = gw.directory.config
    agent = next((a for a in config.agents if a.id == ctx.profile.id), None)
    if agent is None or agent.approvals == "never":
        # The default: decided from the configuration, so a daemon whose agents never ask does
        # not import the approval machinery into its first run.
        return None
    from functools import partial

    from gateway.approvals import ApprovalGate, CallSite, approval_layer, policy_for

    policy = policy_for(config, ctx.profile.id)
    if not policy.active:
        return None
    site = CallSite(
        session_id=ctx.session.id,
        session_key=ctx.session.keys[0] if ctx.session.keys else None,
        agent_id=ctx.profile.id,
        run_id=ctx.run_id,
        timeout_s=policy.timeout_s,
    )
    gate = ApprovalGate(
        approvals=gw.approvals,
        policy=policy,
        site=site,
        workspace=sandbox.workspace,
        deny_threshold=sandbox.threshold,
    )
    return partial(approval_layer, gate=gate)


def resource_limits(config: GatewayConfig) -> ResourceLimits:
    section = config.sandbox
    return ResourceLimits(
        max_processes=section.max_processes,
        memory_bytes=section.memory_bytes,
        cpu_seconds=section.cpu_seconds,
        file_size_bytes=section.file_size_bytes,
        open_files=section.open_files,
    )


class ToolsFactory:
    """`factory(ctx)` builds the tools of one run; `close()` when the gateway stops."""

    def __init__(self, config: GatewayConfig, state: Callable[[], GatewayState]) -> None:
        section = config.sandbox
        self.config = config
        self.state = state
        self.limits = resource_limits(config)
        self.machine = SandboxMachine(
            home=config.home,
            bwrap=section.bwrap_path,
            uid_base=section.uid_base,
            uid_count=section.uid_count,
            gid_base=section.uid_base,
        )
        self.extensions: Extensions | None = None
        """MCP servers and Python extensions; set by the app, which starts and stops them."""
        # What each kept pipeline was built from -> the pipeline; most recently used last.
        self._built: OrderedDict[Hashable, list[AgentTool]] = OrderedDict()
        agent_modes = [config.resolve_agent(agent).sandbox_mode for agent in config.agent_ids]
        for mode in dict.fromkeys([section.mode, *agent_modes]):
            self.machine.announce(mode)
        # A daemon killed while a sandbox was starting may have left it behind (only one daemon
        # runs per state directory, so whatever carries this one's mark is left over).
        sweep_leftovers(str(self.machine.home))

    def sandbox_status(self) -> dict[str, Any]:
        return self.machine.status(self.config.sandbox.mode, self.limits)

    def banner(self) -> str:
        """One line for the start-up banner."""
        choice = self.machine.choose(self.config.sandbox.mode)
        if choice.runner is None:
            return f"sandbox: mode {choice.mode}, NO RUNNER, bash is refused ({choice.reason})"
        state = "confined" if choice.confined else "NOT CONFINED"
        return f"sandbox: mode {choice.mode}, runner {choice.runner} ({state}; {choice.reason})"

    def __call__(self, ctx: RunContext) -> list[AgentTool] | Awaitable[RunTools]:
        config = self.config
        extra = ctx.profile.extra
        workspace = Path(ctx.profile.workspace or config.home / "workspaces" / ctx.profile.id)
        gw = self.state()
        sandbox = SandboxSettings(
            workspace=workspace,
            mode=extra.get("sandbox_mode") or config.sandbox.mode,
            deny_threshold=config.sandbox.deny_threshold,
            timeout_s=config.sandbox.timeout_s,
            output_cap_bytes=config.sandbox.output_cap_bytes,
            limits=self.limits,
            # Skills listed in the system prompt are read where they are.
            read_roots=gw.directory.library.read_roots(workspace),
        )
        channels = gw.channels
        chat_tools = channels.tools_for(ctx.session) if channels is not None else []
        spec = PipelineSpec(
            session=ctx.session,
            provider=ctx.model.provider,
            workspace=workspace,
            sandbox=sandbox,
            machine=self.machine,
            audit=_audit_for(ctx.session.id, ctx.profile.id),
            host=ManagerToolsHost(gw),
            channel_tools=(lambda _session: chat_tools) if chat_tools else None,
            allow=tuple(extra.get("tools_allow") or ()),
            deny=tuple(extra.get("tools_deny") or ()),
            approvals=_approvals(gw, ctx, sandbox),
        )
        extensions = self.extensions
        if extensions is not None and extensions.active(ctx.profile.id):
            return self._with_extensions(extensions, ctx, spec)
        if chat_tools or spec.approvals is not None:
            return build_tools(spec)
        made_of = (gw, ctx.session.id, ctx.profile.id, spec.provider, sandbox, spec.allow, spec.deny)
        return self._kept(made_of, spec)

    def _kept(self, made_of: Hashable, spec: PipelineSpec) -> list[AgentTool]:
        """The pipeline built from `made_of` (built now when none is kept)."""
        tools = self._built.get(made_of)
        if tools is None:
            tools = build_tools(spec)
            self._built[made_of] = tools
            while len(self._built) > BUILT_PIPELINES:
                self._built.popitem(last=False)
        else:
            self._built.move_to_end(made_of)
            # As a fresh build would: the workspace exists when the run starts.
            spec.workspace.mkdir(parents=True, exist_ok=True)
        return list(tools)

    async def _with_extensions(self, extensions: Extensions, ctx: RunContext, spec: PipelineSpec) -> RunTools:
        """The pipeline with the agent's MCP servers' tools (started if needed) and the enabled
        extensions' tools and tool hooks; asked again before a later turn of the run when a
        server announced a new tool list meanwhile."""

        async def refresh() -> list[AgentTool] | None:
            if not extensions.tools_changed(ctx.profile.id):
                return None
            return await self._extended_tools(extensions, ctx, spec)

        return RunTools(await self._extended_tools(extensions, ctx, spec), refresh)

    async def _extended_tools(
        self, extensions: Extensions, ctx: RunContext, spec: PipelineSpec
    ) -> list[AgentTool]:
        from functools import partial

        from gateway.extensions.tool_hooks import hook_layer

        extras = await extensions.run_extras(ctx.profile.id, spec.sandbox, spec.audit, ctx.session.id)
        hooks = None
        if extras.before or extras.after:
            hooks = partial(
                hook_layer,
                before=extras.before,
                after=extras.after,
                session_id=ctx.session.id,
                agent_id=ctx.profile.id,
            )
        return build_tools(replace(spec, extra=[*spec.extra, *extras.tools], hooks=hooks))

    def close(self) -> None:
        self.machine.close()


def make_tools_factory(config: GatewayConfig, state: Callable[[], GatewayState]) -> ToolsFactory:
    return ToolsFactory(config, state)
