"""Waiting for an input's outcome when another node records it (the ledger is read again every
`poll_s`): the wait ends with the outcome, and no waiter is left behind either way."""

from __future__ import annotations

import asyncio

from sessions.inputs import Inputs
from sessions.schema import InputStatus
from sessions.store import Store


async def _input(store: Store, key: str) -> None:
    session = await store.tree.create_session(agent_id="main", key=f"agent:main:{key}")
    await store.inputs.record(key, session_id=session.id, payload={"role": "user", "content": "hi"})


async def test_a_wait_ends_when_another_node_records_the_outcome(store: Store) -> None:
    here = Inputs(store, find_run=lambda _run_id: None)
    here.poll_s = 0.05
    await _input(store, "elsewhere")
    waiting = asyncio.ensure_future(here.wait("elsewhere", timeout_s=10))
    await asyncio.sleep(0.1)
    assert here.waiting == 1
    # Recorded by another node's Inputs: nothing wakes this one but the ledger.
    other = Inputs(store, find_run=lambda _run_id: None)
    await other.settle(["elsewhere"], InputStatus.REJECTED, reason="refused there")
    outcome = await asyncio.wait_for(waiting, 5)
    assert outcome is not None and outcome["errorMessage"] == "refused there"
    assert here.waiting == 0


async def test_waits_that_time_out_or_share_a_key_leave_no_waiter(store: Store) -> None:
    inputs = Inputs(store, find_run=lambda _run_id: None)
    inputs.poll_s = 0.05
    await _input(store, "slow")
    assert await inputs.wait("slow", timeout_s=0.2) is None
    assert inputs.waiting == 0
    first = asyncio.ensure_future(inputs.wait("slow", timeout_s=10))
    second = asyncio.ensure_future(inputs.wait("slow", timeout_s=0.3))
    assert await second is None  # its timeout does not end the other wait
    assert not first.done() and inputs.waiting == 1
    await inputs.settle(["slow"], InputStatus.DONE)
    assert (await asyncio.wait_for(first, 5)) is not None
    assert inputs.waiting == 0
