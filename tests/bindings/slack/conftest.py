from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.bindings.standins.slack import SlackStandIn


@pytest.fixture
async def slack() -> AsyncIterator[SlackStandIn]:
    async with SlackStandIn() as standin:
        yield standin
