"""Counting run observations and rendering them for Prometheus (`gateway/telemetry/metrics.py`,
`instruments.py`, `exposition.py`)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from agent_core.providers._common import RequestOutcome
from gateway.telemetry.exposition import Exposition
from gateway.telemetry.instruments import Family
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.readings import Reading, role_of
from gateway.telemetry.timeline import RunTimeline, ToolCall
from tests.gateway.telemetry.events import tool_run


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def render(metrics: Metrics, readings: list[Reading] | None = None) -> dict:
    return samples(Exposition(metrics, lambda: readings or []).render().decode())


def observe_run(metrics: Metrics, **kwargs: object) -> None:
    timeline = RunTimeline()
    for e in tool_run(**kwargs):  # type: ignore[arg-type]
        for observation in timeline.feed(e):
            metrics.observe(observation)


def test_a_run_is_counted_by_reason_model_and_tool() -> None:
    metrics = Metrics()
    observe_run(metrics)
    out = render(metrics)
    model = (("model", "gpt-test"), ("provider", "openai"))
    assert out[("gateway_runs_started_total", ())] == 1
    assert out[("gateway_runs_finished_total", (("reason", "no_tool_calls"),))] == 1
    assert out[("gateway_run_duration_seconds_sum", (("reason", "no_tool_calls"),))] == 1.01
    assert out[("gateway_run_duration_seconds_bucket", (("le", "1.0"), ("reason", "no_tool_calls")))] == 0
    assert out[("gateway_run_duration_seconds_bucket", (("le", "2.5"), ("reason", "no_tool_calls")))] == 1
    assert out[("gateway_run_first_token_seconds_sum", ())] == 0.15
    assert out[("gateway_model_calls_total", (*model, ("stop_reason", "toolUse")))] == 1
    assert out[("gateway_model_calls_total", (*model, ("stop_reason", "stop")))] == 1
    assert out[("gateway_model_tokens_total", (("kind", "input"), *model))] == 20
    assert out[("gateway_model_tokens_total", (("kind", "cache_read"), *model))] == 4
    assert out[("gateway_model_cost_usd_total", model)] == 0.75
    assert out[("gateway_model_call_duration_seconds_count", model)] == 2
    assert out[("gateway_tool_calls_total", (("outcome", "ok"), ("tool", "ls")))] == 1
    assert out[("gateway_tool_call_duration_seconds_sum", (("tool", "ls"),))] == 0.4


def test_tool_names_past_the_cap_are_counted_as_other() -> None:
    metrics = Metrics(max_tools=2)
    for name in ("bash", "mcp_a", "mcp_b", "mcp_c", "mcp_a", "read"):
        metrics.observe(ToolCall("r", "c", name, 0, 10, name == "mcp_c"))
    out = render(metrics)
    calls = {dict(labels)["tool"]: v for (n, labels), v in out.items() if n == "gateway_tool_calls_total"}
    # Built-in tools never take room under the cap.
    assert calls == {"bash": 1, "read": 1, "mcp_a": 2, "mcp_b": 1, "other": 1}
    assert out[("gateway_tool_calls_total", (("outcome", "error"), ("tool", "other")))] == 1


def test_models_past_the_cap_are_counted_as_other() -> None:
    metrics = Metrics(max_models=1)
    metrics.provider_request(RequestOutcome("openai", "a", "200", retrying=False, final=False))
    metrics.provider_request(RequestOutcome("openai", "b", "429", retrying=True, final=False))
    metrics.provider_request(RequestOutcome("openai", "b", "500", retrying=False, final=True))
    out = render(metrics)
    assert (
        out[("gateway_provider_requests_total", (("model", "a"), ("provider", "openai"), ("status", "200")))]
        == 1
    )
    other = (("model", "other"), ("provider", "other"))
    assert out[("gateway_provider_retries_total", (*other, ("status", "429")))] == 1
    assert out[("gateway_provider_errors_total", (*other, ("status", "500")))] == 1
    assert ("gateway_provider_errors_total", (*other, ("status", "429"))) not in out


def test_journal_commits_and_readings() -> None:
    metrics = Metrics()
    metrics.journal_committed(0.004, 3)
    metrics.journal_committed(0.02, 40)
    depth = Reading(Family("gateway_test_depth", "A depth.", ("kind",)), lambda: [(("a",), 3.0)])
    seen = Reading(Family("gateway_test_seen", "A count kept elsewhere.", ()), lambda: [((), 7.0)], "counter")
    out = render(metrics, [depth, seen])
    assert out[("gateway_journal_commit_seconds_count", ())] == 2
    assert out[("gateway_journal_commit_seconds_bucket", (("le", "0.005"),))] == 1
    assert out[("gateway_journal_commit_items_sum", ())] == 43
    assert out[("gateway_journal_commit_items_bucket", (("le", "50.0"),))] == 2
    assert out[("gateway_test_depth", (("kind", "a"),))] == 3
    assert out[("gateway_test_seen_total", ())] == 7


def test_a_connection_role_is_its_strongest_scope() -> None:
    assert role_of(frozenset({"operator.read", "operator.admin"})) == "admin"
    assert role_of(frozenset({"operator.read", "operator.write"})) == "write"
    assert role_of(frozenset({"operator.read"})) == "read"
    assert role_of(frozenset()) == "none"
