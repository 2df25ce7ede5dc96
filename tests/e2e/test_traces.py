"""Traces of the real daemon, exported over OTLP/HTTP to a receiver in the test that decodes the
protobuf export requests (`opentelemetry-proto`): a span per run, model calls and tool calls as
its children, with the GenAI attributes."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from gateway.client import GatewayClient
from gateway.telemetry.trace_ids import trace_id_of
from tests.daemon import running_daemon

KEY = "agent:main:traced"


class Receiver:
    """An OTLP/HTTP traces endpoint on loopback that keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.resources: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
                with receiver._lock:
                    receiver.paths.append(self.path)
                    for resource_spans in request.resource_spans:
                        receiver.resources.append(attributes(resource_spans.resource.attributes))
                        for scope_spans in resource_spans.scope_spans:
                            receiver.spans.extend(scope_spans.spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def named(self, name: str) -> list[Any]:
        with self._lock:
            return [span for span in self.spans if span.name == name]


def value(any_value: AnyValue) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return tuple(value(v) for v in any_value.array_value.values)
    return getattr(any_value, kind) if kind else None


def attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: value(pair.value) for pair in pairs}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    running.thread.start()
    yield running
    running.server.shutdown()
    running.server.server_close()


async def test_a_run_is_traced_with_its_model_and_tool_calls(gateway_home: Path, receiver: Receiver) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": "gateway-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    with running_daemon(gateway_home, env=env) as daemon:
        async with GatewayClient(daemon.url, token=daemon.token) as client:
            await client.call(
                "chat.send",
                {"sessionKey": KEY, "message": '!tool ls {"path": "."}', "idempotencyKey": "traced-1"},
            )
            assert (await client.call("agent.wait", {"runId": "traced-1", "timeoutMs": 20_000}))[
                "status"
            ] == "ok"
        deadline = time.monotonic() + 20
        while not receiver.named("invoke_agent") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert daemon.stop() == 0, daemon.logs()

    assert set(receiver.paths) == {"/v1/traces"}
    assert receiver.resources[0]["service.name"] == "gateway-under-test"
    [run] = receiver.named("invoke_agent")
    # The run's trace id is derived from its run id (the idempotency key here).
    assert int.from_bytes(run.trace_id, "big") == trace_id_of("traced-1")
    run_attributes = attributes(run.attributes)
    assert run_attributes["gateway.run_id"] == "traced-1"
    assert run_attributes["gateway.session_key"] == KEY
    assert run_attributes["gateway.termination_reason"] == "no_tool_calls"
    calls = sorted(receiver.named("chat echo"), key=lambda span: span.start_time_unix_nano)
    assert len(calls) == 2  # the tool call, then the answer
    [tool] = receiver.named("execute_tool ls")
    for child in (*calls, tool):
        assert child.trace_id == run.trace_id
        assert child.parent_span_id == run.span_id
        assert run.start_time_unix_nano <= child.start_time_unix_nano <= child.end_time_unix_nano
        assert child.end_time_unix_nano <= run.end_time_unix_nano
    first, second = (attributes(call.attributes) for call in calls)
    assert first["gen_ai.system"] == "faux"
    assert first["gen_ai.request.model"] == "echo"
    assert first["gen_ai.response.finish_reasons"] == ("toolUse",)
    assert second["gen_ai.response.finish_reasons"] == ("stop",)
    assert first["gen_ai.usage.input_tokens"] > 0 and second["gen_ai.usage.output_tokens"] > 0
    # The tool ran between the two model calls.
    assert calls[0].end_time_unix_nano <= tool.start_time_unix_nano
    assert tool.end_time_unix_nano <= calls[1].end_time_unix_nano
    assert attributes(tool.attributes)["gen_ai.tool.name"] == "ls"
