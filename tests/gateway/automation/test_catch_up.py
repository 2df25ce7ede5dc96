"""`gateway.automation.catch_up`: which due slots fire under each policy."""

from __future__ import annotations

from gateway.automation.catch_up import Fire, plan
from gateway.automation.schedule import AtSchedule, CronSchedule, EverySchedule

MINUTE = 60_000
HOUR = 60 * MINUTE
T0 = 1_800_000_000_000 - 1_800_000_000_000 % HOUR  # on the hour


def fires(
    policy: str, *, after: int, now: int, schedule: object = None, max_catch_up: int = 100
) -> list[Fire]:
    chosen = plan(
        schedule or EverySchedule(HOUR),  # type: ignore[arg-type]
        after_ms=after,
        now_ms=now,
        origin_ms=T0,
        policy=policy,  # type: ignore[arg-type]
        missed_after_ms=MINUTE,
        max_catch_up=max_catch_up,
    )
    return chosen.fires


def test_an_on_time_slot_fires_under_every_policy() -> None:
    for policy in ("none", "latest", "all"):
        assert fires(policy, after=T0, now=T0 + HOUR + 5) == [Fire(T0 + HOUR, missed=False)]


def test_after_downtime_all_fires_every_missed_slot_latest_the_newest_none_nothing() -> None:
    # Down from T0 until 3 h 30 min later: three hourly slots went by, none of them on time.
    now = T0 + 3 * HOUR + 30 * MINUTE
    missed = [Fire(T0 + k * HOUR, missed=True) for k in (1, 2, 3)]
    assert fires("all", after=T0, now=now) == missed
    assert fires("latest", after=T0, now=now) == missed[-1:]
    assert fires("none", after=T0, now=now) == []


def test_a_slot_on_time_after_downtime_runs_and_older_ones_follow_the_policy() -> None:
    now = T0 + 3 * HOUR + 20_000  # the third slot is 20 s old: on time
    assert fires("none", after=T0, now=now) == [Fire(T0 + 3 * HOUR, missed=False)]
    assert fires("latest", after=T0, now=now) == [Fire(T0 + 3 * HOUR, missed=False)]
    assert [f.missed for f in fires("all", after=T0, now=now)] == [True, True, False]


def test_the_grace_is_never_longer_than_the_period() -> None:
    # Every 10 s, 35 s after the last decided slot: all three slots are within the general grace
    # of a minute, yet only the newest is on time; the others were missed.
    every_ten = EverySchedule(10_000)
    chosen = fires("all", after=T0, now=T0 + 35_000, schedule=every_ten)
    assert chosen == [Fire(T0 + 10_000, True), Fire(T0 + 20_000, True), Fire(T0 + 30_000, False)]
    assert fires("none", after=T0, now=T0 + 35_000, schedule=every_ten) == [Fire(T0 + 30_000, False)]


def test_all_is_bounded_by_max_catch_up_keeping_the_newest() -> None:
    chosen = plan(
        CronSchedule("* * * * *"),
        after_ms=T0,
        now_ms=T0 + 10 * MINUTE + 30_000,
        origin_ms=T0,
        policy="all",
        missed_after_ms=1000,
        max_catch_up=3,
    )
    assert [f.slot_ms for f in chosen.fires] == [T0 + k * MINUTE for k in (8, 9, 10)]
    assert chosen.passed_over


def test_a_missed_one_off_time_runs_late_unless_the_policy_is_none() -> None:
    once = AtSchedule("2027-01-15T08:00:00+00:00")
    before = once.at_ms - 1
    late = once.at_ms + 2 * HOUR
    assert fires("none", after=before, now=late, schedule=once) == []
    assert fires("latest", after=before, now=late, schedule=once) == [Fire(once.at_ms, missed=True)]
    assert fires("none", after=before, now=once.at_ms + 1000, schedule=once) == [
        Fire(once.at_ms, missed=False)
    ]
