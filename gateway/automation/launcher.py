"""Starting a run for a job or a webhook: the same path a `chat.send` takes.

`Launcher.launch` ensures the target session (created on first use, for the named agent) and
submits the message to the session manager under the run's id as idempotency key. The input
ledger records it before `launch` returns, and the request's `claim` (the job's slot, the
webhook's delivery ids) commits in the same transaction, so a run is recorded exactly when its
claim is. A key seen before starts nothing (the answer says `in_flight` or the stored outcome).

When the message joins a run that is already active or waiting (the session was busy), the run
that answers it is another input's; a reply delivery then follows that run through `Replies`,
since the ledger lookup the reply relay does for a run only knows the input that started it.
Messages from jobs and webhooks are queued as follow-ups: they wait for an active run's turn to
end rather than steer it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from sessions import InputClaim, SessionManager, SubmitResult

if TYPE_CHECKING:
    from bindings import ReplyRoute

__all__ = ["Launcher", "Replies", "RunRequest"]

QUEUE_MODE = "followup"


class Replies(Protocol):
    """The running chat bindings, as deliveries use them."""

    def running(self) -> list[tuple[str, str]]:
        """`(platform, account)` of each running binding."""
        ...

    def follow(self, run_id: str, binding_id: str, session_key: str, route: ReplyRoute) -> None:
        """Relay the reply of run `run_id` to `route` through binding `binding_id`."""
        ...


class RunRequest(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    run_id: str
    agent_id: str
    session_key: str
    message: str
    claim: InputClaim
    source: Mapping[str, Any] = msgspec.field(default_factory=dict)
    reply: tuple[str, ReplyRoute] | None = None
    """The binding and route the reply goes to, when one was asked for."""


class Launcher:
    """Submits run requests to the session manager `manager()` returns (it may be replaced)."""

    def __init__(
        self,
        manager: Callable[[], SessionManager],
        *,
        replies: Replies | None = None,
        on_started: Callable[[str], None] | None = None,
    ) -> None:
        self._manager = manager
        self.replies = replies
        self._on_started = on_started

    async def launch(self, request: RunRequest) -> SubmitResult:
        """Record and start the run. Raises what the claim raises (nothing is recorded then) and
        `sessions.errors` (StoreUnavailable or LaneFull: try again later; NotFound for an
        unknown agent)."""
        manager = self._manager()
        session = await manager.ensure_session(request.session_key, agent_id=request.agent_id)
        source = dict(request.source)
        if request.reply is not None:
            binding_id, route = request.reply
            source.update(binding=binding_id, sessionKey=request.session_key, replyRoute=route.as_dict())
        result = await manager.submit(
            session=session,
            message=request.message,
            idempotency_key=request.run_id,
            queue_mode=QUEUE_MODE,
            source=source,
            claim=request.claim,
        )
        if result.status != "started":
            return result
        if self._on_started is not None:
            self._on_started(session.id)
        if request.reply is not None and self.replies is not None:
            answering = await self._answering_run(manager, request.run_id)
            if answering is not None and answering != request.run_id:
                binding_id, route = request.reply
                self.replies.follow(answering, binding_id, request.session_key, route)
        return result

    @staticmethod
    async def _answering_run(manager: SessionManager, run_id: str) -> str | None:
        record = await manager.store.inputs.get(run_id)
        return record.run_id if record is not None else None
