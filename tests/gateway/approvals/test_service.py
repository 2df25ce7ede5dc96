"""`gateway.approvals.service` over a real store (SQLite, and PostgreSQL when configured): how a
waiting call ends — a decision, two racing decisions, the timeout, its run's abort, a restart —
and what every ending leaves in the table and on the wire."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_core import AbortController
from gateway.approvals import ApprovalRequest, Approvals, ApprovalStatus, ApprovalStore, Ask, CallSite
from gateway.sandbox import RiskTier
from sessions.store import Store
from sessions.termination import TerminationReason
from tests.sessions.conftest import store, store_url

__all__ = ["store", "store_url"]

SITE = CallSite(session_id="s1", session_key="agent:main:main", agent_id="main", run_id="r1", timeout_s=30)
ASK = Ask(rule="risk medium is at or above ask_threshold medium", shape="bash: chmod", risk=RiskTier.MEDIUM,
          classes=["world_writable_chmod"], command="chmod 777 f")  # fmt: skip


class Events:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, name: str, payload: dict[str, Any]) -> None:
        self.sent.append((name, payload))

    async def requested(self) -> dict[str, Any]:
        for _ in range(500):
            for name, payload in self.sent:
                if name == "exec.approval.requested":
                    return payload
            await asyncio.sleep(0.01)
        raise AssertionError("no request was announced")


def _wait(approvals: Approvals, *, site: CallSite = SITE, signal: Any = None) -> asyncio.Task[Any]:
    call = approvals.wait_for(site, tool_call_id="t1", tool_name="bash", args={"command": "chmod 777 f"},
                              ask=ASK, signal=signal)  # fmt: skip
    return asyncio.ensure_future(call)


async def test_a_decision_ends_the_wait_once_and_is_stored_with_who_and_where(store: Store) -> None:
    events = Events()
    approvals = Approvals(ApprovalStore(store.database), events)
    waiting = _wait(approvals)
    request = await events.requested()
    assert request["status"] == "pending" and request["presentation"]["commandText"] == "chmod 777 f"
    assert [r.id for r in await approvals.requests()] == [request["id"]]
    first, second = await asyncio.gather(
        approvals.decide(request["id"], "deny", by="alice", surface="dashboard", note="not now"),
        approvals.decide(request["id"], "allow-once", by="bob", surface="gatewayctl"),
    )
    ended = await waiting
    assert [first[0], second[0]].count(True) == 1
    assert ended.status in (ApprovalStatus.DENIED, ApprovalStatus.ALLOWED)
    stored = await approvals.get(request["id"])
    assert stored == ended and stored.decided_at is not None
    assert (stored.decided_by, stored.surface) in (("alice", "dashboard"), ("bob", "gatewayctl"))
    assert await approvals.requests() == []
    assert [r.id for r in await approvals.requests(history=True)] == [request["id"]]
    resolved = [p for n, p in events.sent if n == "exec.approval.resolved"]
    assert len(resolved) == 1 and resolved[0]["decidedBy"] == stored.decided_by


async def test_nobody_deciding_in_time_expires_the_request(store: Store) -> None:
    approvals = Approvals(ApprovalStore(store.database), Events())
    quick = CallSite(session_id="s1", session_key=None, agent_id="main", run_id="r1", timeout_s=0.2)
    ended = await _wait(approvals, site=quick)
    assert ended.status is ApprovalStatus.EXPIRED and ended.reason == "timeout"
    assert ended.note == "No one decided within 0.2 s."
    applied, again = await approvals.decide(ended.id, "allow-once", by="late", surface="cli")
    assert not applied and again.status is ApprovalStatus.EXPIRED


@pytest.mark.parametrize(
    ("reason", "expected"),
    [(TerminationReason.ABORTED, "run-aborted"), (TerminationReason.GATEWAY_SHUTDOWN, "gateway-restart")],
)
async def test_the_runs_abort_cancels_the_request(
    store: Store, reason: TerminationReason, expected: str
) -> None:
    events = Events()
    approvals = Approvals(ApprovalStore(store.database), events)
    controller = AbortController()
    waiting = _wait(approvals, signal=controller.signal)
    await events.requested()
    controller.abort(reason)
    ended = await waiting
    assert ended.status is ApprovalStatus.CANCELLED and ended.reason == expected
    assert approvals.waiting == 0


async def test_start_cancels_what_a_previous_process_left_pending(store: Store) -> None:
    approvals_store = ApprovalStore(store.database)
    left = ApprovalRequest(id="a1", session_id="s1", session_key=None, agent_id="main", run_id="r1",
                           tool_call_id="t1", tool_name="bash", created_at=1, expires_at=2)  # fmt: skip
    await approvals_store.add(left)  # what a crashed process leaves: a pending row, nobody waiting
    after = Approvals(approvals_store, Events())
    (cancelled,) = await after.start()
    assert cancelled.id == "a1" and cancelled.status is ApprovalStatus.CANCELLED
    assert cancelled.reason == "gateway-restart" and cancelled.decided_by is None
    assert "restarted while this request waited" in (cancelled.note or "")
    assert await after.start() == []
    assert (await after.get("a1")).wire()["resolver"] == {"kind": "system"}


async def test_a_cancelled_wait_cancels_its_request(store: Store) -> None:
    events = Events()
    approvals = Approvals(ApprovalStore(store.database), events)
    waiting = _wait(approvals)
    request = await events.requested()
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert (await approvals.get(request["id"])).reason == "run-aborted"


async def test_wait_decision_returns_when_decided_or_as_it_is_at_the_timeout(store: Store) -> None:
    events = Events()
    approvals = Approvals(ApprovalStore(store.database), events)
    waiting = _wait(approvals)
    request = await events.requested()
    still = await approvals.wait_decision(request["id"], 0.05)
    assert still.status is ApprovalStatus.PENDING
    watcher = asyncio.ensure_future(approvals.wait_decision(request["id"], 10))
    await asyncio.sleep(0.05)
    await approvals.decide(request["id"], "allow-always", by="alice", surface="dashboard")
    assert (await watcher).status is ApprovalStatus.ALLOWED
    await waiting


async def test_an_allow_always_grant_covers_the_same_shape_no_riskier(store: Store) -> None:
    events = Events()
    approvals = Approvals(ApprovalStore(store.database), events)
    waiting = _wait(approvals)
    request = await events.requested()
    await approvals.decide(request["id"], "allow-always", by="alice", surface="dashboard")
    await waiting
    assert await approvals.granted("s1", ASK) is not None
    riskier = Ask(rule="", shape="bash: chmod", risk=RiskTier.HIGH)
    other = Ask(rule="", shape="bash: chmod -R", risk=RiskTier.MEDIUM)
    assert await approvals.granted("s1", riskier) is None
    assert await approvals.granted("s1", other) is None
    assert await approvals.granted("s2", ASK) is None
