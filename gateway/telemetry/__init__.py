"""Metrics and traces: what the daemon does, counted for Prometheus and traced with OpenTelemetry.

- `telemetry`: `Telemetry`, the owner, started and closed with the gateway;
- `timeline`: committed session events turned into run observations (runs, model and tool calls);
- `metrics` and `instruments`: the counters and histograms, plain numbers until a scrape;
- `readings`: gauges and existing counters read on scrape;
- `exposition`: the Prometheus text format (imports `prometheus_client` on the first scrape);
- `endpoint` and `listener`: `GET /metrics` on the gateway's port, or on a loopback port;
- `channel_counts`: chat messages in and out, counted by the bindings' hosts;
- `tracing` and `trace_ids`: spans per run, model call and tool call (imported only when an OTLP
  endpoint is configured), and the run's trace id in the logs.

`docs/operations.md` lists every metric and how to turn tracing on.

This package imports nothing when it is imported (the log chain imports `trace_ids` at start-up);
import the owner from `gateway.telemetry.telemetry` and the route from `gateway.telemetry.endpoint`.
"""
