"""Parameter models of the methods (cron jobs' are in `gateway.protocol.cron_params`, approvals'
in `approval_params`, `connect`'s in `connect_params`, the bases and field types they share in
`params_base`). The method table (`gateway.protocol.methods`) imports these with the first method
call.

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

Validation errors are worded by `gateway.protocol.validation_errors`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StringConstraints, model_validator

from gateway.protocol.params_base import (
    CompatParams,
    Label,
    NativeParams,
    NonEmptyStr,
    QueueMode,
    SessionId,
    SessionKey,
)


def _bool_or_all(value: Any) -> bool | str:
    if isinstance(value, bool) or value == "all":
        return value  # type: ignore[no-any-return]
    raise ValueError('must be boolean or "all"')


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


class UsageSummaryParams(NativeParams):
    days: Annotated[int, Field(ge=1, le=366)] = 30
    agent_id: NonEmptyStr | None = None


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
