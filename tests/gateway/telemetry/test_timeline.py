"""Committed session events in, run observations out (`gateway/telemetry/timeline.py`)."""

from __future__ import annotations

from gateway.telemetry.timeline import FirstToken, ModelCall, RunBegan, RunEnded, RunTimeline, ToolCall
from sessions import AgentStarted, MessageDelta
from tests.gateway.telemetry.events import RUN_ID, event, tool_run


def feed_all(timeline: RunTimeline, events: list) -> list:
    return [observation for e in events for observation in timeline.feed(e)]


def test_a_run_with_a_tool_call() -> None:
    timeline = RunTimeline()
    observations = feed_all(timeline, tool_run())
    assert [type(o) for o in observations] == [RunBegan, FirstToken, ModelCall, ToolCall, ModelCall, RunEnded]
    began, first, call1, tool, call2, ended = observations
    assert began == RunBegan(RUN_ID, "s1", "agent:main:t", 1000)
    assert first == FirstToken(RUN_ID, 0.15)
    # A model call starts with the event before its reply: the prompt, then the tool result.
    assert (call1.start_ms, call1.end_ms, call1.stop_reason) == (1020, 1300, "toolUse")
    assert (call2.start_ms, call2.end_ms, call2.stop_reason) == (1705, 2000, "stop")
    assert (call1.provider, call1.model, call1.input_tokens, call1.output_tokens) == (
        "openai",
        "gpt-test",
        10,
        5,
    )
    assert call1.cache_read_tokens == 2 and call2.cost_usd == 0.5
    assert tool == ToolCall(RUN_ID, "c1", "ls", 1300, 1700, False)
    assert ended == RunEnded(RUN_ID, "s1", "no_tool_calls", 1000, 2010, 2, 34)
    assert len(timeline) == 0  # nothing kept once the run ended


def test_events_of_a_run_that_started_before_are_ignored_until_its_end() -> None:
    timeline = RunTimeline()
    events = tool_run()
    observations = feed_all(timeline, events[5:])
    # Only its end is known; its duration comes from the event.
    assert observations == [RunEnded(RUN_ID, "s1", "no_tool_calls", 1000, 2010, 2, 34)]


def test_only_the_first_delta_counts_as_the_first_token() -> None:
    timeline = RunTimeline()
    timeline.feed(event(1, 0, AgentStarted()))
    delta = MessageDelta(message_id="a", content_index=0, kind="text", delta="x")
    assert timeline.feed(event(2, 40, delta)) == [FirstToken(RUN_ID, 0.04)]
    assert timeline.feed(event(3, 50, delta)) == []


def test_runs_tracked_at_once_are_bounded() -> None:
    timeline = RunTimeline(max_runs=3)
    for n in range(5):
        timeline.feed(event(1, n, AgentStarted(), run_id=f"run-{n}"))
    assert len(timeline) == 3
    # The oldest were forgotten: their deltas count nothing.
    delta = MessageDelta(message_id="a", content_index=0, kind="text", delta="x")
    assert timeline.feed(event(2, 10, delta, run_id="run-0")) == []
    assert timeline.feed(event(2, 10, delta, run_id="run-4")) == [FirstToken("run-4", 0.006)]
