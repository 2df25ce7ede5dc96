"""Fixtures every binding test may ask for: the in-memory host and an httpx client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.bindings.memory_host import MemoryHost


@pytest.fixture
def host() -> MemoryHost:
    return MemoryHost()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5.0) as client:
        yield client
