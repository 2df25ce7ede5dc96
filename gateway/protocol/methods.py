"""The method table: every method the gateway answers, its required scope and its params model.

Scopes form a small lattice: `operator.admin` implies every operator scope, `operator.write`
implies `operator.read`. The other OpenClaw scopes (`operator.approvals`, `operator.questions`,
`operator.pairing`) stand alone below admin. A method's scope comes from the published OpenClaw
schema for the compatibility set (its "dynamic" scopes are fixed here as PROTOCOL.md lists them)
and from PROTOCOL.md for the gateway's extensions.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from enum import StrEnum
from functools import cache
from importlib import import_module
from types import MappingProxyType
from typing import Any

import msgspec
from pydantic import BaseModel, ValidationError

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


class MethodSpec(msgspec.Struct, frozen=True):
    """One method: its wire name, the scope a caller needs, and how its params are validated."""

    name: str
    scope: Scope
    model: str
    """The params model, `<module>.<class>` in `gateway.protocol` (see `params`)."""
    native: bool = False
    """True for the gateway's own extensions, False for the OpenClaw compatibility set."""

    @property
    def params(self) -> type[BaseModel]:
        """The params model. The models' modules are imported with the first method call that
        needs one of them: forty-odd model classes take a few milliseconds to define, which a
        start-up (and the handshake, whose model is `connect_params`) need not pay."""
        return _model(self.model)


@cache
def _model(name: str) -> type[BaseModel]:
    module, _, attribute = name.rpartition(".")
    model = getattr(import_module(f"gateway.protocol.{module}"), attribute)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"gateway.protocol.{name} is not a params model")
    return model


def _table(*specs: MethodSpec) -> Mapping[str, MethodSpec]:
    return MappingProxyType({spec.name: spec for spec in specs})


R, W, A = Scope.READ, Scope.WRITE, Scope.ADMIN

METHODS: Mapping[str, MethodSpec] = _table(
    # OpenClaw compatibility set
    MethodSpec("health", R, "params.EmptyParams"),
    MethodSpec("status", R, "params.EmptyParams"),
    MethodSpec("system-presence", R, "params.EmptyParams"),
    MethodSpec("agents.list", R, "params.EmptyParams"),
    MethodSpec("models.list", R, "params.ModelsListParams"),
    MethodSpec("commands.list", R, "params.CommandsListParams"),
    MethodSpec("config.get", R, "params.EmptyParams"),
    MethodSpec("channels.status", R, "params.ChannelsStatusParams"),
    MethodSpec("sessions.list", R, "params.SessionsListParams"),
    MethodSpec("sessions.describe", R, "params.SessionsDescribeParams"),
    MethodSpec("sessions.subscribe", R, "params.SessionsSubscribeParams"),
    MethodSpec("sessions.unsubscribe", R, "params.EmptyParams"),
    MethodSpec("sessions.messages.subscribe", R, "params.SessionsMessagesSubscribeParams"),
    MethodSpec("sessions.messages.unsubscribe", R, "params.SessionsMessagesUnsubscribeParams"),
    MethodSpec("sessions.create", W, "params.SessionsCreateParams"),
    MethodSpec("sessions.send", W, "params.SessionsSendParams"),
    MethodSpec("sessions.patch", W, "params.SessionsPatchParams"),
    MethodSpec("sessions.reset", A, "params.SessionsResetParams"),
    MethodSpec("sessions.delete", A, "params.SessionsDeleteParams"),
    MethodSpec("sessions.compact", A, "params.SessionsCompactParams"),
    MethodSpec("sessions.fork", W, "params.SessionsForkParams"),
    MethodSpec("sessions.abort", W, "params.SessionsAbortParams"),
    MethodSpec("chat.send", W, "params.ChatSendParams"),
    MethodSpec("chat.history", R, "params.ChatHistoryParams"),
    MethodSpec("chat.abort", W, "params.ChatAbortParams"),
    MethodSpec("chat.inject", A, "params.ChatInjectParams"),
    MethodSpec("agent", W, "params.AgentParams"),
    MethodSpec("agent.wait", W, "params.AgentWaitParams"),
    # Called by the OpenClaw TUI on start; the gateway has no plugin approvals or questions and
    # answers them with empty lists (tool calls' approvals are the `exec.approval.*` methods).
    MethodSpec("question.list", Scope.QUESTIONS, "params.EmptyParams"),
    MethodSpec("plugin.approval.list", Scope.APPROVALS, "params.EmptyParams"),
    # Tool calls waiting for a person's decision (`gateway.approvals`).
    MethodSpec("exec.approval.list", Scope.APPROVALS, "approval_params.ExecApprovalListParams"),
    MethodSpec("exec.approval.get", Scope.APPROVALS, "approval_params.ExecApprovalGetParams"),
    MethodSpec("exec.approval.resolve", Scope.APPROVALS, "approval_params.ExecApprovalResolveParams"),
    MethodSpec(
        "exec.approval.waitDecision", Scope.APPROVALS, "approval_params.ExecApprovalWaitDecisionParams"
    ),
    # Scheduled runs: reading is operator.read, changing or running a job operator.admin, as in
    # OpenClaw's schema.
    MethodSpec("cron.list", R, "cron_params.CronListParams"),
    MethodSpec("cron.get", R, "cron_params.CronGetParams"),
    MethodSpec("cron.status", R, "params.EmptyParams"),
    MethodSpec("cron.runs", R, "cron_params.CronRunsParams"),
    MethodSpec("cron.add", A, "cron_params.CronAddParams"),
    MethodSpec("cron.update", A, "cron_params.CronUpdateParams"),
    MethodSpec("cron.remove", A, "cron_params.CronRemoveParams"),
    MethodSpec("cron.run", A, "cron_params.CronRunParams"),
    # gateway extensions
    MethodSpec("sessions.tree", R, "params.SessionsTreeParams", native=True),
    MethodSpec("sessions.branch", W, "params.SessionsBranchParams", native=True),
    MethodSpec("sessions.switch", W, "params.SessionsSwitchParams", native=True),
    MethodSpec("sessions.events.subscribe", R, "params.SessionsEventsSubscribeParams", native=True),
    MethodSpec("sessions.events.unsubscribe", R, "params.SessionsEventsUnsubscribeParams", native=True),
    MethodSpec("config.reload", A, "params.NativeEmptyParams", native=True),
    MethodSpec("pairing.list", A, "params.PairingListParams", native=True),
    MethodSpec("pairing.approve", A, "params.PairingApproveParams", native=True),
    MethodSpec("tokens.create", A, "params.TokensCreateParams", native=True),
    MethodSpec("tokens.list", A, "params.NativeEmptyParams", native=True),
    MethodSpec("usage.summary", R, "params.UsageSummaryParams", native=True),
    MethodSpec("tokens.revoke", A, "params.TokensRevokeParams", native=True),
    MethodSpec("mcp.list", A, "params.NativeEmptyParams", native=True),
    MethodSpec("mcp.restart", A, "params.McpRestartParams", native=True),
    MethodSpec("extensions.list", A, "params.NativeEmptyParams", native=True),
    MethodSpec("extensions.enable", A, "params.ExtensionNameParams", native=True),
    MethodSpec("extensions.disable", A, "params.ExtensionNameParams", native=True),
    MethodSpec("cluster.status", R, "params.NativeEmptyParams", native=True),
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


class InvalidParams(msgspec.Struct, frozen=True):
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
