"""A job's runs as read back: their outcome and their `cron.runs` entries.

A run's record (`cron_runs`) says when and why it fired; its outcome is not copied there. It is
read, when asked, from where the gateway already keeps it: the input ledger (the run's input:
waiting, running, settled, rejected) and the run that input ended in (status, error, reply text,
usage). Whether its reply reached a chat is read from the binding's outbox. So there is one
record of each fact, and a run that ended while the daemon was down reads the same as any other.

Statuses as OpenClaw names them: `ok`, `error` (the run failed, was aborted, was rejected, or was
cut off by a restart); None while the run has not finished.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import msgspec

from gateway.automation.delivery import DeliveryStatus, delivery_status

__all__ = ["RUN_STATUSES", "RunStatusName", "RunView", "SUMMARY_CHARS"]

RunStatusName = Literal["ok", "error", "skipped"]
RUN_STATUSES: Final[tuple[RunStatusName, ...]] = ("ok", "error", "skipped")
SUMMARY_CHARS: Final = 2000
"""The longest reply text a run entry carries (`summary`)."""
_OPEN_INPUT: Final = ("queued", "steered", "followup", "running")


class RunView(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    """One run of a job with what the ledger and the outbox say about it."""

    id: str
    job_id: str
    slot_ms: int | None
    trigger: str
    session_key: str
    fired_at: int
    delivery: Mapping[str, Any] | None = None
    delivery_error: str | None = None
    input_status: str | None = None
    input_reason: str | None = None
    session_id: str | None = None
    answer_run_id: str | None = None
    """The run that answered the input (its own, or an active run it joined)."""
    run_status: str | None = None
    started_at: int | None = None
    ended_at: int | None = None
    run_error: str | None = None
    result: Mapping[str, Any] = msgspec.field(default_factory=dict)
    outbox_states: tuple[str, ...] = ()

    @property
    def finished(self) -> bool:
        return self.input_status is not None and self.input_status not in _OPEN_INPUT

    @property
    def status(self) -> RunStatusName | None:
        if not self.finished:
            return None
        if self.input_status == "done" and self.run_status == "done":
            return "ok"
        return "error"

    @property
    def error(self) -> str | None:
        if self.status != "error":
            return None
        for text in (self.result.get("errorMessage"), self.run_error, self.input_reason):
            if isinstance(text, str) and text:
                return text
        if self.input_status == "interrupted" or self.run_status == "interrupted":
            return "the gateway stopped during the run"
        if self.run_status == "aborted":
            return "the run was aborted"
        return "the run failed"

    @property
    def delivery_status(self) -> DeliveryStatus:
        return delivery_status(
            self.delivery is not None or self.delivery_error is not None,
            self.delivery_error,
            self.outbox_states,
        )

    @property
    def duration_ms(self) -> int | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return max(0, self.ended_at - self.started_at)

    def entry(self, job_name: str | None = None) -> dict[str, Any]:
        """The run as a `cron.runs` entry (OpenClaw's `CronRunLogEntry`, plus `slotMs` and
        `trigger`: `schedule`, `catch-up` or `manual`)."""
        out: dict[str, Any] = {
            "ts": self.ended_at or self.fired_at,
            "jobId": self.job_id,
            "action": "finished",
            "runId": self.id,
            "runAtMs": self.fired_at,
            "sessionKey": self.session_key,
            "trigger": self.trigger,
            "deliveryStatus": self.delivery_status,
            "delivered": self.delivery_status == "delivered",
        }
        status = self.status
        if status is not None:
            out["status"] = status
        if self.slot_ms is not None:
            out["slotMs"] = self.slot_ms
        if self.session_id is not None:
            out["sessionId"] = self.session_id
        if job_name is not None:
            out["jobName"] = job_name
        if self.duration_ms is not None:
            out["durationMs"] = self.duration_ms
        error = self.error
        if error is not None:
            out["error"] = error
        text = self.result.get("text")
        if isinstance(text, str) and text:
            out["summary"] = text[:SUMMARY_CHARS]
        if self.delivery_error is not None:
            out["deliveryError"] = self.delivery_error
        usage = _usage(self.result.get("usage"))
        if usage:
            out["usage"] = usage
        return out


def _usage(data: Any) -> dict[str, int]:
    if not isinstance(data, Mapping):
        return {}
    out: dict[str, int] = {}
    for ours, theirs in (
        ("input", "input_tokens"),
        ("output", "output_tokens"),
        ("totalTokens", "total_tokens"),
        ("cacheRead", "cache_read_tokens"),
        ("cacheWrite", "cache_write_tokens"),
    ):
        value = data.get(ours)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[theirs] = int(value)
    return out
