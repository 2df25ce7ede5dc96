"""Which due slots of a job fire: the job's `catch_up` policy.

A due slot is *on time* when the scheduler first considers it at most a grace after it fell due,
the grace being `missed_after_ms` (the setting `cron.missed_after_s`, a minute by default) or the
job's period at that slot when that is shorter. Otherwise it was *missed*: the daemon was down, or
could not reach its database, when it fell due. The policy decides what fires:

- `all`: every due slot, on time or missed, at most `max_catch_up` at once (the newest ones; the
  older ones are dropped and the drop is logged);
- `latest` (the default): only the newest due slot, on time or missed;
- `none`: only a slot that is on time; missed ones are skipped.

As the grace never exceeds the period, at most one due slot is on time: the newest. Skipped and
dropped slots leave no record: the next slot of the job comes as usual.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from gateway.automation.schedule import Schedule

__all__ = ["CATCH_UP_POLICIES", "DEFAULT_CATCH_UP", "CatchUp", "Fire", "Plan", "plan"]

CatchUp = Literal["none", "latest", "all"]
CATCH_UP_POLICIES: Final[tuple[CatchUp, ...]] = ("none", "latest", "all")
DEFAULT_CATCH_UP: Final[CatchUp] = "latest"


class Fire(msgspec.Struct, frozen=True):
    """One slot to fire. `missed`: it fell due more than its grace ago (a catch-up run)."""

    slot_ms: int
    missed: bool


class Plan(msgspec.Struct, frozen=True):
    fires: list[Fire]
    """Oldest first."""
    passed_over: bool
    """Missed slots were left unfired (skipped by the policy, or dropped past `max_catch_up`)."""


def plan(
    schedule: Schedule,
    *,
    after_ms: int,
    now_ms: int,
    origin_ms: int,
    policy: CatchUp,
    missed_after_ms: int,
    max_catch_up: int,
) -> Plan:
    """What fires of the slots in `(after_ms, now_ms]`: `after_ms` is the newest slot already
    decided (fired, or passed over), or the job's origin."""
    limit = max_catch_up if policy == "all" else 1
    due, truncated = schedule.due(after_ms, now_ms, origin_ms, limit)
    if not due:
        return Plan([], False)
    fires = [Fire(slot, _missed(schedule, slot, now_ms, origin_ms, missed_after_ms)) for slot in due]
    if policy == "all":
        return Plan(fires, truncated)
    newest = fires[-1]
    passed_over = truncated or newest.missed
    if policy == "latest":
        return Plan([newest], truncated)
    return Plan([] if newest.missed else [newest], passed_over)


def _missed(schedule: Schedule, slot_ms: int, now_ms: int, origin_ms: int, missed_after_ms: int) -> bool:
    late_by = now_ms - slot_ms
    if late_by <= 0:
        return False
    grace = missed_after_ms
    following = schedule.next_after(slot_ms, origin_ms)
    if following is not None:
        grace = min(grace, following - slot_ms)
    return late_by > grace
