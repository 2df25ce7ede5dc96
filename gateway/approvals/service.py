"""The approvals service: tool calls that wait for a person, and the decisions that end them.

`Approvals` is owned by the gateway state. A tool call the policy asks about (`layer`) calls
`wait_for(...)`: the request is stored (`tool_approvals`), announced to every connection with the
scope `operator.approvals` (`exec.approval.requested`), and the call waits until one of:

- a decision (`decide`: the `exec.approval.resolve` method, the dashboard, gatewayctl, a chat
  button): allow-once, allow-always (calls of the same shape in the session then run unasked,
  see `shape`) or deny, with an optional reason;
- the agent's `approval_timeout_s` passes: `expired`, and the call is denied;
- the run is aborted: `cancelled` (`run-aborted`, or `gateway-restart` when the gateway stops).

Every ending is stored with who ended it, from which surface and when, logged on the audit log
(`gateway.audit`), and announced (`exec.approval.resolved`). Listeners (`add_listener`: the chat
channels, which post and edit approval messages) see each request when it starts waiting and
again when it ends. The waiting itself is in memory and
lives as long as the call waits; a request still pending when the gateway starts belonged to a
process that is gone (its run is closed as interrupted by recovery), so `start()` cancels it with
a note saying so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
import structlog

from agent_core import AbortSignal
from gateway.approvals.errors import ApprovalNotFound, ApprovalTransition
from gateway.approvals.request import ApprovalRequest, ApprovalStatus, Decision, Ending
from gateway.approvals.store import ApprovalStore
from gateway.sandbox.risk import RiskTier
from sessions.ids import new_id
from sessions.termination import TerminationReason

if TYPE_CHECKING:
    # The policy (command classification, path rules) is imported with the first run, whose
    # tools look up its agent's policy; the service itself runs from start-up on.
    from gateway.approvals.policy import Ask

__all__ = ["Approvals", "CallSite", "Listener", "Publish"]

log = structlog.get_logger("gateway.approvals")
audit_log = structlog.get_logger("gateway.audit")

Publish = Callable[[str, dict[str, Any]], None]
"""Send an event (`exec.approval.requested` / `.resolved`) with a request's wire snapshot."""

Listener = Callable[[ApprovalRequest], None]
"""Told of a request that started waiting (`pending`) and again once it ended (terminal).
Called synchronously; it must not block (start owned work instead) and should not raise (an
exception is logged and the other listeners still run)."""

RESTART_NOTE = (
    "The gateway restarted while this request waited; its run was closed as interrupted. "
    "Send the message again to retry."
)


REMOTE_POLL_S = 0.25
"""How often a wait for a decision on a call waiting on another node reads the record."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class CallSite(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    """Where a waiting call comes from: its session, run and agent, and how long it may wait."""

    session_id: str
    session_key: str | None
    agent_id: str
    run_id: str
    timeout_s: float


class _Waiting(msgspec.Struct, eq=False, dict=True):
    request: ApprovalRequest
    done: asyncio.Event = msgspec.field(default_factory=asyncio.Event)


class Approvals:
    def __init__(self, store: ApprovalStore, publish: Publish, *, clock: Callable[[], int] = _now_ms) -> None:
        self.store = store
        self._publish = publish
        self._clock = clock
        self._waiting: dict[str, _Waiting] = {}
        """Requests whose call waits now, by id; an entry lives until its call stops waiting."""
        self._listeners: list[Listener] = []
        self.share: Publish | None = None
        """In a cluster: what this node announces also goes to the other nodes (whose clients
        see it; `remote` there), and a decision made on another node reaches the waiting call."""
        self.clustered = False
        """In a cluster, a node that starts cancels only what it takes over (`cancel_session`),
        not every pending request: the others' calls still wait."""

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Tell `listener` of every request that starts waiting or ends, until the returned
        function is called."""
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def _notify(self, request: ApprovalRequest) -> None:
        for listener in list(self._listeners):
            try:
                listener(request)
            except Exception:
                log.exception("approval listener failed", approval_id=request.id)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def start(self) -> list[ApprovalRequest]:
        """Cancel the requests a previous process left pending (on one node); returns them."""
        if self.clustered:
            return []
        return await self._cancel_pending(None)

    async def cancel_session(self, session_id: str) -> list[ApprovalRequest]:
        """Cancel the pending requests of a session whose run another node left open (this node
        has just taken the session over)."""
        ended = await self._cancel_pending(session_id)
        for request in ended:
            self._announce("exec.approval.resolved", request)
        return ended

    async def _cancel_pending(self, session_id: str | None) -> list[ApprovalRequest]:
        ended: list[ApprovalRequest] = []
        ending = Ending(status=ApprovalStatus.CANCELLED, reason="gateway-restart", note=RESTART_NOTE)
        while batch := await self.store.requests(pending_only=True, limit=500, session_id=session_id):
            for request in batch:
                done = await self.store.end(request, ending, self._clock())
                if done is not None:
                    self._audit("approval.cancelled", done)
                    ended.append(done)
        return ended

    def _announce(self, event: str, request: ApprovalRequest) -> None:
        payload = request.wire()
        self._publish(event, payload)
        if self.share is not None:
            self.share(event, payload)

    async def remote(self, event: str, payload: dict[str, Any]) -> None:
        """An announcement of another node: to this node's clients and listeners, and, for a
        decision made there on a call that waits here, to the call."""
        self._publish(event, payload)
        approval_id = payload.get("id")
        if not isinstance(approval_id, str):
            return
        request = await self.store.get(approval_id)
        if request is None:
            return
        waiting = self._waiting.get(approval_id)
        if waiting is not None and request.status.terminal and not waiting.done.is_set():
            waiting.request = request
            waiting.done.set()
        self._notify(request)

    # --- the waiting call ---------------------------------------------------------------------

    async def granted(self, session_id: str, ask: Ask) -> ApprovalRequest | None:
        """The session's allow-always decision that covers a call of `ask`'s shape and risk."""
        for grant in await self.store.session_grants(session_id):
            risk = grant.detail.get("risk")
            try:
                tier = RiskTier.parse(risk) if isinstance(risk, str) else RiskTier.NONE
            except ValueError:
                continue
            if grant.detail.get("shape") == ask.shape and ask.risk <= tier:
                return grant
        return None

    async def wait_for(
        self,
        site: CallSite,
        *,
        tool_call_id: str,
        tool_name: str,
        args: Any,
        ask: Ask,
        signal: AbortSignal | None,
    ) -> ApprovalRequest:
        """Store and announce a request, wait until it ends, return it ended. Cancelling the
        caller cancels the request too."""
        from gateway.approvals.policy import describe

        now = self._clock()
        request = ApprovalRequest(
            id=new_id(),
            session_id=site.session_id,
            session_key=site.session_key,
            agent_id=site.agent_id,
            run_id=site.run_id,
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            detail=describe(ask, args),
            created_at=now,
            expires_at=now + int(site.timeout_s * 1000),
        )
        waiting = _Waiting(request)
        self._waiting[request.id] = waiting
        try:
            await self.store.add(request)
            self._audit("approval.requested", request)
            self._announce("exec.approval.requested", request)
            self._notify(request)
            ending = await self._until_ended(waiting, site.timeout_s, signal)
            if ending is not None:
                await self._end(request, ending)
        except asyncio.CancelledError:
            ending = Ending(
                status=ApprovalStatus.CANCELLED, reason="run-aborted", note="The run was stopped."
            )
            await asyncio.shield(self._end(request, ending))
            raise
        finally:
            self._waiting.pop(request.id, None)
        ended = waiting.request if waiting.request.status.terminal else await self.store.get(request.id)
        return ended if ended is not None else request

    async def _until_ended(
        self, waiting: _Waiting, timeout_s: float, signal: AbortSignal | None
    ) -> Ending | None:
        """The ending the wait itself decides (timeout, abort), or None when a decision came."""
        waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(waiting.done.wait())}
        if signal is not None:
            waits.add(asyncio.ensure_future(signal.wait()))
        try:
            await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
        if waiting.done.is_set():
            return None
        if signal is not None and signal.aborted:
            restart = signal.reason == TerminationReason.GATEWAY_SHUTDOWN
            return Ending(
                status=ApprovalStatus.CANCELLED,
                reason="gateway-restart" if restart else "run-aborted",
                note="The gateway stopped during the run." if restart else "The run was stopped.",
            )
        return Ending(
            status=ApprovalStatus.EXPIRED,
            reason="timeout",
            note=f"No one decided within {timeout_s:g} s.",
        )

    async def _end(self, request: ApprovalRequest, ending: Ending) -> ApprovalRequest | None:
        done = await self.store.end(request, ending, self._clock())
        if done is not None:
            self._ended(done)
        return done

    def _ended(self, request: ApprovalRequest) -> None:
        waiting = self._waiting.get(request.id)
        if waiting is not None:
            waiting.request = request
            waiting.done.set()
        self._audit("approval.decided" if request.decided_by else f"approval.{request.status.value}", request)
        self._announce("exec.approval.resolved", request)
        self._notify(request)

    # --- deciding -----------------------------------------------------------------------------

    async def get(self, approval_id: str) -> ApprovalRequest:
        """Raises ApprovalNotFound."""
        waiting = self._waiting.get(approval_id)
        if waiting is not None and waiting.request.status.terminal:
            return waiting.request
        request = await self.store.get(approval_id)
        if request is None:
            raise ApprovalNotFound(approval_id)
        return request

    async def decide(
        self, approval_id: str, decision: Decision, *, by: str, surface: str, note: str | None = None
    ) -> tuple[bool, ApprovalRequest]:
        """Apply a person's decision. Returns `(applied, request)`: `applied` is False when the
        request had already ended (the request is then returned as it ended). Raises
        ApprovalNotFound."""
        request = await self.get(approval_id)
        if request.status.terminal:
            return False, request
        if decision == "deny":
            ending = Ending(status=ApprovalStatus.DENIED, reason="user", decision="deny", note=note,
                            decided_by=by, surface=surface)  # fmt: skip
        else:
            ending = Ending(status=ApprovalStatus.ALLOWED, reason="user", decision=decision, note=note,
                            decided_by=by, surface=surface)  # fmt: skip
        try:
            done = await self._end(request, ending)
        except ApprovalTransition:
            done = None
        if done is None:
            return False, await self.get(approval_id)
        return True, done

    async def wait_decision(self, approval_id: str, timeout_s: float) -> ApprovalRequest:
        """The request once it has ended, or as it is when `timeout_s` passes. Raises
        ApprovalNotFound."""
        waiting = self._waiting.get(approval_id)
        if waiting is not None and not waiting.done.is_set():
            try:
                await asyncio.wait_for(waiting.done.wait(), timeout=max(0.0, timeout_s))
            except TimeoutError:
                pass
            return await self.get(approval_id)
        request = await self.get(approval_id)
        if self.clustered:  # the call may wait on another node: watch the record
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            while not request.status.terminal and loop.time() < deadline:
                await asyncio.sleep(min(REMOTE_POLL_S, max(0.0, deadline - loop.time())))
                request = await self.get(approval_id)
        return request

    async def requests(
        self, *, history: bool = False, limit: int = 100, session_id: str | None = None
    ) -> list[ApprovalRequest]:
        return await self.store.requests(pending_only=not history, limit=limit, session_id=session_id)

    def _audit(self, event: str, request: ApprovalRequest) -> None:
        audit_log.warning(
            event,
            approval_id=request.id,
            session_id=request.session_id,
            session_key=request.session_key,
            agent_id=request.agent_id,
            run_id=request.run_id,
            tool_call_id=request.tool_call_id,
            tool=request.tool_name,
            command=request.detail.get("command"),
            risk=request.detail.get("risk"),
            rule=request.detail.get("rule"),
            status=request.status.value,
            decision=request.decision,
            reason=request.reason,
            note=request.note,
            decided_by=request.decided_by,
            surface=request.surface,
        )
