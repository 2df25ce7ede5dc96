"""Parameter models of every method, and the wording of their validation errors.

Models of the OpenClaw compatibility set follow the `*Params` definitions of the published
protocol schema for the fields the gateway uses. OpenClaw's schema also lists dozens of fields we
do not implement (sharing, worktrees, plugins); real clients may send them, so these models keep
unknown fields instead of refusing them (`extra="allow"`). Models of the gateway's own extension
methods refuse unknown fields, so a typo in a native client is reported, not ignored.

Wire names are camelCase (`sessionKey`), attributes snake_case (`session_key`). Types are strict,
as in JSON Schema: `"5"` is not an integer and `1` is not a boolean. For patch-like methods the
caller tells "absent" from "null" with `model.model_fields_set`.

Handlers receive the validated model (`gateway.methods`), so a field a handler reads must be
declared here: fields the gateway's own clients send beyond OpenClaw's schema are declared too
(`includeArchived`, `cascade`, `sessionId` on calls that accept either).

Validation errors are worded like the JSON Schema validator OpenClaw uses, because the captured
real gateway answers `invalid chat.send params: must have required property 'message'` and clients
may show that text. Only the first error is reported, as OpenClaw does.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

MAX_SESSION_REF = 512
"""Longest session key or session id a method accepts."""


def _no_control_characters(value: str) -> str:
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in value):
        raise ValueError("must NOT contain control characters")
    return value


NonEmptyStr = Annotated[str, StringConstraints(min_length=1)]
SessionKey = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_SESSION_REF), AfterValidator(_no_control_characters)
]
"""A session key, wherever a method takes one: 1-512 characters, no control characters."""
SessionId = SessionKey
"""A session id (the same rule as a key: ids are stored and logged alongside keys)."""
Label = Annotated[str, StringConstraints(min_length=1, max_length=512)]
QueueMode = Literal["steer", "followup", "collect", "interrupt"]
ThinkingLevel = Literal["off", "minimal", "low", "medium", "high", "xhigh"]


class CompatParams(BaseModel):
    """Base of the OpenClaw-compatible params: strict types, unknown fields kept."""

    # Each model's validator is built when its method is first called, not at import: most
    # connections use a handful of the forty models.
    model_config = ConfigDict(
        alias_generator=to_camel, extra="allow", strict=True, frozen=True, defer_build=True
    )


class NativeParams(BaseModel):
    """Base of the gateway's own params: strict types, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel, extra="forbid", strict=True, frozen=True, defer_build=True
    )


def _bool_or_all(value: Any) -> bool | str:
    if isinstance(value, bool) or value == "all":
        return value  # type: ignore[no-any-return]
    raise ValueError('must be boolean or "all"')


# --- handshake --------------------------------------------------------------------------------


class ClientInfo(CompatParams):
    # OpenClaw closes `id` and `mode` to fixed enums; the gateway's own clients (dashboard,
    # gatewayctl, bindings) name themselves, so any non-empty string is accepted.
    id: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    version: NonEmptyStr
    platform: NonEmptyStr
    mode: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    display_name: NonEmptyStr | None = None
    build_id: Annotated[str, StringConstraints(min_length=1, max_length=96)] | None = None
    device_family: NonEmptyStr | None = None
    model_identifier: NonEmptyStr | None = None
    time_zone: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None
    instance_id: NonEmptyStr | None = None


class DeviceIdentity(CompatParams):
    id: NonEmptyStr
    public_key: NonEmptyStr
    signature: NonEmptyStr
    signed_at: Annotated[int, Field(ge=0)]
    nonce: str


class ConnectAuth(CompatParams):
    token: str | None = None
    password: str | None = None
    bootstrap_token: str | None = None
    device_token: str | None = None


class ConnectParams(CompatParams):
    min_protocol: Annotated[int, Field(ge=1)]
    max_protocol: Annotated[int, Field(ge=1)]
    client: ClientInfo
    caps: list[NonEmptyStr] = Field(default_factory=list)
    commands: list[NonEmptyStr] | None = None
    permissions: dict[str, bool] | None = None
    path_env: str | None = None
    role: NonEmptyStr | None = None
    scopes: list[NonEmptyStr] | None = None
    device: DeviceIdentity | None = None
    auth: ConnectAuth | None = None
    locale: str | None = None
    user_agent: str | None = None


# --- compatibility set ------------------------------------------------------------------------


class EmptyParams(CompatParams):
    """Methods that take no parameters (extra fields from newer clients are ignored)."""


class ModelsListParams(CompatParams):
    agent_id: NonEmptyStr | None = None
    view: Literal["default", "configured", "provider-config", "all"] | None = None
    refresh: bool | None = None


class CommandsListParams(CompatParams):
    session_key: SessionKey | None = None
    agent_id: NonEmptyStr | None = None
    provider: NonEmptyStr | None = None
    scope: Literal["text", "native", "both"] | None = None
    include_args: bool | None = None


class ChannelsStatusParams(CompatParams):
    probe: bool | None = None
    timeout_ms: Annotated[int, Field(ge=0)] | None = None
    channel: NonEmptyStr | None = None


class SessionsListParams(CompatParams):
    limit: Annotated[int, Field(ge=1, le=1000)] | None = None
    offset: Annotated[int, Field(ge=0)] | None = None
    active_minutes: Annotated[int, Field(ge=1)] | None = None
    sort_by: Literal["updatedAt", "lastInteractionAt"] | None = None
    include_global: bool | None = None
    include_unknown: bool | None = None
    include_derived_titles: bool | None = None
    include_last_message: bool | None = None
    label: Label | None = None
    spawned_by: NonEmptyStr | None = None
    agent_id: NonEmptyStr | None = None
    search: str | None = None
    archived: Annotated[Any, AfterValidator(_bool_or_all)] = None
    # the gateway's own filters
    kind: NonEmptyStr | None = None
    status: NonEmptyStr | None = None
    include_archived: bool | None = None


class SessionsSubscribeParams(SessionsListParams):
    """`sessions.subscribe` takes the `sessions.list` filters; non-empty ones ask for the list."""


class SessionsDescribeParams(CompatParams):
    key: SessionKey
    include_derived_titles: bool | None = None
    include_last_message: bool | None = None


class SessionsMessagesSubscribeParams(CompatParams):
    key: SessionKey
    agent_id: NonEmptyStr | None = None
    include_approvals: bool | None = None


class SessionsMessagesUnsubscribeParams(CompatParams):
    key: SessionKey
    agent_id: NonEmptyStr | None = None


class SessionsCreateParams(CompatParams):
    key: SessionKey | None = None
    idempotency_key: NonEmptyStr | None = None
    agent_id: NonEmptyStr | None = None
    label: Label | None = None
    model: NonEmptyStr | None = None
    thinking_level: NonEmptyStr | None = None
    parent_session_key: SessionKey | None = None
    message: str | None = None
    attachments: list[dict[str, Any]] | None = None
    queue_mode: QueueMode | None = None


class SessionsSendParams(CompatParams):
    key: SessionKey
    message: str
    agent_id: NonEmptyStr | None = None
    thinking: str | None = None
    attachments: list[dict[str, Any]] | None = None
    timeout_ms: Annotated[int, Field(ge=0)] | None = None
    idempotency_key: NonEmptyStr | None = None


class SessionsPatchParams(CompatParams):
    """A `null` value clears the setting; an absent one leaves it (see `model_fields_set`)."""

    key: SessionKey
    agent_id: NonEmptyStr | None = None
    label: str | None = None
    model: str | None = None
    thinking_level: str | None = None
    queue_mode: QueueMode | None = None
    archived: bool | None = None
    pinned: bool | None = None


class SessionsResetParams(CompatParams):
    key: SessionKey
    agent_id: NonEmptyStr | None = None
    reason: Literal["new", "reset"] | None = None


class SessionsDeleteParams(CompatParams):
    key: SessionKey
    agent_id: NonEmptyStr | None = None
    delete_transcript: bool | None = None
    expected_session_id: SessionId | None = None
    cascade: bool | None = None
    """Delete the session's branches too (the gateway's own field)."""


class SessionsCompactParams(CompatParams):
    key: SessionKey
    agent_id: NonEmptyStr | None = None
    max_lines: Annotated[int, Field(ge=1)] | None = None
    session_id: SessionId | None = None
    """Names the session instead of `key` when given (the gateway's own field)."""


class SessionsAbortParams(CompatParams):
    key: SessionKey | None = None
    run_id: NonEmptyStr | None = None
    agent_id: NonEmptyStr | None = None
    clear_queued: bool | None = None


class ChatSendParams(CompatParams):
    session_key: SessionKey
    message: str
    idempotency_key: NonEmptyStr
    agent_id: NonEmptyStr | None = None
    session_id: SessionId | None = None
    thinking: str | None = None
    queue_mode: QueueMode | None = None
    deliver: bool | None = None
    attachments: list[dict[str, Any]] | None = None
    timeout_ms: Annotated[int, Field(ge=0)] | None = None
    reply_to_id: NonEmptyStr | None = None


class ChatHistoryParams(CompatParams):
    session_key: SessionKey
    agent_id: NonEmptyStr | None = None
    cursor: str | None = None
    limit: Annotated[int, Field(ge=1, le=1000)] | None = None
    offset: Annotated[int, Field(ge=0)] | None = None
    message_id: NonEmptyStr | None = None
    session_id: SessionId | None = None
    max_chars: Annotated[int, Field(ge=1, le=500_000)] | None = None


class ChatAbortParams(CompatParams):
    session_key: SessionKey
    agent_id: NonEmptyStr | None = None
    run_id: NonEmptyStr | None = None
    session_id: SessionId | None = None
    """Names the session instead of `sessionKey` when given (the gateway's own field)."""


class ChatInjectParams(CompatParams):
    session_key: SessionKey
    message: NonEmptyStr
    agent_id: NonEmptyStr | None = None
    label: Annotated[str, StringConstraints(max_length=100)] | None = None
    role: Literal["user", "assistant"] | None = None
    """Who the injected message is from; assistant by default (the gateway's own field)."""


class AgentParams(CompatParams):
    message: NonEmptyStr
    idempotency_key: NonEmptyStr
    agent_id: NonEmptyStr | None = None
    session_id: SessionId | None = None
    session_key: SessionKey | None = None
    provider: str | None = None
    model: str | None = None
    thinking: str | None = None
    deliver: bool | None = None
    attachments: list[dict[str, Any]] | None = None
    channel: str | None = None
    to: str | None = None
    timeout: Annotated[int, Field(ge=0)] | None = None
    lane: str | None = None
    extra_system_prompt: str | None = None
    label: Label | None = None


MAX_WAIT_MS = 24 * 3600 * 1000
"""The longest `agent.wait` may wait."""


class AgentWaitParams(CompatParams):
    run_id: NonEmptyStr
    timeout_ms: Annotated[int, Field(ge=0, le=MAX_WAIT_MS)] | None = None


# --- gateway extensions -----------------------------------------------------------------------


class _SessionRef(NativeParams):
    """A session named by key or by id; at least one is required."""

    key: SessionKey | None = None
    session_id: SessionId | None = None

    @model_validator(mode="after")
    def _key_or_id(self) -> _SessionRef:
        if self.key is None and self.session_id is None:
            raise ValueError("must have required property 'key' or 'sessionId'")
        return self


class SessionsTreeParams(_SessionRef):
    pass


class SessionsBranchParams(_SessionRef):
    from_entry_id: NonEmptyStr | None = None
    new_key: SessionKey | None = None
    label: Label | None = None


class SessionsForkParams(CompatParams):
    """OpenClaw's name for `sessions.branch`: `{sessionKey, entryId}` as in its schema."""

    session_key: SessionKey
    entry_id: NonEmptyStr
    agent_id: NonEmptyStr | None = None
    new_key: SessionKey | None = None
    label: Label | None = None

    def as_branch(self) -> SessionsBranchParams:
        """The equivalent `sessions.branch` params."""
        return SessionsBranchParams.model_validate(
            {
                "key": self.session_key,
                "fromEntryId": self.entry_id,
                **({"newKey": self.new_key} if self.new_key is not None else {}),
                **({"label": self.label} if self.label is not None else {}),
            }
        )


class SessionsSwitchParams(NativeParams):
    key: SessionKey
    session_id: SessionId


class SessionsEventsSubscribeParams(_SessionRef):
    after_seq: Annotated[int, Field(ge=0)] | None = None


class SessionsEventsUnsubscribeParams(_SessionRef):
    pass


class NativeEmptyParams(NativeParams):
    """Native methods without parameters."""


class TokensCreateParams(NativeParams):
    name: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    scopes: Annotated[list[NonEmptyStr], Field(min_length=1, max_length=16)]


class TokensRevokeParams(NativeParams):
    name: Annotated[str, StringConstraints(min_length=1, max_length=64)]


class McpRestartParams(NativeParams):
    name: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    agent_id: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None
    """Only this agent's instance of the server (default: every agent's)."""


class ExtensionNameParams(NativeParams):
    """`extensions.enable` and `extensions.disable`."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=64)]


class PairingListParams(CompatParams):
    channel: NonEmptyStr | None = None


class PairingApproveParams(CompatParams):
    code: NonEmptyStr
    channel: NonEmptyStr | None = None
    account_id: NonEmptyStr | None = None


# --- cron jobs (OpenClaw's `Cron*Params`; jobs' nested objects are checked by gateway.automation) --

CronLimit = Annotated[int, Field(ge=1, le=200)]
RunStatusName = Literal["ok", "error", "skipped"]
DeliveryStatusName = Literal["delivered", "not-delivered", "unknown", "not-requested"]


class CronListParams(CompatParams):
    include_disabled: bool | None = None
    limit: CronLimit | None = None
    offset: Annotated[int, Field(ge=0)] | None = None
    query: str | None = None
    enabled: Literal["all", "enabled", "disabled"] | None = None
    schedule_kind: Literal["all", "at", "every", "cron", "on-exit", "stream"] | None = None
    last_run_status: Literal["all", "ok", "error", "skipped", "unknown"] | None = None
    sort_by: Literal["nextRunAtMs", "updatedAtMs", "name"] | None = None
    sort_dir: Literal["asc", "desc"] | None = None
    agent_id: NonEmptyStr | None = None


class _CronJobRef(CompatParams):
    """A job named by `id` or, as older clients write it, `jobId`."""

    id: NonEmptyStr | None = None
    job_id: NonEmptyStr | None = None

    @model_validator(mode="after")
    def _id_or_job_id(self) -> _CronJobRef:
        if self.id is None and self.job_id is None:
            raise ValueError("must have required property 'id'")
        return self

    @property
    def target(self) -> str:
        return self.id if self.id is not None else str(self.job_id)


class CronGetParams(_CronJobRef):
    pass


class CronRemoveParams(_CronJobRef):
    pass


class CronRunParams(_CronJobRef):
    mode: Literal["due", "force", "if-enabled"] | None = None


class CronUpdateParams(_CronJobRef):
    patch: dict[str, Any]


class CronAddParams(CompatParams):
    """Nested objects (`schedule`, `payload`, `delivery`) are checked by `gateway.automation`,
    which names the field at fault. `catchUp` is the gateway's own field."""

    name: NonEmptyStr
    schedule: dict[str, Any]
    payload: dict[str, Any]
    session_target: NonEmptyStr | None = None
    wake_mode: Literal["now", "next-heartbeat"] | None = None
    agent_id: NonEmptyStr | None = None
    session_key: SessionKey | None = None
    description: str | None = None
    display_name: Label | None = None
    enabled: bool | None = None
    delete_after_run: bool | None = None
    delivery: dict[str, Any] | None = None
    catch_up: Literal["none", "latest", "all"] | None = None


class CronRunsParams(CompatParams):
    scope: Literal["job", "all"] | None = None
    id: NonEmptyStr | None = None
    job_id: NonEmptyStr | None = None
    run_id: NonEmptyStr | None = None
    agent_id: NonEmptyStr | None = None
    limit: CronLimit | None = None
    offset: Annotated[int, Field(ge=0)] | None = None
    statuses: Annotated[list[RunStatusName], Field(min_length=1, max_length=3)] | None = None
    status: Literal["all", "ok", "error", "skipped"] | None = None
    delivery_statuses: Annotated[list[DeliveryStatusName], Field(min_length=1, max_length=4)] | None = None
    delivery_status: DeliveryStatusName | None = None
    query: str | None = None
    sort_dir: Literal["asc", "desc"] | None = None


# --- error wording ----------------------------------------------------------------------------

_TYPE_WORDS = {
    "string_type": "string",
    "int_type": "integer",
    "int_from_float": "integer",
    "float_type": "number",
    "bool_type": "boolean",
    "dict_type": "object",
    "model_type": "object",
    "model_attributes_type": "object",
    "list_type": "array",
    "none_required": "null",
}


def _pointer(loc: tuple[int | str, ...]) -> str:
    return "/" + "/".join(str(part).replace("~", "~0").replace("/", "~1") for part in loc)


def _phrase(error: Any) -> tuple[tuple[int | str, ...], str]:
    """Where (a path of the instance) and what, in JSON Schema validator words."""
    loc: tuple[int | str, ...] = tuple(error["loc"])
    kind: str = error["type"]
    ctx: dict[str, Any] = error.get("ctx") or {}
    if kind == "missing" and loc:
        return loc[:-1], f"must have required property '{loc[-1]}'"
    if kind == "extra_forbidden" and loc:
        return loc[:-1], f"must NOT have additional property '{loc[-1]}'"
    if kind in _TYPE_WORDS:
        return loc, f"must be {_TYPE_WORDS[kind]}"
    if kind == "string_too_short":
        return loc, f"must NOT have fewer than {ctx.get('min_length')} characters"
    if kind == "string_too_long":
        return loc, f"must NOT have more than {ctx.get('max_length')} characters"
    if kind == "greater_than_equal":
        return loc, f"must be >= {ctx.get('ge')}"
    if kind == "less_than_equal":
        return loc, f"must be <= {ctx.get('le')}"
    if kind == "greater_than":
        return loc, f"must be > {ctx.get('gt')}"
    if kind == "less_than":
        return loc, f"must be < {ctx.get('lt')}"
    if kind == "literal_error":
        return loc, f"must be equal to one of the allowed values: {ctx.get('expected')}"
    if kind == "value_error":
        message = str(ctx.get("error") or error["msg"])
        return loc, message
    return loc, str(error["msg"])


def describe_validation_error(exc: ValidationError) -> str:
    """The first error of `exc`, worded like OpenClaw: `[at /path: ]must ...`."""
    errors = exc.errors(include_url=False)
    if not errors:
        return "invalid value"
    loc, what = _phrase(errors[0])
    return f"at {_pointer(loc)}: {what}" if loc else what
