"""Spans of runs, model calls and tool calls (`gateway/telemetry/tracing.py`), recorded with the
SDK's in-memory exporter; and the run's trace id in the logs (`trace_ids.py`)."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway.logging import configure_logging, get_logger, reset_logging
from gateway.telemetry import trace_ids
from gateway.telemetry.timeline import RunTimeline
from gateway.telemetry.tracing import RunTracer, new_provider
from tests.gateway.telemetry.events import RUN_ID, tool_run


@pytest.fixture
def exported() -> Iterator[tuple[RunTracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = new_provider("test-gateway")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield RunTracer(provider), exporter
    provider.shutdown()


def trace(tracer: RunTracer, events: list) -> None:
    timeline = RunTimeline()
    for e in events:
        for observation in timeline.feed(e):
            tracer.observe(observation)


def test_a_run_span_with_model_and_tool_children(exported: tuple[RunTracer, InMemorySpanExporter]) -> None:
    tracer, exporter = exported
    trace(tracer, tool_run(tool_error=True))
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert sorted(spans) == ["chat gpt-test", "execute_tool ls", "invoke_agent"]
    assert len(exporter.get_finished_spans()) == 4  # two model calls
    run = spans["invoke_agent"]
    # The run's trace id is its run id.
    assert run.context.trace_id == uuid.UUID(RUN_ID).int
    assert run.parent is None
    assert (run.start_time, run.end_time) == (1000 * 10**6, 2010 * 10**6)
    assert run.attributes["gateway.termination_reason"] == "no_tool_calls"
    assert run.attributes["gateway.session_key"] == "agent:main:t"
    assert run.resource.attributes["service.name"] == "test-gateway"
    calls = [span for span in exporter.get_finished_spans() if span.name == "chat gpt-test"]
    first = calls[0]
    assert first.kind is SpanKind.CLIENT
    assert first.parent is not None and first.parent.span_id == run.context.span_id
    assert first.context.trace_id == run.context.trace_id
    assert (first.start_time, first.end_time) == (1020 * 10**6, 1300 * 10**6)
    assert dict(first.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.response.model": "gpt-test",
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.response.finish_reasons": ("toolUse",),
        "gateway.run_id": RUN_ID,
        "gateway.cost_usd": 0.25,
    }
    tool = spans["execute_tool ls"]
    assert tool.parent is not None and tool.parent.span_id == run.context.span_id
    assert tool.attributes["gen_ai.tool.name"] == "ls"
    assert tool.status.status_code is StatusCode.ERROR
    assert (tool.start_time, tool.end_time) == (1300 * 10**6, 1700 * 10**6)


def test_a_run_id_that_is_no_uuid_still_names_its_trace(
    exported: tuple[RunTracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = exported
    trace(tracer, tool_run(run_id="chat-send-key-1"))
    trace_ids_seen = {span.context.trace_id for span in exporter.get_finished_spans()}
    assert trace_ids_seen == {trace_ids.trace_id_of("chat-send-key-1")}
    assert trace_ids.trace_id_of("chat-send-key-1") != trace_ids.trace_id_of("chat-send-key-2")


async def test_closing_ends_open_runs(exported: tuple[RunTracer, InMemorySpanExporter]) -> None:
    tracer, exporter = exported
    trace(tracer, tool_run()[:5])
    assert [span.name for span in exporter.get_finished_spans()] == []
    await tracer.aclose()
    assert [span.name for span in exporter.get_finished_spans()] == ["invoke_agent"]


def test_log_lines_of_a_run_carry_its_trace_id_while_tracing_is_on() -> None:
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    try:
        log = get_logger("test.telemetry")
        log.info("before", run_id=RUN_ID)
        trace_ids.enable(True)
        log.warning("during", run_id=RUN_ID)
        log.info("no run")
    finally:
        trace_ids.enable(False)
        reset_logging()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line.get("trace_id") for line in lines] == [None, uuid.UUID(RUN_ID).hex, None]
