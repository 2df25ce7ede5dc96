"""Cron jobs: `cron.list`, `cron.get`, `cron.status`, `cron.runs` (operator.read) and
`cron.add`, `cron.update`, `cron.remove`, `cron.run` (operator.admin), shaped as OpenClaw answers
them. The work is `gateway.automation.Automation`'s; this module maps params and errors.

An unknown job is `NOT_FOUND` with `details: {code: "CRON_JOB_NOT_FOUND", jobId}`; a spec the
gateway cannot run is `INVALID_REQUEST` naming the field (`invalid cron.add params: schedule.expr:
Bad minute in '61 * * * *'`).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

from gateway.automation import Automation, InvalidJob, JobNotFound, JobsQuery, RunsQuery
from gateway.methods.base import Call, MethodError, from_sessions_error, invalid
from gateway.protocol import cron_params as cp
from gateway.protocol import params as p
from gateway.protocol.codes import ErrorCode
from sessions.errors import SessionsError

T = TypeVar("T")
JOB_NOT_FOUND = "CRON_JOB_NOT_FOUND"


def _automation(call: Call) -> Automation:
    automation = call.state.automation
    if automation is None:
        raise MethodError(
            ErrorCode.UNAVAILABLE, "cron jobs are not available yet", retryable=True, retry_after_ms=1000
        )
    return automation


async def _answer(call: Call, work: Awaitable[T]) -> T:
    try:
        return await work
    except JobNotFound as exc:
        raise MethodError(
            ErrorCode.NOT_FOUND, str(exc), details={"code": JOB_NOT_FOUND, "jobId": exc.job_id}
        ) from exc
    except InvalidJob as exc:
        raise invalid(call.method, str(exc)) from exc
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc


async def cron_list(call: Call, params: cp.CronListParams) -> Any:
    enabled = params.enabled or ("all" if params.include_disabled else "enabled")
    query = JobsQuery(
        enabled=enabled,
        query=params.query,
        schedule_kind=params.schedule_kind,
        last_run_status=params.last_run_status,
        agent_id=params.agent_id,
        sort_by=params.sort_by or "nextRunAtMs",
        sort_dir=params.sort_dir or "asc",
        limit=params.limit,
        offset=params.offset or 0,
    )
    return await _answer(call, _automation(call).list(query))


async def cron_get(call: Call, params: cp.CronGetParams) -> Any:
    return await _answer(call, _automation(call).get(params.target))


async def cron_status(call: Call, params: p.EmptyParams) -> Any:
    return await _answer(call, _automation(call).status())


async def cron_runs(call: Call, params: cp.CronRunsParams) -> Any:
    job_id = params.id or params.job_id
    scope = params.scope or ("job" if job_id else "all")
    if scope == "job" and job_id is None:
        raise invalid(call.method, "must have required property 'id'")
    statuses: set[str] = set(params.statuses or ())
    if params.status not in (None, "all"):
        statuses.add(str(params.status))
    deliveries: set[str] = set(params.delivery_statuses or ())
    if params.delivery_status is not None:
        deliveries.add(params.delivery_status)
    query = RunsQuery(
        statuses=frozenset(statuses) or None,
        delivery_statuses=frozenset(deliveries) or None,
        run_id=params.run_id,
        query=params.query,
        sort_dir=params.sort_dir or "desc",
        limit=params.limit,
        offset=params.offset or 0,
    )
    automation = _automation(call)
    return await _answer(
        call, automation.runs(job_id if scope == "job" else None, query, agent_id=params.agent_id)
    )


async def cron_add(call: Call, params: cp.CronAddParams) -> Any:
    spec = params.model_dump(by_alias=True, exclude_unset=True)
    return await _answer(call, _automation(call).add(spec))


async def cron_update(call: Call, params: cp.CronUpdateParams) -> Any:
    return await _answer(call, _automation(call).update(params.target, params.patch))


async def cron_remove(call: Call, params: cp.CronRemoveParams) -> Any:
    removed = await _answer(call, _automation(call).remove(params.target))
    return {"ok": True, "removed": removed}


async def cron_run(call: Call, params: cp.CronRunParams) -> Any:
    return await _answer(call, _automation(call).run_now(params.target, params.mode or "force"))
