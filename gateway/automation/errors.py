"""Errors of `gateway.automation`, one root (a `gateway.errors.GatewayError`):

    AutomationError
    ├── InvalidJob          a job spec (cron.add / cron.update) the gateway cannot run; the
    │                       message names the field, e.g. "schedule.expr: Bad minute"
    ├── JobNotFound         no job has that id (`job_id` says which)
    ├── SlotTaken           a scheduled slot was already fired (by this node or another one);
    │                       raised inside the transaction that would have recorded it
    ├── DuplicateDelivery   a webhook delivery seen before (`run_id` names the run it started)
    └── Refused             a webhook request refused before it became a run (`status` is the
                            HTTP status to answer: 401 unproven, 404 unknown hook, 413, 429, ...)

Database failures are `sessions.errors` exceptions (`StoreUnavailable` when busy or unreachable,
`StoreError` otherwise), as for every store of the gateway; callers translate both.
"""

from __future__ import annotations

from gateway.errors import GatewayError

__all__ = ["AutomationError", "DuplicateDelivery", "InvalidJob", "JobNotFound", "Refused", "SlotTaken"]


class AutomationError(GatewayError):
    """The root of this package's errors."""


class InvalidJob(AutomationError):
    """A job spec the gateway cannot run."""


class JobNotFound(AutomationError):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"no cron job with id {job_id!r}")
        self.job_id = job_id


class SlotTaken(AutomationError):
    def __init__(self, job_id: str, slot_ms: int) -> None:
        super().__init__(f"the slot {slot_ms} of job {job_id!r} has already fired")
        self.job_id = job_id
        self.slot_ms = slot_ms


class DuplicateDelivery(AutomationError):
    def __init__(self, hook: str, run_id: str | None) -> None:
        super().__init__(f"webhook {hook!r} already received this delivery")
        self.hook = hook
        self.run_id = run_id


class Refused(AutomationError):
    def __init__(self, status: int, reason: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.retry_after_s = retry_after_s
