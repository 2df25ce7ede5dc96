"""Rate-limit buckets: header parsing, waiting on a spent bucket, pauses after a 429."""

from __future__ import annotations

import asyncio

import pytest

from bindings.ratelimit import RateLimiter, RateLimitInfo, parse_discord_rate_limit, parse_slack_rate_limit


class FakeTime:
    """A clock that only moves when someone sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def test_parse_discord_headers_and_body() -> None:
    headers = {
        "x-ratelimit-limit": "5",
        "x-ratelimit-remaining": "0",
        "x-ratelimit-reset-after": "1.25",
        "x-ratelimit-bucket": "abcd",
    }
    info = parse_discord_rate_limit(200, headers)
    assert info == RateLimitInfo(bucket="abcd", limit=5, remaining=0, reset_after=1.25)
    limited = parse_discord_rate_limit(
        429,
        {**headers, "retry-after": "2", "x-ratelimit-scope": "user"},
        {"retry_after": 0.42, "global": False},
    )
    assert limited.retry_after == 0.42 and not limited.is_global
    globally = parse_discord_rate_limit(429, {"x-ratelimit-global": "true", "retry-after": "3"}, None)
    assert globally.retry_after == 3.0 and globally.is_global
    assert parse_discord_rate_limit(429, {}, {"retry_after": 0}).retry_after == pytest.approx(0.05)


def test_parse_slack() -> None:
    assert parse_slack_rate_limit(200, {"retry-after": "9"}) == RateLimitInfo()
    assert parse_slack_rate_limit(429, {"retry-after": "30"}).retry_after == 30.0
    assert parse_slack_rate_limit(429, {}).retry_after == 1.0


async def test_a_spent_bucket_waits_for_its_reset() -> None:
    t = FakeTime()
    limiter = RateLimiter(clock=t.clock, sleep=t.sleep)
    async with limiter.route("POST /x", "1") as gate:
        await gate.wait()
        gate.observe(RateLimitInfo(bucket="b", limit=2, remaining=1, reset_after=2.0))
    async with limiter.route("POST /x", "1") as gate:
        await gate.wait()  # the one remaining request
        assert t.slept == []
    async with limiter.route("POST /x", "1") as gate:
        await gate.wait()
    assert t.slept == [pytest.approx(2.0)]
    async with limiter.route("POST /x", "2") as gate:
        await gate.wait()  # another major parameter is another bucket
    assert len(t.slept) == 1


async def test_routes_sharing_a_bucket_share_its_budget() -> None:
    t = FakeTime()
    limiter = RateLimiter(clock=t.clock, sleep=t.sleep)
    async with limiter.route("A", "1") as gate:
        await gate.wait()
        gate.observe(RateLimitInfo(bucket="shared", remaining=1, reset_after=1.0))
    async with limiter.route("B", "1") as gate:
        await gate.wait()  # B learns its bucket from this answer
        gate.observe(RateLimitInfo(bucket="shared", remaining=0, reset_after=1.0))
    async with limiter.route("A", "1") as gate:
        await gate.wait()  # B spent the shared budget
    assert t.slept == [pytest.approx(1.0)]


async def test_429_pauses_the_bucket_and_global_pauses_everything() -> None:
    t = FakeTime()
    limiter = RateLimiter(clock=t.clock, sleep=t.sleep)
    async with limiter.route("A") as gate:
        await gate.wait()
        gate.observe(RateLimitInfo(retry_after=0.5))
        assert limiter.pause_remaining("A") == pytest.approx(0.5)
        assert limiter.pause_remaining("B") == 0.0
        await gate.wait()
    assert t.slept == [pytest.approx(0.5)]
    async with limiter.route("A") as gate:
        await gate.wait()
        gate.observe(RateLimitInfo(retry_after=3.0, is_global=True))
    assert limiter.pause_remaining("B", "x") == pytest.approx(3.0)
    assert limiter.throttled == 2


async def test_requests_on_one_route_run_in_order_one_at_a_time() -> None:
    limiter = RateLimiter()
    order: list[int] = []
    active = 0

    async def request(i: int) -> None:
        nonlocal active
        async with limiter.route("POST /m", "c") as gate:
            await gate.wait()
            active += 1
            assert active == 1
            await asyncio.sleep(0.01)
            order.append(i)
            active -= 1

    await asyncio.gather(*(request(i) for i in range(5)))
    assert order == list(range(5))
    assert limiter._locks == {}, "idle route locks are dropped"
