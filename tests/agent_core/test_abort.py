"""AbortController / AbortSignal: a one-shot latch that crosses tasks."""

from __future__ import annotations

import asyncio

import pytest

from agent_core import AbortController, AbortError, AbortSignal


def test_abort_latches_once_with_its_reason_and_runs_listeners_once() -> None:
    controller = AbortController()
    calls: list[str] = []
    controller.signal.add_listener(lambda: calls.append("a"))
    remove = controller.signal.add_listener(lambda: calls.append("removed"))
    remove()
    remove()
    assert not controller.signal.aborted
    controller.abort("first")
    controller.abort("second")
    assert controller.signal.aborted and controller.signal.reason == "first"
    assert calls == ["a"]


def test_default_reason_and_listener_after_abort_runs_at_once() -> None:
    controller = AbortController()
    controller.abort()
    assert controller.signal.reason == "This operation was aborted"
    calls: list[str] = []
    controller.signal.add_listener(lambda: calls.append("late"))
    assert calls == ["late"]


def test_throw_if_aborted_uses_the_reason_text() -> None:
    controller = AbortController()
    controller.signal.throw_if_aborted()
    controller.abort(ValueError("user pressed stop"))
    with pytest.raises(AbortError, match="user pressed stop"):
        controller.signal.throw_if_aborted()


async def test_wait_returns_once_another_task_aborts() -> None:
    controller = AbortController()
    waiter = asyncio.ensure_future(controller.signal.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    asyncio.get_running_loop().call_soon(controller.abort, "stop")
    async with asyncio.timeout(1):
        await waiter
    await controller.signal.wait()  # already aborted: returns at once


def test_any_follows_the_first_signal_to_abort() -> None:
    first, second = AbortController(), AbortController()
    combined = AbortSignal.any(first.signal, None, second.signal)
    assert not combined.aborted
    second.abort("second")
    first.abort("first")
    assert combined.aborted and combined.reason == "second"
    done = AbortController()
    done.abort("already")
    assert AbortSignal.any(done.signal).reason == "already"
