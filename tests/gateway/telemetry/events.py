"""Session events of one scripted run, with the timestamps a test chooses."""

from __future__ import annotations

from typing import Any

from sessions import (
    AgentFinished,
    AgentStarted,
    MessageCompleted,
    MessageDelta,
    MessageStarted,
    SessionEvent,
    ToolFinished,
    ToolStarted,
    TurnStarted,
)
from sessions.event_payloads import EventPayload
from sessions.termination import TerminationReason

RUN_ID = "0190f5a2-7c1e-7b3a-9d2e-4f5a6b7c8d9e"


def event(seq: int, ts: int, data: EventPayload, run_id: str = RUN_ID) -> SessionEvent:
    return SessionEvent(session_id="s1", seq=seq, data=data, run_id=run_id, session_key="agent:main:t", ts=ts)


def assistant(
    stop: str, *, input_tokens: int = 10, output_tokens: int = 5, cost: float = 0.25
) -> dict[str, Any]:
    return {
        "role": "assistant",
        "provider": "openai",
        "model": "gpt-test",
        "stopReason": stop,
        "content": [],
        "usage": {
            "input": input_tokens,
            "output": output_tokens,
            "cacheRead": 2,
            "cacheWrite": 0,
            "totalTokens": input_tokens + output_tokens + 2,
            "cost": {"total": cost},
        },
    }


def tool_run(run_id: str = RUN_ID, *, tool: str = "ls", tool_error: bool = False) -> list[SessionEvent]:
    """A run at t=1000 ms: a model call that calls `tool` (100 ms after the turn starts it streams,
    done at 1300), the tool (1300-1700), a second model call (1700-2000), the end at 2010."""
    return [
        event(1, 1000, AgentStarted(), run_id),
        event(2, 1000, TurnStarted(turn_index=0), run_id),
        event(3, 1010, MessageStarted(message_id="u1", role="user"), run_id),
        event(4, 1020, MessageCompleted(message_id="u1", message={"role": "user", "content": "hi"}), run_id),
        event(5, 1100, MessageStarted(message_id="a1", role="assistant"), run_id),
        event(6, 1150, MessageDelta(message_id="a1", content_index=0, kind="toolcall", delta="{"), run_id),
        event(7, 1300, MessageCompleted(message_id="a1", message=assistant("toolUse")), run_id),
        event(8, 1300, ToolStarted(tool_call_id="c1", tool_name=tool, args={}), run_id),
        event(
            9,
            1700,
            ToolFinished(tool_call_id="c1", tool_name=tool, result={}, is_error=tool_error, duration_ms=400),
            run_id,
        ),
        event(10, 1700, MessageStarted(message_id="t1", role="toolResult"), run_id),
        event(11, 1705, MessageCompleted(message_id="t1", message={"role": "toolResult"}), run_id),
        event(12, 1800, MessageStarted(message_id="a2", role="assistant"), run_id),
        event(13, 1850, MessageDelta(message_id="a2", content_index=0, kind="text", delta="ok"), run_id),
        event(14, 2000, MessageCompleted(message_id="a2", message=assistant("stop", cost=0.5)), run_id),
        event(
            15,
            2010,
            AgentFinished(
                termination_reason=TerminationReason.NO_TOOL_CALLS,
                total_turns=2,
                total_tokens=34,
                duration_ms=1010,
            ),
            run_id,
        ),
    ]
