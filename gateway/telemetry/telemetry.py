"""`Telemetry`: the daemon's metrics and traces, from start to stop.

Started by the app once the gateway state exists (`start(state, channels)`), closed when it stops
(`aclose()`). It listens to the committed session events (the bridge's listeners) and turns them
into run observations (`RunTimeline`) for the metrics and, when tracing is on, the tracer; it takes
the journal's commit timings and the providers' HTTP outcomes; it renders the exposition on
scrape, either for the app's `GET /metrics` or on a loopback port of its own (`[metrics] port`).

Tracing is on when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set;
OpenTelemetry is imported only then (it is the `tracing` extra: without it the daemon says so in
one line and runs untraced).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import structlog

from gateway.telemetry import trace_ids
from gateway.telemetry.listener import MetricsListener
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.readings import Outbox, OutboxCounts, Reading, state_readings
from gateway.telemetry.timeline import Observation, RunTimeline
from sessions import SessionEvent

if TYPE_CHECKING:
    from gateway.channels import Channels
    from gateway.config.sections import MetricsSection
    from gateway.state import GatewayState
    from gateway.telemetry.exposition import Exposition
    from gateway.telemetry.tracing import RunTracer
    from sessions.journal import Journal

log = structlog.get_logger("gateway.telemetry")


def traces_endpoint(env: Mapping[str, str]) -> str | None:
    """Where spans are exported over OTLP/HTTP, or None when tracing is off: the traces endpoint
    if set, else `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces` appended."""
    specific = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if specific:
        return specific
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return base.rstrip("/") + "/v1/traces" if base else None


class Telemetry:
    """Metrics and traces of one running gateway."""

    def __init__(self, settings: MetricsSection, env: Mapping[str, str]) -> None:
        self.settings = settings
        self._env = env
        self.metrics = Metrics()
        self.timeline = RunTimeline()
        self.tracer: RunTracer | None = None
        self.outbox = Outbox()
        self.listener: MetricsListener | None = None
        self._readings: list[Reading] = []
        self._exposition: Exposition | None = None
        self._removers: list[Callable[[], None]] = []
        self._channels: Channels | None = None
        self._journal: Journal | None = None

    @property
    def serves_gateway_port(self) -> bool:
        """Whether `GET /metrics` is answered on the gateway's own port (with its token)."""
        return self.settings.enabled and not self.settings.port

    async def start(self, state: GatewayState, channels: Channels | None = None) -> None:
        """Observe `state`'s gateway (and its chat bindings) from now on. Raises OSError when the
        metrics port is taken."""
        endpoint = traces_endpoint(self._env)
        if endpoint is not None:
            self.tracer = _otlp_tracer(endpoint, self._env)
            trace_ids.enable(self.tracer is not None)
            if self.tracer is not None:
                log.info("tracing runs", endpoint=endpoint)
        if not self.settings.enabled and self.tracer is None:
            return
        self._removers.append(state.bridge.add_listener(self.on_event))
        if not self.settings.enabled:
            return
        if channels is not None:
            self.outbox.counts = outbox_counts(channels)
            channels.messages.observer = self.metrics.channel_message
            self._channels = channels
        self._readings = state_readings(state, self.outbox)
        self._journal = state.manager.journal
        self._journal.observe_commit = self.metrics.journal_committed
        from agent_core.providers import observe_requests

        self._removers.append(observe_requests(self.metrics.provider_request))
        if self.settings.port:
            self.listener = MetricsListener(self.scrape)
            await self.listener.start(self.settings.port)
            log.info("metrics listening", url=f"http://127.0.0.1:{self.listener.port}/metrics")

    def on_event(self, event: SessionEvent) -> None:
        """A committed session event (a bridge listener: must not block)."""
        for observation in self.timeline.feed(event):
            self.observe(observation)

    def observe(self, observation: Observation) -> None:
        if self.settings.enabled:
            self.metrics.observe(observation)
        if self.tracer is not None:
            self.tracer.observe(observation)

    async def scrape(self) -> tuple[bytes, str]:
        """The exposition (Prometheus text format) and its content type."""
        from gateway.telemetry.exposition import CONTENT_TYPE, Exposition

        await self.outbox.refresh()
        if self._exposition is None:
            self._exposition = Exposition(self.metrics, lambda: self._readings)
        return self._exposition.render(), CONTENT_TYPE

    async def aclose(self) -> None:
        """Stop observing, close the metrics port, flush the spans. Idempotent."""
        if self._channels is not None:
            self._channels.messages.observer = None
            self._channels = None
        if self._journal is not None:
            self._journal.observe_commit = None
            self._journal = None
        for remove in self._removers:
            remove()
        self._removers.clear()
        if self.listener is not None:
            await self.listener.aclose()
            self.listener = None
        tracer, self.tracer = self.tracer, None
        if tracer is not None:
            trace_ids.enable(False)
            try:
                await tracer.aclose()
            except Exception:
                log.exception("flushing the traces failed")


def _otlp_tracer(endpoint: str, env: Mapping[str, str]) -> RunTracer | None:
    try:
        from gateway.telemetry.tracing import RunTracer, otlp_provider
    except ImportError as exc:
        log.warning(
            "tracing is off: OpenTelemetry is not installed (pip install 'agent-gateway[tracing]')",
            missing=exc.name,
        )
        return None
    service = env.get("OTEL_SERVICE_NAME", "").strip() or None
    return RunTracer(otlp_provider(endpoint, service))


def outbox_counts(channels: Channels) -> OutboxCounts:
    """Reads the pending outbox messages per channel of the running chat bindings."""

    async def counts() -> dict[str, int]:
        out: dict[str, int] = {}
        for binding in channels.bindings.values():
            pending = await channels.store.outbox_pending(binding.platform, binding.account_id)
            out[binding.platform] = out.get(binding.platform, 0) + len(pending)
        return out

    return counts
