from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.bindings.standins.discord import DiscordStandIn


@pytest.fixture
async def discord() -> AsyncIterator[DiscordStandIn]:
    async with DiscordStandIn() as standin:
        yield standin
