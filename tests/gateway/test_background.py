"""Background tasks: a failure is logged with its owner, cancellation is not a failure, and the
owner ends what is still running."""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from gateway.background import Background


async def test_a_task_that_raises_is_logged_with_its_owner_and_name() -> None:
    tasks = Background("the hub")

    async def broken() -> None:
        raise ValueError("boom")

    with capture_logs() as logs:
        tasks.spawn(broken(), name="replay-1")
        await tasks.join()
    [record] = logs
    assert record["event"] == "background task failed" and record["log_level"] == "error"
    assert record["owner"] == "the hub" and record["task"] == "replay-1"
    assert isinstance(record["exc_info"], ValueError)
    assert tasks.failures == 1 and len(tasks) == 0


async def test_an_adopted_task_is_watched_too() -> None:
    tasks = Background("state")

    async def broken() -> None:
        raise KeyError("k")

    with capture_logs() as logs:
        tasks.adopt(asyncio.ensure_future(broken()))
        await tasks.join()
    assert [r["event"] for r in logs] == ["background task failed"]


async def test_aclose_cancels_running_tasks_without_calling_it_a_failure() -> None:
    tasks = Background("outlet")
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    task = tasks.spawn(forever(), name="forever")
    await started.wait()
    with capture_logs() as logs:
        await tasks.aclose()
    assert task.cancelled() and logs == [] and tasks.failures == 0 and len(tasks) == 0
