"""What clients see of jobs and runs: a job with its state, and the pages of `cron.list` and
`cron.runs` (filtered, sorted, paged as OpenClaw answers them).

A job's `state` is derived when asked: `nextRunAtMs` from its schedule, the rest from its newest
run (`RunView`). The same values are repeated at the top level, as OpenClaw's `CronJob` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from gateway.automation.jobs import Job
from gateway.automation.run_log import RunView

__all__ = ["JobsQuery", "RunsQuery", "job_object", "jobs_page", "runs_page"]

DEFAULT_PAGE = 50


def job_object(job: Job, last: RunView | None, now_ms: int) -> dict[str, Any]:
    """`CronJob` with `state`."""
    out = job.wire()
    state: dict[str, Any] = {"scheduleActivatedAtMs": job.origin_ms}
    upcoming = job.schedule.next_after(max(now_ms, job.origin_ms), job.origin_ms) if job.enabled else None
    if upcoming is not None:
        state["nextRunAtMs"] = upcoming
    if last is not None:
        state["lastRunAtMs"] = last.fired_at
        if last.finished:
            status = last.status
            state["lastRunStatus"] = status
            state["lastStatus"] = status
            if last.error is not None:
                state["lastError"] = last.error
            if last.duration_ms is not None:
                state["lastDurationMs"] = last.duration_ms
        else:
            state["runningAtMs"] = last.fired_at
        state["lastDeliveryStatus"] = last.delivery_status
        state["lastDelivered"] = last.delivery_status == "delivered"
        if last.delivery_error is not None:
            state["lastDeliveryError"] = last.delivery_error
    out["state"] = state
    for ours, theirs in (
        ("nextRunAtMs", "nextRunAtMs"),
        ("lastRunAtMs", "lastRunAtMs"),
        ("lastRunStatus", "lastRunStatus"),
        ("lastError", "lastRunError"),
        ("lastDeliveryStatus", "lastDeliveryStatus"),
        ("lastDelivered", "lastDelivered"),
        ("lastDeliveryError", "lastDeliveryError"),
    ):
        if ours in state:
            out[theirs] = state[ours]
    return out


class JobsQuery(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    """`cron.list`'s filters."""

    enabled: str = "enabled"
    """`all`, `enabled` or `disabled` (`includeDisabled: true` is `all`)."""
    query: str | None = None
    schedule_kind: str | None = None
    last_run_status: str | None = None
    agent_id: str | None = None
    sort_by: str = "nextRunAtMs"
    sort_dir: str = "asc"
    limit: int | None = None
    offset: int = 0


def jobs_page(
    jobs: Sequence[Job], latest: Mapping[str, RunView], query: JobsQuery, now_ms: int
) -> dict[str, Any]:
    """`{jobs, total, offset, limit, hasMore, nextOffset}`."""
    objects = [job_object(job, latest.get(job.id), now_ms) for job in jobs if _keeps(job, latest, query)]
    objects.sort(key=lambda o: _sort_key(o, query.sort_by), reverse=query.sort_dir == "desc")
    if query.sort_by == "nextRunAtMs" and query.sort_dir == "asc":
        objects.sort(key=lambda o: "nextRunAtMs" not in o)  # jobs with no next run last
    return _page(objects, "jobs", query.limit, query.offset)


def _keeps(job: Job, latest: Mapping[str, RunView], query: JobsQuery) -> bool:
    if query.enabled == "enabled" and not job.enabled:
        return False
    if query.enabled == "disabled" and job.enabled:
        return False
    if query.agent_id is not None and job.agent_id != query.agent_id:
        return False
    if query.schedule_kind not in (None, "all") and job.schedule.kind != query.schedule_kind:
        return False
    if query.last_run_status not in (None, "all"):
        last = latest.get(job.id)
        status = last.status if last is not None else None
        if (status or "unknown") != query.last_run_status:
            return False
    if query.query:
        haystack = " ".join(filter(None, (job.id, job.name, job.description, job.display_name, job.agent_id)))
        if query.query.lower() not in haystack.lower():
            return False
    return True


def _sort_key(job: Mapping[str, Any], sort_by: str) -> Any:
    if sort_by == "name":
        return str(job.get("name", "")).lower()
    if sort_by == "updatedAtMs":
        return int(job.get("updatedAtMs", 0))
    return int(job.get("nextRunAtMs", 0))


class RunsQuery(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    """`cron.runs`'s filters."""

    statuses: frozenset[str] | None = None
    delivery_statuses: frozenset[str] | None = None
    run_id: str | None = None
    query: str | None = None
    sort_dir: str = "desc"
    limit: int | None = None
    offset: int = 0


def runs_page(views: Sequence[RunView], names: Mapping[str, str], query: RunsQuery) -> dict[str, Any]:
    """`{entries, total, offset, limit, hasMore, nextOffset}` of finished runs, newest first
    unless `sortDir` is `asc`."""
    entries = []
    for view in views:
        if not view.finished or (query.run_id is not None and view.id != query.run_id):
            continue
        if query.statuses is not None and view.status not in query.statuses:
            continue
        if query.delivery_statuses is not None and view.delivery_status not in query.delivery_statuses:
            continue
        entry = view.entry(names.get(view.job_id))
        if (
            query.query
            and query.query.lower()
            not in " ".join(str(entry.get(k, "")) for k in ("jobName", "summary", "error", "jobId")).lower()
        ):
            continue
        entries.append(entry)
    if query.sort_dir == "asc":
        entries.reverse()
    return _page(entries, "entries", query.limit, query.offset)


def _page(items: list[dict[str, Any]], name: str, limit: int | None, offset: int) -> dict[str, Any]:
    total = len(items)
    size = limit if limit is not None else DEFAULT_PAGE
    offset = max(0, min(total, offset))
    page = items[offset : offset + size]
    following = offset + len(page)
    return {
        name: page,
        "total": total,
        "offset": offset,
        "limit": size,
        "hasMore": following < total,
        "nextOffset": following if following < total else None,
    }
