"""Fixtures of the provider tests: a scripted LLM server on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from agent_core import models
from agent_core.providers._common import running_producers
from tests.agent_core.providers.llm_server import LLMServer


@pytest.fixture
async def llm_server() -> AsyncIterator[LLMServer]:
    server = LLMServer()
    await server.start()
    try:
        yield server
    finally:
        await server.aclose()


@pytest.fixture
def clean_catalogue() -> Iterator[None]:
    """Models a test registers are forgotten afterwards."""
    models.reset_models()
    try:
        yield
    finally:
        models.reset_models()


@pytest.fixture(autouse=True)
async def _no_stream_left_running() -> AsyncIterator[None]:
    """Every provider stream a test starts has finished producing when the test ends."""
    yield
    for _ in range(100):
        if running_producers() == 0:
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"{running_producers()} provider stream(s) still running after the test")
