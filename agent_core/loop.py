"""The agent loop (placeholder until the loop lands)."""

from __future__ import annotations

from typing import Any


async def run_agent_loop(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError


async def run_agent_loop_continue(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError


def agent_loop(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError


def agent_loop_continue(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError
