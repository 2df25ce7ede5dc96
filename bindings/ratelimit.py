"""Rate-limit buckets for a platform's HTTP API.

A *route* is what the caller names (`"POST /channels/{channel_id}/messages"` plus the major
parameter, the channel id). Requests on one route run one at a time, in the order they asked,
which also keeps the chunks of a reply in order. Each route maps to a *bucket*: on Discord the
`X-RateLimit-Bucket` hash the server reports (several routes may share one) plus the major
parameter; on Slack the method plus, for posting, the channel. Until the server names a bucket,
a route is its own bucket.

The limiter learns from every response (`observe`):

- `remaining`/`reset_after` (Discord `X-RateLimit-*`): when the bucket is spent, the next request
  waits for the reset;
- a 429 (`retry_after` in Discord's body, or the `Retry-After` header on both platforms): the
  bucket (or, for Discord's global limit, every bucket) pauses for that long, and the caller
  retries the same request after the pause. A 429 never drops the request.

State lives as long as the limiter (one per binding). Buckets whose reset has passed are pruned
once there are more than `max_buckets`; idle route locks are dropped as soon as no one holds or
waits for them, so neither map grows with the number of channels ever seen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

MIN_RETRY_AFTER_S = 0.05
"""A 429 without a usable delay still waits this long, so a misbehaving server cannot make us
spin."""


@dataclass(frozen=True, kw_only=True)
class RateLimitInfo:
    """What one response says about rate limits. All times in seconds."""

    bucket: str | None = None
    limit: int | None = None
    remaining: int | None = None
    reset_after: float | None = None
    retry_after: float | None = None
    """Set on a 429: how long to pause before retrying."""
    is_global: bool = False
    scope: str | None = None


def _float(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def parse_discord_rate_limit(status: int, headers: Mapping[str, str], body: Any = None) -> RateLimitInfo:
    """Read Discord's `X-RateLimit-*` headers, and on a 429 the `retry_after` of the JSON body
    (seconds, fractional), falling back to `Retry-After`."""
    retry_after: float | None = None
    is_global = headers.get("x-ratelimit-global", "").lower() == "true"
    if status == 429:
        if isinstance(body, dict):
            retry_after = _float(body.get("retry_after"))
            is_global = is_global or bool(body.get("global"))
        if retry_after is None:
            retry_after = _float(headers.get("retry-after"))
        retry_after = max(retry_after or 0.0, MIN_RETRY_AFTER_S)
    scope = headers.get("x-ratelimit-scope")
    return RateLimitInfo(
        bucket=headers.get("x-ratelimit-bucket"),
        limit=_int(headers.get("x-ratelimit-limit")),
        remaining=_int(headers.get("x-ratelimit-remaining")),
        reset_after=_float(headers.get("x-ratelimit-reset-after")),
        retry_after=retry_after,
        is_global=is_global or scope == "global",
        scope=scope,
    )


def parse_slack_rate_limit(status: int, headers: Mapping[str, str]) -> RateLimitInfo:
    """Slack reports only throttling: HTTP 429 with `Retry-After` in whole seconds."""
    if status != 429:
        return RateLimitInfo()
    retry_after = max(_float(headers.get("retry-after")) or 1.0, MIN_RETRY_AFTER_S)
    return RateLimitInfo(retry_after=retry_after)


@dataclass
class _Bucket:
    remaining: int | None = None
    reset_at: float = 0.0
    paused_until: float = 0.0


@dataclass
class _RouteLock:
    lock: asyncio.Lock
    users: int = 0


class RouteGate:
    """A caller's exclusive turn on one route (see `RateLimiter.route`)."""

    def __init__(self, limiter: RateLimiter, route: str, major: str) -> None:
        self._limiter = limiter
        self._route = route
        self._major = major

    async def wait(self) -> None:
        """Sleep until the bucket and the global limit allow one request, and count it."""
        await self._limiter._wait(self._route, self._major)

    def observe(self, info: RateLimitInfo) -> None:
        """Learn from the response to the request just made."""
        self._limiter._observe(self._route, self._major, info)


class RateLimiter:
    """Per-route buckets with pauses. `clock` and `sleep` are the seams tests replace."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        max_buckets: int = 1024,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self._max_buckets = max_buckets
        self._bucket_of_route: dict[str, str] = {}
        self._buckets: dict[str, _Bucket] = {}
        self._locks: dict[str, _RouteLock] = {}
        self._global_until = 0.0
        self.waits = 0
        """How many times a request had to wait (observable for tests and status)."""
        self.throttled = 0
        """How many 429 answers were seen."""

    @asynccontextmanager
    async def route(self, route: str, major: str = "") -> AsyncIterator[RouteGate]:
        """Hold the route `route` (with major parameter `major`) for one request and its
        retries. Call `gate.wait()` before each attempt and `gate.observe(...)` after it."""
        name = f"{route}|{major}"
        entry = self._locks.get(name)
        if entry is None:
            entry = self._locks[name] = _RouteLock(asyncio.Lock())
        entry.users += 1
        try:
            async with entry.lock:
                yield RouteGate(self, route, major)
        finally:
            entry.users -= 1
            if entry.users == 0:
                self._locks.pop(name, None)

    def pause_remaining(self, route: str, major: str = "") -> float:
        """Seconds until `route` may send again (0 when it may now)."""
        now = self._clock()
        bucket = self._buckets.get(self._bucket_key(route, major))
        until = self._global_until
        if bucket is not None:
            until = max(until, bucket.paused_until)
            if bucket.remaining == 0:
                until = max(until, bucket.reset_at)
        return max(0.0, until - now)

    def _bucket_key(self, route: str, major: str) -> str:
        return f"{self._bucket_of_route.get(route, route)}|{major}"

    async def _wait(self, route: str, major: str) -> None:
        while True:
            delay = self.pause_remaining(route, major)
            if delay <= 0:
                break
            self.waits += 1
            await self._sleep(delay)
        bucket = self._buckets.get(self._bucket_key(route, major))
        if bucket is not None and bucket.remaining is not None:
            if self._clock() >= bucket.reset_at:
                bucket.remaining = None
            else:
                bucket.remaining = max(0, bucket.remaining - 1)

    def _observe(self, route: str, major: str, info: RateLimitInfo) -> None:
        now = self._clock()
        if info.bucket:
            self._bucket_of_route[route] = info.bucket
        key = self._bucket_key(route, major)
        bucket = self._buckets.get(key)
        if bucket is None:
            self._prune(now)
            bucket = self._buckets[key] = _Bucket()
        if info.remaining is not None:
            bucket.remaining = info.remaining
            bucket.reset_at = now + (info.reset_after or 0.0)
        if info.retry_after is not None:
            self.throttled += 1
            until = now + info.retry_after
            if info.is_global:
                self._global_until = max(self._global_until, until)
            else:
                bucket.paused_until = max(bucket.paused_until, until)

    def _prune(self, now: float) -> None:
        if len(self._buckets) < self._max_buckets:
            return
        for key in [k for k, b in self._buckets.items() if b.paused_until <= now and b.reset_at <= now]:
            del self._buckets[key]
