from __future__ import annotations

import asyncio
import gc
import random
import weakref
from collections.abc import Awaitable, Callable

import pytest

from sessions.errors import LaneFull, Unavailable
from sessions.lane import LaneRegistry, RunLimiter, SessionLane


async def settle() -> None:
    """Let every ready callback and task step run."""
    for _ in range(10):
        await asyncio.sleep(0)


class Tracker:
    """Records which operations run, and fails the test if two ever overlap."""

    def __init__(self) -> None:
        self.running = 0
        self.started: list[int] = []
        self.gates: dict[int, asyncio.Event] = {}

    def op(self, n: int, *, gated: bool = False, fail: bool = False) -> Callable[[], Awaitable[int]]:
        if gated:
            self.gates[n] = asyncio.Event()

        async def operation() -> int:
            assert self.running == 0, "two operations overlapped"
            self.running += 1
            self.started.append(n)
            try:
                if n in self.gates:
                    await self.gates[n].wait()
                await asyncio.sleep(0)
                if fail:
                    raise RuntimeError(f"op {n} failed")
                return n * 10
            finally:
                self.running -= 1

        return operation


async def test_operations_run_one_at_a_time_in_arrival_order() -> None:
    lane = SessionLane()
    tracker = Tracker()
    tasks = [asyncio.create_task(lane.run(tracker.op(n))) for n in range(20)]
    await settle()
    assert lane.depth == 20 - len([t for t in tasks if t.done()])
    assert await asyncio.gather(*tasks) == [n * 10 for n in range(20)]
    assert tracker.started == list(range(20))
    assert lane.depth == 0


async def test_a_failure_goes_to_its_caller_only() -> None:
    lane = SessionLane()
    tracker = Tracker()
    results = await asyncio.gather(
        lane.run(tracker.op(1)),
        lane.run(tracker.op(2, fail=True)),
        lane.run(tracker.op(3)),
        return_exceptions=True,
    )
    assert results[0] == 10 and results[2] == 30
    assert isinstance(results[1], RuntimeError)
    assert tracker.started == [1, 2, 3]


async def test_cancelling_a_waiting_caller_drops_its_operation() -> None:
    lane = SessionLane()
    tracker = Tracker()
    first = asyncio.create_task(lane.run(tracker.op(1, gated=True)))
    second = asyncio.create_task(lane.run(tracker.op(2)))
    third = asyncio.create_task(lane.run(tracker.op(3)))
    await settle()
    assert lane.depth == 3
    second.cancel()
    await settle()
    assert second.cancelled()
    assert lane.depth == 2
    assert tracker.started == [1]  # the third still waits for the first
    tracker.gates[1].set()
    assert await first == 10
    assert await third == 30
    assert tracker.started == [1, 3]


async def test_cancelling_the_running_caller_cancels_its_operation() -> None:
    lane = SessionLane()
    tracker = Tracker()
    cancelled = asyncio.Event()

    async def long_op() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    running = asyncio.create_task(lane.run(long_op))
    after = asyncio.create_task(lane.run(tracker.op(2)))
    await settle()
    running.cancel()
    assert await after == 20
    assert cancelled.is_set() and running.cancelled()


async def test_random_cancellations_never_break_order_or_exclusion() -> None:
    rng = random.Random(7)
    lane = SessionLane(max_depth=1000)
    tracker = Tracker()
    tasks = []
    for n in range(300):
        tasks.append(asyncio.create_task(lane.run(tracker.op(n))))
        if rng.random() < 0.3:
            await asyncio.sleep(0)
        if rng.random() < 0.3:
            rng.choice(tasks).cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    ran = [n for n, task in enumerate(tasks) if not task.cancelled()]
    assert tracker.started == sorted(tracker.started)
    assert set(ran) <= set(tracker.started)
    assert lane.depth == 0


async def test_a_full_lane_refuses_with_a_retryable_error() -> None:
    lane = SessionLane(max_depth=3, retry_after_ms=250)
    tracker = Tracker()
    tasks = [asyncio.create_task(lane.run(tracker.op(1, gated=True)))]
    tasks += [asyncio.create_task(lane.run(tracker.op(n))) for n in (2, 3)]
    await settle()
    with pytest.raises(LaneFull) as info:
        await lane.run(tracker.op(4))
    assert isinstance(info.value, Unavailable)
    assert info.value.retryable and info.value.retry_after_ms == 250
    tracker.gates[1].set()
    await asyncio.gather(*tasks)
    assert await lane.run(tracker.op(5)) == 50
    assert tracker.started == [1, 2, 3, 5]


async def test_a_drained_lane_holds_no_references() -> None:
    class Result:
        pass

    lane = SessionLane()
    refs: list[weakref.ref[object]] = []
    gate = asyncio.Event()

    def make(fail: bool) -> Callable[[], Awaitable[Result]]:
        async def op() -> Result:
            await gate.wait()
            if fail:
                raise ValueError("boom")
            result = Result()
            refs.append(weakref.ref(result))
            return result

        refs.append(weakref.ref(op))
        return op

    tasks = [asyncio.create_task(lane.run(make(fail=n % 3 == 0))) for n in range(9)]
    await settle()
    assert lane._tail is not None
    refs.append(weakref.ref(lane._tail))
    gate.set()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert sum(isinstance(o, ValueError) for o in outcomes) == 3
    del tasks, outcomes
    await settle()
    gc.collect()
    assert lane._tail is None
    assert lane.depth == 0
    assert [ref for ref in refs if ref() is not None] == []


async def test_registry_shares_a_lane_while_busy_and_drops_it_when_idle() -> None:
    registry = LaneRegistry()
    tracker = Tracker()
    first = asyncio.create_task(registry.run("s1", tracker.op(1, gated=True)))
    await settle()
    lane = registry.lane("s1")
    assert registry.lane("s1") is lane
    second = asyncio.create_task(lane.run(tracker.op(2)))
    await settle()
    assert registry.depths() == {"s1": 2}
    assert (registry.depth("s1"), registry.depth("other")) == (2, 0)
    del lane
    tracker.gates[1].set()
    await asyncio.gather(first, second)
    assert tracker.started == [1, 2]
    assert len(registry) == 0
    assert registry.depths() == {}
    assert registry.depth("s1") == 0


async def test_changing_the_registry_depth_reaches_busy_lanes_and_new_ones() -> None:
    registry = LaneRegistry(max_depth=1)
    tracker = Tracker()
    busy = asyncio.create_task(registry.run("s1", tracker.op(1, gated=True)))
    await settle()
    with pytest.raises(LaneFull):
        await registry.run("s1", tracker.op(2))
    registry.max_depth = 2  # the lane of s1 is alive and keeps its place in the registry
    waiting = asyncio.create_task(registry.run("s1", tracker.op(3)))
    await settle()
    assert registry.depth("s1") == 2
    with pytest.raises(LaneFull):
        await registry.run("s1", tracker.op(4))
    assert registry.lane("s2").max_depth == 2
    registry.max_depth = 1  # what the lane holds finishes; only later operations are refused
    with pytest.raises(LaneFull):
        await registry.run("s1", tracker.op(5))
    tracker.gates[1].set()
    await asyncio.gather(busy, waiting)
    assert tracker.started == [1, 3]
    with pytest.raises(ValueError):
        registry.max_depth = 0


async def test_lanes_of_idle_sessions_do_not_accumulate() -> None:
    registry = LaneRegistry()
    gate = asyncio.Event()

    async def op() -> None:
        await gate.wait()

    tasks = [asyncio.create_task(registry.run(f"session-{n}", op)) for n in range(10_000)]
    await settle()
    assert len(registry) == 10_000
    assert len(registry.depths()) == 10_000
    gate.set()
    await asyncio.gather(*tasks)
    del tasks
    assert len(registry) == 0  # gone as soon as idle, without waiting for the cycle collector
    assert registry.depths() == {}


async def test_run_limiter_caps_concurrency_in_fifo_order() -> None:
    limiter = RunLimiter(2)
    order: list[int] = []
    peak = 0
    gate = asyncio.Event()

    async def run(n: int) -> None:
        nonlocal peak
        async with limiter.slot():
            order.append(n)
            peak = max(peak, limiter.active)
            await gate.wait()

    tasks = []
    for n in range(6):
        tasks.append(asyncio.create_task(run(n)))
        await settle()
    assert (limiter.active, limiter.waiting) == (2, 4)
    gate.set()
    await asyncio.gather(*tasks)
    assert order == list(range(6))
    assert peak == 2
    assert (limiter.active, limiter.waiting) == (0, 0)


async def test_run_limiter_handles_cancelled_waiters_and_limit_changes() -> None:
    limiter = RunLimiter(1)
    await limiter.acquire()
    waiter = asyncio.create_task(limiter.acquire())
    behind = asyncio.create_task(limiter.acquire())
    await settle()
    assert limiter.waiting == 2
    waiter.cancel()
    await settle()
    assert limiter.waiting == 1
    limiter.release()
    await settle()
    assert behind.done() and limiter.active == 1  # the slot skipped the cancelled waiter

    # A waiter cancelled just as the slot reaches it hands the slot on.
    granted_then_cancelled = asyncio.create_task(limiter.acquire())
    last = asyncio.create_task(limiter.acquire())
    await settle()
    limiter.release()
    granted_then_cancelled.cancel()
    await settle()
    assert granted_then_cancelled.cancelled()
    assert last.done() and limiter.active == 1

    more = [asyncio.create_task(limiter.acquire()) for _ in range(2)]
    await settle()
    limiter.limit = 3
    await settle()
    assert all(t.done() for t in more) and limiter.active == 3
    for _ in range(3):
        limiter.release()
    with pytest.raises(RuntimeError):
        limiter.release()
    async with limiter:
        assert limiter.active == 1
