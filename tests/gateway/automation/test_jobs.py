"""`gateway.automation.jobs` and `.delivery`: building a job from `cron.add`, patching it, and
where its runs and replies go."""

from __future__ import annotations

from typing import Any

import pytest

from bindings import ReplyRoute
from gateway.automation import InvalidJob
from gateway.automation.delivery import Delivery, delivery_status, parse_delivery
from gateway.automation.jobs import new_job, patched

NOW = 1_800_000_000_000


def spec(**extra: Any) -> dict[str, Any]:
    return {
        "name": "digest",
        "schedule": {"kind": "every", "everyMs": 3_600_000},
        "payload": {"kind": "agentTurn", "message": "summarise"},
        "sessionTarget": "isolated",
        "wakeMode": "now",
        **extra,
    }


def test_a_new_job_has_defaults_and_its_origin_is_now() -> None:
    job = new_job(spec(), job_id="j1", now_ms=NOW, default_agent="main")
    assert (job.agent_id, job.catch_up, job.enabled, job.origin_ms) == ("main", "latest", True, NOW)
    assert job.message == "summarise"
    assert job.wire()["delivery"] == {"mode": "none"}
    assert job.wire()["schedule"] == {"kind": "every", "everyMs": 3_600_000}


def test_session_targets_name_the_session_of_each_run() -> None:
    def key(target: str, **extra: Any) -> str:
        return new_job(
            spec(sessionTarget=target, **extra), job_id="j1", now_ms=NOW, default_agent="main"
        ).session_key_for("123")

    assert key("isolated") == "cron:j1:run:123"
    assert key("main", agentId="ops") == "agent:ops:main"
    assert key("session:agent:main:reports") == "agent:main:reports"
    assert key("current", sessionKey="agent:main:discord:channel:9") == "agent:main:discord:channel:9"
    with pytest.raises(InvalidJob, match='"current" needs'):
        key("current")
    with pytest.raises(InvalidJob, match="sessionTarget"):
        key("elsewhere")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"payload": {"kind": "command", "argv": ["ls"]}}, "payload.kind"),
        ({"payload": {"kind": "agentTurn", "message": "hi", "model": "x/y"}}, "payload.model"),
        ({"payload": {"kind": "agentTurn", "message": "  "}}, "payload.message"),
        ({"trigger": {"script": "return true"}}, "trigger: not supported"),
        ({"catchUp": "sometimes"}, "catchUp"),
        ({"schedule": {"kind": "at", "at": "2020-01-01T00:00:00Z"}}, "in the past"),
        ({"delivery": {"mode": "webhook", "to": "https://example.invalid"}}, "delivery.mode"),
        ({"enabled": "yes"}, "enabled"),
        ({"name": ""}, "name"),
    ],
)
def test_what_the_gateway_cannot_do_is_refused_by_name(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        new_job(spec(**extra), job_id="j1", now_ms=NOW, default_agent="main")


def test_enabling_or_rescheduling_moves_the_origin_so_slept_through_slots_do_not_run() -> None:
    job = new_job(spec(enabled=False), job_id="j1", now_ms=NOW, default_agent="main")
    later = NOW + 86_400_000
    renamed = patched(job, {"name": "digest 2"}, now_ms=later)
    assert (renamed.name, renamed.origin_ms, renamed.updated_at) == ("digest 2", NOW, later)
    assert patched(job, {"enabled": True}, now_ms=later).origin_ms == later
    assert patched(job, {"schedule": {"kind": "every", "everyMs": 60_000}}, now_ms=later).origin_ms == later
    assert patched(job, {"delivery": None}, now_ms=later).delivery is None
    with pytest.raises(InvalidJob, match=r"patch\.owner"):
        patched(job, {"owner": {}}, now_ms=later)


def test_a_delivery_names_a_channel_and_resolves_to_a_running_binding() -> None:
    delivery = parse_delivery({"mode": "announce", "channel": "discord", "to": "channel:123"})
    assert delivery == Delivery(channel="discord", to="123")
    assert parse_delivery({"mode": "none"}) is None
    assert parse_delivery(None) is None
    binding, route = delivery.resolve([("discord", "main"), ("slack", "work")])
    assert binding == "discord:main"
    assert route == ReplyRoute(platform="discord", account_id="main", channel_id="123")
    with pytest.raises(LookupError, match="several discord accounts"):
        delivery.resolve([("discord", "a"), ("discord", "b")])
    with pytest.raises(LookupError, match="no discord binding"):
        delivery.resolve([("slack", "work")])
    threaded = parse_delivery({"channel": "slack", "to": "C1", "accountId": "work", "threadId": 1700000000.5})
    assert threaded is not None
    assert threaded.resolve([("slack", "work")])[1].thread_id == "1700000000.5"
    with pytest.raises(InvalidJob, match="only channels"):
        parse_delivery({"channel": "discord", "to": "user:42"})


def test_delivery_status_is_read_from_the_outbox_states() -> None:
    assert delivery_status(False, None, []) == "not-requested"
    assert delivery_status(True, "no discord binding is running", []) == "not-delivered"
    assert delivery_status(True, None, ["final", "final"]) == "delivered"
    assert delivery_status(True, None, ["final", "failed"]) == "not-delivered"
    assert delivery_status(True, None, ["sent"]) == "unknown"
