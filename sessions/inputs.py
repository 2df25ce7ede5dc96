"""The outcomes of accepted inputs: answering repeats, moving inputs on, settling them, waiting.

Every accepted input ends in exactly one recorded outcome (one of `FINAL_INPUT_STATUSES`):
`done` (with the outcome of the run it ended in), `rejected` (the run could not happen) or
`interrupted` (the gateway stopped during its run). `Inputs` records those steps in the store's
input ledger and wakes whoever waits for an outcome (`wait`). Deciding what an input becomes
(a run, a steer, a follow-up) is `sessions.queueing`'s job.

A waiter lives from `wait` until the outcome is recorded, the wait times out, or `close()`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import msgspec
import structlog

from sessions.errors import InvalidTransition, NotFound, SessionsError
from sessions.input_ledger import FINAL_INPUT_STATUSES
from sessions.live import RunState
from sessions.records import InputRecord, SessionRecord
from sessions.schema import InputStatus, RunStatus
from sessions.store import Store
from sessions.termination import Outcome

__all__ = ["Inputs", "SubmitResult"]

log = structlog.get_logger("sessions.inputs")


class SubmitResult(msgspec.Struct, frozen=True, dict=True):
    """The answer to an inbound message. `status` is `started` (accepted now), `in_flight` (the
    key was seen and has not finished) or the stored outcome (`ok`, `error`, `aborted`).
    `disposition` says what an accepted message became: `queued` (a run of its own, or joined a
    run that has not started), `steered` or `followup`."""

    run_id: str
    status: str
    session: SessionRecord
    disposition: str = "queued"
    result: dict[str, Any] | None = None


class Inputs:
    """The input ledger as runs use it. `find_run(run_id)` finds a run of a live session (for
    waits on a run id that names no input)."""

    def __init__(self, store: Store, *, find_run: Callable[[str], RunState | None]) -> None:
        self._store = store
        self._find_run = find_run
        # Per input key, one event per waiting caller, set once the input's outcome is recorded.
        # A caller that stops waiting (timeout, outcome read from the ledger) takes its own out.
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._closed = False
        self.poll_s: float | None = None
        """Read the ledger again this often while waiting (in a cluster, another node may
        record the outcome); None: wait to be woken."""

    async def repeat(self, record: InputRecord, session: SessionRecord) -> SubmitResult:
        """The answer to a key seen before: `in_flight` until its outcome is recorded, then the
        outcome."""
        if record.status not in FINAL_INPUT_STATUSES:
            return SubmitResult(
                run_id=record.idempotency_key, status="in_flight", session=session, disposition=record.status
            )
        result = await self.result(record)
        return SubmitResult(
            run_id=record.idempotency_key,
            status=str(result.get("status", Outcome.OK.value)),
            session=session,
            disposition=record.status,
            result=result,
        )

    async def mark(self, keys: list[str], status: InputStatus, run_id: str) -> None:
        """Record a step of inputs that have no outcome yet (those that have one keep it)."""
        for key in keys:
            with contextlib.suppress(InvalidTransition):
                await self._store.inputs.update(key, status=status, run_id=run_id)

    async def settle(
        self, keys: list[str], status: InputStatus, *, reason: str | None = None, run_id: str | None = None
    ) -> None:
        """Record the final outcome of inputs (once; a recorded outcome never changes) and wake
        their waiters. Failures to record are logged, never raised."""
        for key in keys:
            try:
                await self._store.inputs.update(key, status=status, reason=reason, run_id=run_id)
            except (InvalidTransition, NotFound):
                pass
            except SessionsError:
                log.exception("could not record an input's outcome", key=key)
                continue
            self._wake(key)

    def settled(self, keys: list[str]) -> None:
        """Wake the waiters of inputs whose outcome the caller has just recorded itself (with
        `InputLedger.move_in`, in a transaction of its own)."""
        for key in keys:
            self._wake(key)

    def _wake(self, key: str) -> None:
        for event in self._waiters.pop(key, ()):
            event.set()

    async def wait(self, run_id: str, timeout_s: float | None = None) -> dict[str, Any] | None:
        """Wait until the input `run_id` (or the run of that id) has its outcome and return the
        run's stored result (`status`: ok, error or aborted). None on timeout, for an unknown id,
        or when `close()` comes first."""
        record = await self._store.inputs.get(run_id)
        if record is None:
            return await self._wait_plain_run(run_id, timeout_s)
        if record.status not in FINAL_INPUT_STATUSES:
            waiter = asyncio.Event()
            self._waiters.setdefault(run_id, set()).add(waiter)
            try:
                record = await self._store.inputs.get(run_id)  # after registering: no outcome slips by
                if record is not None and record.status not in FINAL_INPUT_STATUSES and not self._closed:
                    record = await self._wait_for(run_id, waiter, timeout_s)
                    if record is None:
                        return None
            finally:
                self._forget(run_id, waiter)
        if record is None or record.status not in FINAL_INPUT_STATUSES:
            return None
        return await self.result(record)

    async def _wait_for(
        self, run_id: str, waiter: asyncio.Event, timeout_s: float | None
    ) -> InputRecord | None:
        """The input once `waiter` is set (or, with `poll_s`, once the ledger shows its outcome);
        None on timeout."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            slice_s = self.poll_s
            if deadline is not None:
                left = deadline - loop.time()
                if left <= 0:
                    return None
                slice_s = left if slice_s is None else min(slice_s, left)
            try:
                await asyncio.wait_for(waiter.wait(), timeout=slice_s)
            except TimeoutError:
                if self.poll_s is None:
                    return None
                record = await self._store.inputs.get(run_id)
                if record is None or record.status in FINAL_INPUT_STATUSES:
                    return record
                continue
            return await self._store.inputs.get(run_id)

    @property
    def waiting(self) -> int:
        """Callers waiting for an outcome now."""
        return sum(len(waiters) for waiters in self._waiters.values())

    def _forget(self, run_id: str, waiter: asyncio.Event) -> None:
        waiters = self._waiters.get(run_id)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del self._waiters[run_id]

    def close(self) -> None:
        """Wake every waiter (they answer None unless the outcome is there); later waits do
        not block. Idempotent."""
        self._closed = True
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()

    async def result(self, record: InputRecord) -> dict[str, Any]:
        """The result of a settled input: its run's stored result, with the input's own outcome
        where the run could not say (rejected, interrupted)."""
        run = await self._store.runs.get(record.run_id) if record.run_id else None
        if record.status == InputStatus.REJECTED or run is None:
            out: dict[str, Any] = {"runId": record.idempotency_key, "status": Outcome.ERROR.value}
            if record.status == InputStatus.INTERRUPTED:
                out["status"] = Outcome.ABORTED.value
            if record.reason:
                out["errorMessage"] = record.reason
            return out
        result = dict(run.result) if isinstance(run.result, dict) else {}
        result.setdefault("runId", run.id)
        if record.status == InputStatus.INTERRUPTED:
            result["status"] = Outcome.ABORTED.value
        else:
            result["status"] = result.get("status") or Outcome.of_run(run.status).value
        return result

    async def _wait_plain_run(self, run_id: str, timeout_s: float | None) -> dict[str, Any] | None:
        run = self._find_run(run_id)
        if run is not None:
            try:
                await asyncio.wait_for(run.finished.wait(), timeout=timeout_s)
            except TimeoutError:
                return None
        record = await self._store.runs.get(run_id)
        if record is None or record.status == RunStatus.RUNNING:
            return None
        return dict(record.result or {"runId": run_id, "status": Outcome.of_run(record.status).value})
