"""The front door's bookkeeping: per-address quota, byte budget, deadline, counters."""

from __future__ import annotations

import pytest

from gateway.door import Door, DoorSettings


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_address_holds_at_most_its_quota_of_unauthenticated_connections() -> None:
    door = Door(DoorSettings(max_per_address=2), clock=Clock())
    first, second = door.admit("10.0.0.1"), door.admit("10.0.0.1")
    assert first is not None and second is not None
    assert door.admit("10.0.0.1") is None  # over the quota
    assert door.admit("10.0.0.2") is not None  # other addresses are unaffected
    first.release()
    first.release()  # idempotent: gives back one place only
    assert door.pending("10.0.0.1") == 1
    assert door.admit("10.0.0.1") is not None
    assert door.snapshot()["refusedOverQuota"] == 1


def test_the_byte_budget_counts_every_byte_read() -> None:
    door = Door(DoorSettings(preauth_max_bytes=100), clock=Clock())
    door_pass = door.admit("a")
    assert door_pass is not None
    assert door_pass.spend(60) and door_pass.spend(40)
    assert not door_pass.spend(1)
    assert door.over_budget == 1


def test_the_deadline_runs_from_admission() -> None:
    clock = Clock()
    door = Door(DoorSettings(handshake_timeout_s=10), clock=clock)
    door_pass = door.admit("a")
    assert door_pass is not None and door_pass.remaining_s() == 10
    clock.now += 7
    assert door_pass.remaining_s() == pytest.approx(3)
    clock.now += 5
    assert door_pass.remaining_s() == 0
    door_pass.expired()
    assert door.timed_out == 1 and door.pending() == 0 and door.snapshot()["addresses"] == 0


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        DoorSettings(max_per_address=0)
    with pytest.raises(ValueError):
        DoorSettings(handshake_timeout_s=0)
