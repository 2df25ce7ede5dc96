"""Cron jobs: what a job is, how `cron.add` and `cron.update` build one, and its wire shape.

A job sends one message to an agent on a schedule (`gateway.automation.schedule`):

- `payload`: `{"kind": "agentTurn", "message": "..."}` (or OpenClaw's `systemEvent` with `text`,
  which this gateway sends the same way: there is no heartbeat to wait for);
- `sessionTarget`: where the message goes: `main` (the agent's main session), `isolated` (a new
  session for every run, key `cron:<jobId>:run:<slot>`), `current` (the job's `sessionKey`) or
  `session:<key>` (that key);
- `delivery`: where the reply is posted besides the session (`gateway.automation.delivery`);
- `catchUp`: what happens to slots missed while the daemon was down (`gateway.automation.catch_up`);
- `origin_ms`: when the job last became live (created, enabled, or given a new schedule). Only
  slots after it are due, so enabling a job never fires the slots it slept through.

Fields this gateway would otherwise have to ignore (tool policies, model overrides, failure
alerts, other payload kinds) are refused by name rather than dropped. A `Job` is immutable;
`patched` returns the changed copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec
from msgspec.structs import replace

from gateway.automation.catch_up import CATCH_UP_POLICIES, DEFAULT_CATCH_UP, CatchUp
from gateway.automation.delivery import Delivery, parse_delivery
from gateway.automation.errors import InvalidJob
from gateway.automation.schedule import AtSchedule, Schedule, parse_schedule

__all__ = ["MAX_NAME", "Job", "new_job", "parse_payload", "patched", "session_key_of_target"]

MAX_NAME = 200
MAX_MESSAGE = 100_000
MAX_SESSION_KEY = 500
"""The longest session key the database keeps."""
SESSION_TARGETS: Final = ("main", "isolated", "current", "session:<key>")
WAKE_MODES: Final = ("now", "next-heartbeat")
_PAYLOAD_FIELDS: Final = {"agentTurn": ("kind", "message"), "systemEvent": ("kind", "text")}
_SETTABLE: Final = (
    "name",
    "displayName",
    "description",
    "agentId",
    "sessionKey",
    "enabled",
    "deleteAfterRun",
    "schedule",
    "sessionTarget",
    "wakeMode",
    "payload",
    "delivery",
    "catchUp",
)
_NULLABLE: Final = ("displayName", "description", "sessionKey", "delivery")
_REFUSED: Final = ("pacing", "trigger", "failureAlert", "scheduledToolPolicy")
"""OpenClaw fields that would change what a run does, which this gateway does not implement."""


class Job(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    id: str
    name: str
    agent_id: str
    schedule: Schedule
    payload: dict[str, Any]
    """`{"kind": "agentTurn", "message"}` or `{"kind": "systemEvent", "text"}`, as given."""
    session_target: str = "isolated"
    session_key: str | None = None
    wake_mode: str = "now"
    delivery: Delivery | None = None
    catch_up: CatchUp = DEFAULT_CATCH_UP
    enabled: bool = True
    delete_after_run: bool = False
    description: str | None = None
    display_name: str | None = None
    origin_ms: int = 0
    created_at: int = 0
    updated_at: int = 0

    @property
    def message(self) -> str:
        """The text the job sends."""
        return str(self.payload.get("message") or self.payload.get("text") or "")

    def session_key_for(self, run_suffix: str) -> str:
        """The session a run goes to; `run_suffix` names an isolated run's new session."""
        return session_key_of_target(
            self.session_target, agent_id=self.agent_id, job=self, run_suffix=run_suffix
        )

    def wire(self) -> dict[str, Any]:
        """The job as the protocol writes it (`CronJob`), without its `state`."""
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "agentId": self.agent_id,
            "enabled": self.enabled,
            "deleteAfterRun": self.delete_after_run,
            "createdAtMs": self.created_at,
            "updatedAtMs": self.updated_at,
            "schedule": self.schedule.wire(),
            "sessionTarget": self.session_target,
            "wakeMode": self.wake_mode,
            "payload": dict(self.payload),
            "catchUp": self.catch_up,
        }
        for key, value in (
            ("displayName", self.display_name),
            ("description", self.description),
            ("sessionKey", self.session_key),
        ):
            if value is not None:
                out[key] = value
        out["delivery"] = self.delivery.wire() if self.delivery is not None else {"mode": "none"}
        return out


def new_job(spec: Mapping[str, Any], *, job_id: str, now_ms: int, default_agent: str) -> Job:
    """A job from `cron.add` params (camelCase wire fields). Raises InvalidJob."""
    if "name" not in spec:
        raise InvalidJob("name: is required")
    for key in _REFUSED:
        if spec.get(key) not in (None, False):
            raise InvalidJob(f"{key}: not supported by this gateway")
    base = Job(
        id=job_id,
        name="-",
        agent_id=default_agent,
        schedule=parse_schedule(spec.get("schedule")),
        payload={},
        origin_ms=now_ms,
        created_at=now_ms,
        updated_at=now_ms,
    )
    fields = {key: value for key, value in spec.items() if key in _SETTABLE}
    if fields.get("agentId") is None:
        fields.pop("agentId", None)
    job = _apply(base, fields)
    _check(job, now_ms=now_ms, new_schedule=True)
    return job


def patched(job: Job, patch: Mapping[str, Any], *, now_ms: int) -> Job:
    """`job` with a `cron.update` patch applied. Enabling a disabled job or giving it a new
    schedule moves its origin to `now_ms`. Raises InvalidJob."""
    unknown = sorted(set(patch) - set(_SETTABLE))
    if unknown:
        raise InvalidJob(f"patch.{unknown[0]}: not a field this gateway can change")
    changed = _apply(job, patch)
    rescheduled = "schedule" in patch and changed.schedule != job.schedule
    woken = changed.enabled and not job.enabled
    if rescheduled or woken:
        changed = replace(changed, origin_ms=now_ms)
    _check(changed, now_ms=now_ms, new_schedule=rescheduled)
    return replace(changed, updated_at=now_ms)


def parse_payload(data: Any) -> dict[str, Any]:
    """A job's payload, checked. Raises InvalidJob."""
    if not isinstance(data, Mapping):
        raise InvalidJob("payload: must be an object")
    kind = data.get("kind")
    fields = _PAYLOAD_FIELDS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        known = ", ".join(_PAYLOAD_FIELDS)
        raise InvalidJob(f"payload.kind: {kind!r} is not supported by this gateway ({known})")
    extra = sorted(set(data) - set(fields))
    if extra:
        raise InvalidJob(f"payload.{extra[0]}: not supported by this gateway")
    text = data.get(fields[1])
    if not isinstance(text, str) or not text.strip():
        raise InvalidJob(f"payload.{fields[1]}: must be a non-empty string")
    if len(text) > MAX_MESSAGE:
        raise InvalidJob(f"payload.{fields[1]}: longer than {MAX_MESSAGE} characters")
    return {"kind": kind, fields[1]: text}


def session_key_of_target(target: str, *, agent_id: str, job: Job | None = None, run_suffix: str = "") -> str:
    """The session key a target names (see the module docstring)."""
    if target == "main":
        return f"agent:{agent_id}:main"
    if target == "isolated":
        job_id = job.id if job is not None else "job"
        return f"cron:{job_id}:run:{run_suffix}"
    if target == "current":
        if job is None or job.session_key is None:
            raise InvalidJob('sessionTarget: "current" needs the job\'s sessionKey')
        return job.session_key
    if target.startswith("session:") and len(target) > len("session:"):
        return target.removeprefix("session:")
    raise InvalidJob(f"sessionTarget: must be one of {', '.join(SESSION_TARGETS)}")


def _apply(job: Job, fields: Mapping[str, Any]) -> Job:
    changes: dict[str, Any] = {}
    for key, value in fields.items():
        if value is None and key not in _NULLABLE:
            raise InvalidJob(f"{key}: must not be null")
        if key == "name":
            changes["name"] = _name(value, key)
        elif key == "displayName":
            changes["display_name"] = None if value is None else _name(value, key)
        elif key == "description":
            changes["description"] = None if value is None else _string(value, key)
        elif key == "agentId":
            changes["agent_id"] = _agent(value)
        elif key == "sessionKey":
            changes["session_key"] = None if value is None else _session_key(value, key)
        elif key in ("enabled", "deleteAfterRun"):
            if not isinstance(value, bool):
                raise InvalidJob(f"{key}: must be true or false")
            changes["enabled" if key == "enabled" else "delete_after_run"] = value
        elif key == "schedule":
            changes["schedule"] = parse_schedule(value)
        elif key == "sessionTarget":
            changes["session_target"] = _string(value, key)
        elif key == "wakeMode":
            if value not in WAKE_MODES:
                raise InvalidJob(f"wakeMode: must be one of {', '.join(WAKE_MODES)}")
            changes["wake_mode"] = value
        elif key == "payload":
            changes["payload"] = parse_payload(value)
        elif key == "delivery":
            changes["delivery"] = parse_delivery(value)
        elif key == "catchUp":
            if value not in CATCH_UP_POLICIES:
                raise InvalidJob(f"catchUp: must be one of {', '.join(CATCH_UP_POLICIES)}")
            changes["catch_up"] = value
    return replace(job, **changes)


def _check(job: Job, *, now_ms: int, new_schedule: bool) -> None:
    if not job.payload:
        raise InvalidJob("payload: is required")
    key = job.session_key_for("check")
    if job.session_target.startswith("session:"):
        _session_key(key, "sessionTarget")
    schedule = job.schedule
    if new_schedule and isinstance(schedule, AtSchedule) and schedule.at_ms <= now_ms:
        raise InvalidJob(f"schedule.at: {schedule.at} is in the past")


def _name(value: Any, key: str) -> str:
    text = _string(value, key).strip()
    if not text or len(text) > MAX_NAME:
        raise InvalidJob(f"{key}: must have 1 to {MAX_NAME} characters")
    return text


def _string(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise InvalidJob(f"{key}: must be a string")
    return value


def _agent(value: Any) -> str:
    text = _string(value, "agentId").strip()
    if not text:
        raise InvalidJob("agentId: must be a non-empty string")
    return text


def _session_key(value: Any, key: str) -> str:
    text = _string(value, key)
    if not text or len(text) > MAX_SESSION_KEY or any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise InvalidJob(
            f"{key}: a session key has 1 to {MAX_SESSION_KEY} characters, none of them control characters"
        )
    return text
