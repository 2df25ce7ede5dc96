"""`gateway.automation.store`: jobs, pruned run history, webhook deliveries seen (SQLite, and
PostgreSQL when configured)."""

from __future__ import annotations

import pytest

from gateway.automation import DuplicateDelivery, JobNotFound
from gateway.automation.jobs import new_job
from gateway.automation.store import AutomationStore
from sessions.store import Store
from tests.sessions.conftest import store, store_url

__all__ = ["store", "store_url"]

T0 = 1_800_000_000_000


class Clock:
    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> int:
        return self.ms


def a_job(job_id: str = "j1"):  # type: ignore[no-untyped-def]
    spec = {
        "name": f"job {job_id}",
        "schedule": {"kind": "every", "everyMs": 60_000},
        "payload": {"kind": "agentTurn", "message": "hi"},
        "delivery": {"mode": "announce", "channel": "slack", "to": "C1"},
    }
    return new_job(spec, job_id=job_id, now_ms=T0, default_agent="main")


async def test_jobs_round_trip_and_removing_one_takes_its_runs(store: Store) -> None:
    automation = AutomationStore(store.database, clock=Clock())
    job = a_job()
    await automation.add_job(job)
    assert await automation.get_job("j1") == job
    assert [j.id for j in await automation.jobs()] == ["j1"]
    async with store.database.write() as conn:
        await automation.run_claim(
            job_id="j1", run_id="r1", slot_ms=T0 + 60_000, trigger="schedule", session_key="k"
        )(conn)
    assert await automation.cursors() == {"j1": T0 + 60_000}
    assert await automation.remove_job("j1")
    assert not await automation.remove_job("j1")
    assert await automation.run_views(job_id="j1") == []
    with pytest.raises(JobNotFound):
        await automation.get_job("j1")
    with pytest.raises(JobNotFound):
        await automation.save_job(job)


async def test_pruning_keeps_the_newest_runs_and_the_schedule_cursor(store: Store) -> None:
    clock = Clock()
    automation = AutomationStore(store.database, clock=clock)
    await automation.add_job(a_job())
    async with store.database.write() as conn:
        for minute in range(1, 11):
            clock.ms = T0 + minute * 1000
            # Slots fired in a different order than their times (a catch-up): the newest slot is
            # not among the newest rows, and must stay.
            slot = T0 + (60 if minute == 1 else minute) * 60_000
            await automation.run_claim(
                job_id="j1", run_id=f"r{minute}", slot_ms=slot, trigger="schedule", session_key="k"
            )(conn)
        await automation.run_claim(
            job_id="j1", run_id="manual", slot_ms=None, trigger="manual", session_key="k"
        )(conn)
    assert await automation.prune_runs(keep=3) > 0
    kept = {view.id for view in await automation.run_views(job_id="j1")}
    assert kept == {"manual", "r10", "r9", "r1"}
    assert await automation.cursors() == {"j1": T0 + 60 * 60_000}


async def test_a_delivery_id_or_signature_seen_before_is_a_duplicate_until_it_expires(store: Store) -> None:
    clock = Clock()
    automation = AutomationStore(store.database, clock=clock)
    async with store.database.write() as conn:
        await automation.delivery_claim("ci", [("id:d1", T0 + 1000), ("sig:aa", T0 + 500)], "run-1")(conn)
    with pytest.raises(DuplicateDelivery):
        async with store.database.write() as conn:
            await automation.delivery_claim("ci", [("id:d2", T0 + 1000), ("sig:aa", T0 + 500)], "run-2")(conn)
    # The refused claim wrote nothing: its own new key is still free.
    assert await automation.delivery_run("ci", ["id:d2"]) is None
    assert await automation.delivery_run("ci", ["id:d1"]) == "run-1"
    assert await automation.delivery_run("other", ["id:d1"]) is None
    clock.ms = T0 + 600
    assert await automation.sweep_deliveries() == 1  # the signature outlived the window
    async with store.database.write() as conn:
        await automation.delivery_claim("ci", [("sig:aa", T0 + 2000)], "run-3")(conn)
    assert await automation.delivery_run("ci", ["sig:aa"]) == "run-3"
