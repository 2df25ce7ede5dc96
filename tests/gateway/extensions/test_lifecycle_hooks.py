"""Run and message hooks get the committed session events, in order, contained; a backlog beyond
the queue is dropped and counted, never waited for."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.extensions import lifecycle_hooks
from gateway.extensions.extension_api import MessageEnd, Registrations, RunEnd, RunStart
from gateway.extensions.lifecycle_hooks import LifecycleHooks, lifecycle_event
from sessions import SessionEvent
from sessions.event_payloads import AgentFinished, AgentStarted, MessageCompleted, TurnStarted
from sessions.termination import TerminationReason


def event(data: Any, seq: int = 1) -> SessionEvent:
    return SessionEvent(session_id="s1", seq=seq, data=data, run_id="r1", session_key="agent:main:main")


def finished() -> AgentFinished:
    return AgentFinished(
        termination_reason=TerminationReason.NO_TOOL_CALLS, total_turns=1, total_tokens=3, duration_ms=5
    )


def test_only_run_and_message_events_become_hook_events() -> None:
    assert lifecycle_event(event(AgentStarted())) == RunStart(
        session_id="s1", session_key="agent:main:main", run_id="r1"
    )
    end = lifecycle_event(event(finished()))
    assert isinstance(end, RunEnd) and end.termination_reason == "no_tool_calls"
    message = lifecycle_event(event(MessageCompleted(message_id="m1", message={"role": "assistant"})))
    assert isinstance(message, MessageEnd) and message.message == {"role": "assistant"}
    assert lifecycle_event(event(TurnStarted(turn_index=0))) is None


async def test_hooks_run_in_order_and_a_failing_one_is_skipped() -> None:
    seen: list[str] = []
    registered = Registrations()

    def broken(item: RunStart) -> None:
        raise RuntimeError("hook bug")

    async def record(item: Any) -> None:
        seen.append(type(item).__name__)

    registered.run_start += [broken, record]
    registered.run_end.append(record)
    hooks = LifecycleHooks(lambda: [("ext", registered)])
    hooks.start()
    try:
        for seq, data in enumerate([AgentStarted(), TurnStarted(turn_index=0), finished()], 1):
            hooks.on_event(event(data, seq))
        async with asyncio.timeout(5):
            while hooks.delivered < 2:
                await asyncio.sleep(0.01)
    finally:
        await hooks.aclose()
    assert seen == ["RunStart", "RunEnd"]


async def test_without_hooks_nothing_is_queued_and_a_backlog_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lifecycle_hooks, "QUEUE_SIZE", 2)
    hooks = LifecycleHooks(lambda: [("ext", Registrations())])
    hooks.on_event(event(AgentStarted()))
    assert hooks.queued == 0
    registered = Registrations()
    registered.run_start.append(lambda item: None)
    busy = LifecycleHooks(lambda: [("ext", registered)])  # not started: nothing drains the queue
    for seq in range(5):
        busy.on_event(event(AgentStarted(), seq))
    assert (busy.queued, busy.dropped) == (2, 3)
