"""The method table: every method the gateway answers, its required scope and its params model.

Scopes form a small lattice: `operator.admin` implies every operator scope, `operator.write`
implies `operator.read`. The other OpenClaw scopes (`operator.approvals`, `operator.questions`,
`operator.pairing`) stand alone below admin. A method's scope comes from the published OpenClaw
schema for the compatibility set (its "dynamic" scopes are fixed here as PROTOCOL.md lists them)
and from PROTOCOL.md for the gateway's extensions.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ValidationError

from gateway.protocol import approval_params as ap
from gateway.protocol import cron_params as cp
from gateway.protocol import params as p
from gateway.protocol.codes import DetailCode, ErrorCode, ErrorShape
from gateway.protocol.validation_errors import describe_validation_error


class Scope(StrEnum):
    READ = "operator.read"
    WRITE = "operator.write"
    ADMIN = "operator.admin"
    APPROVALS = "operator.approvals"
    QUESTIONS = "operator.questions"
    PAIRING = "operator.pairing"


OPERATOR_SCOPES: frozenset[str] = frozenset(s.value for s in Scope)
"""Every scope an operator connection may be granted; others are dropped at `connect`."""

_IMPLIED: Mapping[str, frozenset[str]] = {
    Scope.ADMIN: OPERATOR_SCOPES,
    Scope.WRITE: frozenset({Scope.WRITE, Scope.READ}),
}


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """One method: its wire name, the scope a caller needs, and how its params are validated."""

    name: str
    scope: Scope
    params: type[BaseModel]
    native: bool = False
    """True for the gateway's own extensions, False for the OpenClaw compatibility set."""


def _table(*specs: MethodSpec) -> Mapping[str, MethodSpec]:
    return MappingProxyType({spec.name: spec for spec in specs})


R, W, A = Scope.READ, Scope.WRITE, Scope.ADMIN

METHODS: Mapping[str, MethodSpec] = _table(
    # OpenClaw compatibility set
    MethodSpec("health", R, p.EmptyParams),
    MethodSpec("status", R, p.EmptyParams),
    MethodSpec("system-presence", R, p.EmptyParams),
    MethodSpec("agents.list", R, p.EmptyParams),
    MethodSpec("models.list", R, p.ModelsListParams),
    MethodSpec("commands.list", R, p.CommandsListParams),
    MethodSpec("config.get", R, p.EmptyParams),
    MethodSpec("channels.status", R, p.ChannelsStatusParams),
    MethodSpec("sessions.list", R, p.SessionsListParams),
    MethodSpec("sessions.describe", R, p.SessionsDescribeParams),
    MethodSpec("sessions.subscribe", R, p.SessionsSubscribeParams),
    MethodSpec("sessions.unsubscribe", R, p.EmptyParams),
    MethodSpec("sessions.messages.subscribe", R, p.SessionsMessagesSubscribeParams),
    MethodSpec("sessions.messages.unsubscribe", R, p.SessionsMessagesUnsubscribeParams),
    MethodSpec("sessions.create", W, p.SessionsCreateParams),
    MethodSpec("sessions.send", W, p.SessionsSendParams),
    MethodSpec("sessions.patch", W, p.SessionsPatchParams),
    MethodSpec("sessions.reset", A, p.SessionsResetParams),
    MethodSpec("sessions.delete", A, p.SessionsDeleteParams),
    MethodSpec("sessions.compact", A, p.SessionsCompactParams),
    MethodSpec("sessions.fork", W, p.SessionsForkParams),
    MethodSpec("sessions.abort", W, p.SessionsAbortParams),
    MethodSpec("chat.send", W, p.ChatSendParams),
    MethodSpec("chat.history", R, p.ChatHistoryParams),
    MethodSpec("chat.abort", W, p.ChatAbortParams),
    MethodSpec("chat.inject", A, p.ChatInjectParams),
    MethodSpec("agent", W, p.AgentParams),
    MethodSpec("agent.wait", W, p.AgentWaitParams),
    # Called by the OpenClaw TUI on start; the gateway has no plugin approvals or questions and
    # answers them with empty lists (tool calls' approvals are the `exec.approval.*` methods).
    MethodSpec("question.list", Scope.QUESTIONS, p.EmptyParams),
    MethodSpec("plugin.approval.list", Scope.APPROVALS, p.EmptyParams),
    # Tool calls waiting for a person's decision (`gateway.approvals`).
    MethodSpec("exec.approval.list", Scope.APPROVALS, ap.ExecApprovalListParams),
    MethodSpec("exec.approval.get", Scope.APPROVALS, ap.ExecApprovalGetParams),
    MethodSpec("exec.approval.resolve", Scope.APPROVALS, ap.ExecApprovalResolveParams),
    MethodSpec("exec.approval.waitDecision", Scope.APPROVALS, ap.ExecApprovalWaitDecisionParams),
    # Scheduled runs: reading is operator.read, changing or running a job operator.admin, as in
    # OpenClaw's schema.
    MethodSpec("cron.list", R, cp.CronListParams),
    MethodSpec("cron.get", R, cp.CronGetParams),
    MethodSpec("cron.status", R, p.EmptyParams),
    MethodSpec("cron.runs", R, cp.CronRunsParams),
    MethodSpec("cron.add", A, cp.CronAddParams),
    MethodSpec("cron.update", A, cp.CronUpdateParams),
    MethodSpec("cron.remove", A, cp.CronRemoveParams),
    MethodSpec("cron.run", A, cp.CronRunParams),
    # gateway extensions
    MethodSpec("sessions.tree", R, p.SessionsTreeParams, native=True),
    MethodSpec("sessions.branch", W, p.SessionsBranchParams, native=True),
    MethodSpec("sessions.switch", W, p.SessionsSwitchParams, native=True),
    MethodSpec("sessions.events.subscribe", R, p.SessionsEventsSubscribeParams, native=True),
    MethodSpec("sessions.events.unsubscribe", R, p.SessionsEventsUnsubscribeParams, native=True),
    MethodSpec("config.reload", A, p.NativeEmptyParams, native=True),
    MethodSpec("pairing.list", A, p.PairingListParams, native=True),
    MethodSpec("pairing.approve", A, p.PairingApproveParams, native=True),
    MethodSpec("tokens.create", A, p.TokensCreateParams, native=True),
    MethodSpec("tokens.list", A, p.NativeEmptyParams, native=True),
    MethodSpec("usage.summary", R, p.UsageSummaryParams, native=True),
    MethodSpec("tokens.revoke", A, p.TokensRevokeParams, native=True),
    MethodSpec("mcp.list", A, p.NativeEmptyParams, native=True),
    MethodSpec("mcp.restart", A, p.McpRestartParams, native=True),
    MethodSpec("extensions.list", A, p.NativeEmptyParams, native=True),
    MethodSpec("extensions.enable", A, p.ExtensionNameParams, native=True),
    MethodSpec("extensions.disable", A, p.ExtensionNameParams, native=True),
    MethodSpec("cluster.status", R, p.NativeEmptyParams, native=True),
)

METHOD_NAMES: tuple[str, ...] = tuple(METHODS)
"""Every method, in table order: what `hello-ok.features.methods` lists."""

NATIVE_SESSION_EVENTS: tuple[str, ...] = (
    "session.agent.started",
    "session.turn.started",
    "session.message.started",
    "session.message.delta",
    "session.tool.started",
    "session.tool.updated",
    "session.tool.finished",
    "session.message.completed",
    "session.turn.finished",
    "session.agent.finished",
    "session.error",
    "session.status.changed",
    "session.snapshot",
)

EVENTS: tuple[str, ...] = (
    "connect.challenge",
    "tick",
    "health",
    "presence",
    "shutdown",
    "agent",
    "chat",
    "sessions.changed",
    "session.message",
    "cron",
    "exec.approval.requested",
    "exec.approval.resolved",
    *NATIVE_SESSION_EVENTS,
)
"""Every event the gateway may send: what `hello-ok.features.events` lists."""


def expand_scopes(granted: Collection[str]) -> frozenset[str]:
    """`granted` plus every scope it implies."""
    out: set[str] = set()
    for scope in granted:
        out.add(scope)
        out.update(_IMPLIED.get(scope, ()))
    return frozenset(out)


def required_scope(method: str) -> Scope:
    """The scope `method` needs. Raises KeyError for a method not in the table."""
    return METHODS[method].scope


def scope_allows(granted: Collection[str], method: str) -> bool:
    """Whether a connection holding `granted` may call `method` (False for unknown methods)."""
    spec = METHODS.get(method)
    if spec is None:
        return False
    return spec.scope in expand_scopes(granted)


def missing_scope_error(method: str) -> ErrorShape:
    """The FORBIDDEN error for a call to `method` without its scope, as OpenClaw words it."""
    scope = required_scope(method).value
    return ErrorShape(
        code=ErrorCode.FORBIDDEN,
        message=f"missing scope: {scope}",
        details={"code": DetailCode.MISSING_SCOPE.value, "missingScope": scope, "requiredScopes": [scope]},
    )


@dataclass(frozen=True, slots=True)
class InvalidParams:
    """Params that failed validation; `message` is the full `error.message` to send."""

    method: str
    message: str

    def to_error(self) -> ErrorShape:
        return ErrorShape(code=ErrorCode.INVALID_REQUEST, message=self.message)


def validate_params(method: str, params: Any) -> BaseModel | InvalidParams:
    """Validate a request's `params` (None or absent counts as `{}`) against `method`'s model.

    Returns the model instance, or `InvalidParams` with a message like
    ``invalid chat.send params: must have required property 'message'``.
    Raises KeyError for a method not in the table (the frame parser has already answered those).
    """
    spec = METHODS[method]
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return InvalidParams(method, f"invalid {method} params: must be object")
    try:
        return spec.params.model_validate(params)
    except ValidationError as exc:
        return InvalidParams(method, f"invalid {method} params: {describe_validation_error(exc)}")
