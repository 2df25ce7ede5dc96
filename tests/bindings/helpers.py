"""Small helpers shared by the bindings' tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from bindings.base import ChatBinding
from bindings.host import InboundMessage
from bindings.state import ConnectionState
from tests.bindings.memory_host import MemoryHost


async def wait_until(predicate: Callable[[], object], timeout: float = 5.0, interval: float = 0.01) -> None:
    """Poll `predicate` until it is truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)


def account_settings(api_base_url: str, **settings: Any) -> dict[str, Any]:
    """An account config's fields for a binding test: the stand-in's API, open groups, no
    mention needed, quick edits; `settings` override them."""
    values: dict[str, Any] = {
        "api_base_url": api_base_url,
        "group_policy": "open",
        "require_mention": False,
        "edit_interval_s": 0.2,
    }
    values.update(settings)
    return values


async def ready(binding: ChatBinding[Any, Any]) -> None:
    """Wait (at most 5 s) until `binding` is ready."""
    async with asyncio.timeout(5):
        await binding.wait_for_state(ConnectionState.READY)


async def stream_reply(
    binding: ChatBinding[Any, Any], host: MemoryHost, inbound: InboundMessage, parts: list[str]
) -> str:
    """Stream a reply to `inbound` that grows by one of `parts` per delta, then finish it; returns
    the whole text once the relay has delivered it."""
    run_id = host.results[inbound.idempotency_key].run_id
    assert run_id is not None
    text = ""
    for part in parts:
        text += part
        host.emit(inbound.session_key, run_id, "delta", text)
        await asyncio.sleep(0.03)
    host.emit(inbound.session_key, run_id, "final", text)
    await wait_until(lambda: binding.relay.active_streams == 0)
    return text
