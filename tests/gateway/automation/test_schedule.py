"""`gateway.automation.schedule`: slots of cron expressions (time zones, daylight saving),
intervals and one-off times."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.automation import InvalidJob, parse_schedule
from gateway.automation.schedule import AtSchedule, CronSchedule, EverySchedule


def ms(text: str) -> int:
    """Unix ms of an ISO time (UTC unless it says otherwise)."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


def iso(value: int) -> str:
    return datetime.fromtimestamp(value / 1000, UTC).isoformat(timespec="seconds")


BERLIN_0230 = CronSchedule("30 2 * * *", "Europe/Berlin")


def test_a_cron_expression_is_read_on_the_wall_clock_of_its_time_zone() -> None:
    weekdays = CronSchedule("0 8 * * 1-5", "Europe/Berlin")
    friday_noon = ms("2026-06-05T12:00:00+02:00")
    # The next 08:00 in Berlin after Friday noon is Monday's, 06:00 UTC in summer.
    assert iso(weekdays.next_after(friday_noon, 0) or 0) == "2026-06-08T06:00:00+00:00"
    assert iso(CronSchedule("0 8 * * 1-5").next_after(friday_noon, 0) or 0) == "2026-06-08T08:00:00+00:00"


def test_spring_forward_runs_a_skipped_time_once_right_after_the_gap() -> None:
    # 2026-03-29 in Europe/Berlin: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that day.
    day_before = ms("2026-03-28T12:00:00+01:00")
    slots, truncated = BERLIN_0230.due(day_before, ms("2026-03-30T12:00:00+02:00"), 0, 10)
    assert [iso(s) for s in slots] == [
        "2026-03-29T01:00:00+00:00",  # 03:00 CEST: the first instant after the gap, once
        "2026-03-30T00:30:00+00:00",  # the next day 02:30 CEST as usual
    ]
    assert not truncated
    assert BERLIN_0230.next_after(day_before, 0) == ms("2026-03-29T03:00:00+02:00")


def test_fall_back_runs_a_repeated_time_once_at_its_first_occurrence() -> None:
    # 2026-10-25 in Europe/Berlin: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice.
    day_before = ms("2026-10-24T12:00:00+02:00")
    slots, _ = BERLIN_0230.due(day_before, ms("2026-10-26T12:00:00+01:00"), 0, 10)
    assert [iso(s) for s in slots] == [
        "2026-10-25T00:30:00+00:00",  # 02:30 CEST, the first 02:30
        "2026-10-26T01:30:00+00:00",  # not 01:30 UTC on the 25th (the second 02:30, CET)
    ]
    # Asked from inside the repeated hour, after the first 02:30 went by, the next slot is the
    # next day's: never one in the past.
    second_pass = ms("2026-10-25T02:15:00+01:00")
    assert iso(BERLIN_0230.next_after(second_pass, 0) or 0) == "2026-10-26T01:30:00+00:00"


def test_an_hourly_job_runs_in_both_copies_of_the_repeated_hour() -> None:
    hourly = CronSchedule("30 * * * *", "Europe/Berlin")
    slots, _ = hourly.due(ms("2026-10-25T00:00:00+00:00"), ms("2026-10-25T02:00:00+00:00"), 0, 10)
    assert [iso(s) for s in slots] == [
        "2026-10-25T00:30:00+00:00",  # 02:30 CEST
        "2026-10-25T01:30:00+00:00",  # 02:30 CET
    ]


def test_due_returns_the_newest_slots_and_says_when_older_ones_were_left_out() -> None:
    minutely = CronSchedule("* * * * *")
    start = ms("2026-01-01T00:00:00")
    slots, truncated = minutely.due(start, start + 10 * 60_000, 0, 3)
    assert slots == [start + 8 * 60_000, start + 9 * 60_000, start + 10 * 60_000]
    assert truncated
    assert minutely.due(start, start + 3 * 60_000, 0, 3) == ([start + k * 60_000 for k in (1, 2, 3)], False)
    assert minutely.due(start, start, 0, 3) == ([], False)


def test_six_fields_give_seconds() -> None:
    every_ten = CronSchedule("*/10 * * * * *")
    start = ms("2026-01-01T00:00:00")
    assert every_ten.next_after(start, 0) == start + 10_000


def test_every_counts_from_its_anchor_or_else_the_jobs_origin() -> None:
    origin = ms("2026-01-01T00:00:00")
    hourly = EverySchedule(3_600_000)
    assert hourly.next_after(origin, origin) == origin + 3_600_000
    assert hourly.next_after(origin + 10, origin) == origin + 3_600_000
    anchored = EverySchedule(3_600_000, anchor_ms=origin + 60_000)
    assert anchored.next_after(origin, origin + 999) == origin + 60_000
    slots, truncated = hourly.due(origin, origin + 5 * 3_600_000 + 5, origin, 2)
    assert slots == [origin + 4 * 3_600_000, origin + 5 * 3_600_000] and truncated


def test_at_is_one_instant_utc_unless_it_names_an_offset() -> None:
    assert AtSchedule("2026-12-24T18:00:00+01:00").at_ms == ms("2026-12-24T17:00:00")
    assert AtSchedule("2026-12-24T18:00:00").at_ms == ms("2026-12-24T18:00:00")
    once = AtSchedule("2026-12-24T18:00:00Z")
    assert once.next_after(once.at_ms - 1, 0) == once.at_ms
    assert once.next_after(once.at_ms, 0) is None
    assert once.due(once.at_ms - 1, once.at_ms, 0, 5) == ([once.at_ms], False)


def test_the_wire_shape_round_trips() -> None:
    for wire in (
        {"kind": "cron", "expr": "0 8 * * 1-5", "tz": "Europe/Berlin"},
        {"kind": "every", "everyMs": 60_000},
        {"kind": "every", "everyMs": 60_000, "anchorMs": 5},
        {"kind": "at", "at": "2026-12-24T18:00:00+01:00"},
    ):
        assert parse_schedule(wire).wire() == wire


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        ({"kind": "cron", "expr": "61 * * * *"}, "schedule.expr"),
        ({"kind": "cron", "expr": "* * *"}, "schedule.expr"),
        ({"kind": "cron", "expr": "0 8 * * *", "tz": "Mars/Olympus"}, "unknown time zone"),
        ({"kind": "cron", "expr": "0 8 * * *", "staggerMs": 5000}, "staggerMs"),
        ({"kind": "every", "everyMs": 500}, "at least 1000"),
        ({"kind": "every", "everyMs": "60000"}, "must be an integer"),
        ({"kind": "at", "at": "next tuesday"}, "not an ISO 8601"),
        ({"kind": "on-exit", "command": "make"}, "not supported by this gateway"),
        ({"kind": "every", "everyMs": 60_000, "bogus": 1}, "schedule.bogus"),
        ("hourly", "must be an object"),
    ],
)
def test_a_schedule_the_gateway_cannot_run_is_refused_naming_the_field(wire: object, message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        parse_schedule(wire)
