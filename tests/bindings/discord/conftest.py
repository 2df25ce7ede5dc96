from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.bindings.memory_host import MemoryHost
from tests.bindings.standins.discord import DiscordStandIn


@pytest.fixture
def host() -> MemoryHost:
    return MemoryHost()


@pytest.fixture
async def discord() -> AsyncIterator[DiscordStandIn]:
    async with DiscordStandIn() as standin:
        yield standin


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5.0) as client:
        yield client
