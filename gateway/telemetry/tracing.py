"""Traces of runs with the OpenTelemetry SDK: a span per run, a child span per model call and
per tool call, exported over OTLP/HTTP.

Imported only when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set
(`gateway.telemetry.telemetry`); without it the daemon loads nothing of OpenTelemetry. Spans are
made from the run observations of `gateway.telemetry.timeline`, with the start and end times the
session events carry. A run's trace id is its run id (`gateway.telemetry.trace_ids`), which the
logs carry as `trace_id`. Model call spans follow the OpenTelemetry GenAI semantic conventions
(`gen_ai.system`, `gen_ai.request.model`, `gen_ai.usage.input_tokens` / `output_tokens`,
`gen_ai.response.finish_reasons`).

An open run span lives from its run's start to its end; at most `MAX_OPEN_RUNS` are held (the
oldest is ended first). Export runs on the SDK's batch processor thread; `aclose()` flushes it.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from gateway import __version__
from gateway.telemetry.timeline import ModelCall, Observation, RunBegan, RunEnded, ToolCall
from gateway.telemetry.trace_ids import trace_id_of

MAX_OPEN_RUNS = 10_000
SERVICE_NAME = "agent-gateway"

_next_trace_id: contextvars.ContextVar[int | None] = contextvars.ContextVar("next_trace_id", default=None)


class RunIdGenerator(IdGenerator):
    """Random ids, except a run span's trace id: its run id."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        return self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        chosen = _next_trace_id.get()
        return chosen if chosen is not None else self._random.generate_trace_id()


def otlp_provider(endpoint: str, service: str | None = None) -> TracerProvider:
    """A tracer provider exporting to `endpoint` over OTLP/HTTP (protobuf), in batches."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = new_provider(service or SERVICE_NAME)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


def new_provider(service: str = SERVICE_NAME) -> TracerProvider:
    """A tracer provider whose run spans take their run's id as trace id (add processors)."""
    resource = Resource.create({"service.name": service, "service.version": __version__})
    return TracerProvider(resource=resource, id_generator=RunIdGenerator())


class RunTracer:
    """Turns run observations into spans of `provider`."""

    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("gateway.telemetry", __version__)
        self._runs: dict[str, Span] = {}

    def observe(self, observation: Observation) -> None:
        if isinstance(observation, RunBegan):
            self._begin(observation.run_id, observation.ts_ms, _run_attributes(observation))
        elif isinstance(observation, ModelCall):
            self._model_call(observation)
        elif isinstance(observation, ToolCall):
            self._tool_call(observation)
        elif isinstance(observation, RunEnded):
            self._end(observation)

    def _begin(self, run_id: str, ts_ms: int, attributes: dict[str, Any]) -> Span:
        while len(self._runs) >= MAX_OPEN_RUNS:
            self._runs.pop(next(iter(self._runs))).end()
        token = _next_trace_id.set(trace_id_of(run_id))
        try:
            span = self._tracer.start_span(
                "invoke_agent", kind=SpanKind.INTERNAL, start_time=_ns(ts_ms), attributes=attributes
            )
        finally:
            _next_trace_id.reset(token)
        self._runs[run_id] = span
        return span

    def _parent(self, run_id: str, ts_ms: int) -> Any:
        span = self._runs.get(run_id)
        if span is None:  # the run started before this process did
            span = self._begin(run_id, ts_ms, {"gateway.run_id": run_id})
        return trace.set_span_in_context(span)

    def _model_call(self, call: ModelCall) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": call.provider,
            "gen_ai.request.model": call.model,
            "gen_ai.response.model": call.model,
            "gen_ai.usage.input_tokens": call.input_tokens,
            "gen_ai.usage.output_tokens": call.output_tokens,
            "gen_ai.response.finish_reasons": (call.stop_reason,),
            "gateway.run_id": call.run_id,
        }
        if call.cost_usd:
            attributes["gateway.cost_usd"] = call.cost_usd
        span = self._tracer.start_span(
            f"chat {call.model}",
            context=self._parent(call.run_id, call.start_ms),
            kind=SpanKind.CLIENT,
            start_time=_ns(call.start_ms),
            attributes=attributes,
        )
        if call.stop_reason in ("error", "aborted"):
            span.set_status(Status(StatusCode.ERROR, call.error_message or call.stop_reason))
        span.end(end_time=_ns(call.end_ms))

    def _tool_call(self, call: ToolCall) -> None:
        span = self._tracer.start_span(
            f"execute_tool {call.tool_name}",
            context=self._parent(call.run_id, call.start_ms),
            kind=SpanKind.INTERNAL,
            start_time=_ns(call.start_ms),
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.tool_name,
                "gen_ai.tool.call.id": call.tool_call_id,
                "gateway.run_id": call.run_id,
            },
        )
        if call.is_error:
            span.set_status(Status(StatusCode.ERROR, "the tool reported an error"))
        span.end(end_time=_ns(call.end_ms))

    def _end(self, ended: RunEnded) -> None:
        span = self._runs.pop(ended.run_id, None)
        if span is None:
            span = self._begin(ended.run_id, ended.start_ms, {"gateway.run_id": ended.run_id})
            self._runs.pop(ended.run_id, None)
        span.set_attribute("gateway.termination_reason", ended.reason)
        span.set_attribute("gateway.total_turns", ended.total_turns)
        span.set_attribute("gateway.total_tokens", ended.total_tokens)
        if ended.reason == "error":
            span.set_status(Status(StatusCode.ERROR, ended.error_message or "the run failed"))
        span.end(end_time=_ns(ended.end_ms))

    async def aclose(self) -> None:
        """End the open run spans and flush and stop the exporter (on a worker thread)."""
        runs, self._runs = self._runs, {}
        for span in runs.values():
            span.end()
        await asyncio.to_thread(self._provider.shutdown)


def _run_attributes(began: RunBegan) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gateway.run_id": began.run_id,
        "gateway.session_id": began.session_id,
    }
    if began.session_key is not None:
        attributes["gateway.session_key"] = began.session_key
    return attributes


def _ns(ms: int) -> int:
    return ms * 1_000_000
