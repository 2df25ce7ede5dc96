"""The owner of metrics and traces (`gateway/telemetry/telemetry.py`) when switched off or when
OpenTelemetry is missing."""

from __future__ import annotations

import sys

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from gateway.auth import AuthConfig
from gateway.config.sections import MetricsSection
from gateway.telemetry import telemetry as telemetry_module
from gateway.telemetry.endpoint import metrics_endpoint
from gateway.telemetry.telemetry import Telemetry


async def test_switched_off_it_observes_nothing_and_serves_nothing() -> None:
    off = Telemetry(MetricsSection(enabled=False), {})
    await off.start(None)  # type: ignore[arg-type]  # touches no part of the gateway
    assert not off.serves_gateway_port
    assert off.tracer is None

    async def no_named_token(secret: str) -> None:
        return None

    endpoint = metrics_endpoint(lambda: off, lambda: AuthConfig(token="t" * 32), no_named_token)
    app = Starlette(routes=[Route("/metrics", endpoint)])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        response = await client.get("/metrics", headers={"Authorization": "Bearer " + "t" * 32})
    assert response.status_code == 404
    await off.aclose()


def test_a_separate_port_takes_metrics_off_the_gateway_port() -> None:
    assert Telemetry(MetricsSection(), {}).serves_gateway_port
    assert not Telemetry(MetricsSection(port=9464), {}).serves_gateway_port


def test_without_opentelemetry_tracing_is_off_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gateway.telemetry.tracing", None)  # as if not installed
    warnings: list[tuple[str, dict[str, object]]] = []
    monkeypatch.setattr(telemetry_module.log, "warning", lambda event, **kw: warnings.append((event, kw)))
    assert telemetry_module._otlp_tracer("http://127.0.0.1:1/v1/traces", {}) is None
    assert len(warnings) == 1
    assert "pip install 'agent-gateway[tracing]'" in warnings[0][0]
