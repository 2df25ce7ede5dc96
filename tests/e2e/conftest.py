from collections.abc import AsyncIterator

import pytest

from tests.daemon import daemon  # noqa: F401  (fixture)
from tests.e2e.helpers import Raw


@pytest.fixture(autouse=True)
async def _drop_raw_connections() -> AsyncIterator[None]:
    """Raw WebSocket connections a test left open (a failed assertion) do not outlive it."""
    yield
    Raw.drop_leftovers()
