"""The metrics' own loopback port (`gateway/telemetry/listener.py`) and the gateway port's token
check (`endpoint.py`)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway.auth import AuthConfig
from gateway.telemetry.endpoint import bearer_accepted
from gateway.telemetry.listener import MetricsListener, parse_request_line
from gateway.telemetry.telemetry import traces_endpoint


async def test_the_listener_answers_get_metrics_only() -> None:
    scrapes = 0

    async def scrape() -> tuple[bytes, str]:
        nonlocal scrapes
        scrapes += 1
        return b"gateway_up 1\n", "text/plain; version=0.0.4; charset=utf-8"

    listener = MetricsListener(scrape)
    await listener.start(0)
    try:
        base = f"http://127.0.0.1:{listener.port}"
        async with httpx.AsyncClient() as client:
            ok = await client.get(base + "/metrics?x=1")
            assert (ok.status_code, ok.text) == (200, "gateway_up 1\n")
            assert ok.headers["content-type"].startswith("text/plain; version=0.0.4")
            assert (await client.get(base + "/")).status_code == 404
            assert (await client.delete(base + "/metrics")).status_code == 405
        # A client that never finishes its request head holds nothing after close.
        _, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(b"GET /metrics HTTP/1.1\r\n")
        await writer.drain()
    finally:
        await listener.aclose()
        await listener.aclose()
    writer.close()
    assert scrapes == 1
    assert listener.port is None


async def test_a_taken_port_is_named_in_one_line() -> None:
    async def scrape() -> tuple[bytes, str]:
        return b"", "text/plain"

    first = MetricsListener(scrape)
    await first.start(0)
    try:
        with pytest.raises(
            OSError, match=rf"^\[Errno \d+\] \[metrics\] port {first.port}: cannot listen on 127.0.0.1"
        ):
            await MetricsListener(scrape).start(first.port or 0)
    finally:
        await first.aclose()


def test_request_lines() -> None:
    assert parse_request_line(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n") == ("GET", "/metrics")
    assert parse_request_line(b"garbage\r\n\r\n") is None


def test_the_gateway_port_wants_the_token_as_bearer() -> None:
    auth = AuthConfig(token="t" * 32)
    assert bearer_accepted("Bearer " + "t" * 32, auth)
    assert bearer_accepted("bearer " + "t" * 32, auth)
    assert not bearer_accepted(None, auth)
    assert not bearer_accepted("Bearer " + "u" * 32, auth)
    assert not bearer_accepted("Basic " + "t" * 32, auth)
    assert not bearer_accepted("Bearer ", auth)
    assert bearer_accepted("Bearer pw", AuthConfig(password="pw"))
    # No auth at all is only possible on loopback: anyone there may scrape.
    assert bearer_accepted(None, AuthConfig())


def test_tracing_is_on_when_an_otlp_endpoint_is_set() -> None:
    assert traces_endpoint({}) is None
    assert traces_endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}) is None
    assert traces_endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}) == "http://c:4318/v1/traces"
    both = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/x",
    }
    assert traces_endpoint(both) == "http://t/x"
