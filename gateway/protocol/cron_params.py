"""Parameter models of the `cron.*` methods: OpenClaw's `Cron*Params`. Jobs' nested objects
(`schedule`, `payload`, `delivery`) are checked by `gateway.automation`, which names the field at
fault."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from gateway.protocol.params_base import CompatParams, Label, NonEmptyStr, SessionKey

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
