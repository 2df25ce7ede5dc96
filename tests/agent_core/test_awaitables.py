"""`maybe_await`: the public helper for callables that may be sync or async."""

from __future__ import annotations

import asyncio

import agent_core
from agent_core import maybe_await


async def test_plain_values_come_back_as_they_are() -> None:
    value = ["not", "awaitable"]
    assert await maybe_await(value) is value
    assert await maybe_await(0) == 0


async def test_coroutines_and_futures_are_awaited() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert await maybe_await(answer()) == 42
    future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    future.set_result("ready")
    assert await maybe_await(future) == "ready"


def test_it_is_part_of_the_public_surface() -> None:
    assert {"maybe_await", "MaybeAwaitable", "AgentOptions"} <= set(agent_core.__all__)
