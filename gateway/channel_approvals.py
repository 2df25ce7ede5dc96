"""`ChannelApprovals`: approval requests of chat sessions, posted to the chat and decided there.

It listens to the approvals service (`Approvals.add_listener`). When a call of a session that
came from a chat starts waiting, it finds the conversation (the binding that last relayed a
message of the session in this process, else the session's newest input in the ledger) and, when
that account has `approvers`, has the binding post a message with Approve and Deny buttons there.
When the request ends, whoever ended it (a button, the dashboard, gatewayctl, the other channel,
the timeout, the end of the run), the binding edits the message to say how.

Button clicks come back through `decide_approval` (the binding already checked that the clicker
is one of its approvers): the decision is recorded with the clicker's platform user id as the
reviewer and the platform as the surface, like `exec.approval.resolve` with a `reviewer`.

State: one entry per request whose message is being posted or shown, from the moment it starts
waiting until its message has been edited to show the ending (requests wait at most their
`approval_timeout_s`, so this stays as small as the number of waiting calls). Posting and editing
run in tasks owned here; a failure is logged and ends only that message. A restart forgets the
messages: the requests they showed are cancelled at start-up, and a click on one of them edits
the message to say so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from bindings import ReplyRoute, SessionOrigin
from bindings.approvals import (
    NOT_POSTED_HERE,
    UNKNOWN_REQUEST,
    ApprovalDecider,
    ApprovalMessage,
    ButtonDecision,
    ClickAnswer,
)
from gateway.approvals import ApprovalNotFound, ApprovalRequest, Approvals
from gateway.channel_inputs import ChannelInputs
from sessions.errors import SessionsError

log = structlog.get_logger("gateway.channel_approvals")

NOT_RECORDED = "The gateway could not record the decision just now; try again."


class ApprovalBinding(Protocol):
    """What `ChannelApprovals` uses of a binding."""

    binding_id: str

    @property
    def platform(self) -> str: ...

    @property
    def approvers(self) -> frozenset[str]: ...

    def attach_approvals(self, decider: ApprovalDecider) -> None: ...

    def session_origin(self, session_key: str) -> SessionOrigin | None: ...

    async def post_approval(self, route: ReplyRoute, approval: dict[str, Any]) -> ApprovalMessage: ...

    async def show_approval(self, message: ApprovalMessage, approval: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class _Posted:
    binding_id: str
    message: ApprovalMessage


class ChannelApprovals:
    """Approval messages of the bindings in `bindings` (by binding id). `start()` subscribes to
    `approvals` and attaches itself to the bindings; `aclose()` ends its tasks (idempotent)."""

    def __init__(
        self, approvals: Approvals, bindings: Mapping[str, ApprovalBinding], inputs: ChannelInputs
    ) -> None:
        self._approvals = approvals
        self._bindings = bindings
        self._inputs = inputs
        self._posts: dict[str, asyncio.Task[_Posted | None]] = {}
        """The post of each request's message, by request id (see the module docstring)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._remove: Callable[[], None] | None = None
        self._closed = False

    def start(self) -> None:
        for binding in self._bindings.values():
            binding.attach_approvals(self)
        self._remove = self._approvals.add_listener(self._on_request)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._remove is not None:
            self._remove()
            self._remove = None
        tasks = [*self._posts.values(), *self._tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._posts.clear()

    @property
    def in_flight(self) -> int:
        """Requests whose message is being posted or is shown with buttons."""
        return len(self._posts)

    # -- requests ----------------------------------------------------------------------------

    def _on_request(self, request: ApprovalRequest) -> None:
        if self._closed:
            return
        if not request.status.terminal:
            if request.id not in self._posts:
                task = asyncio.create_task(self._post(request), name=f"approval-post:{request.id}")
                self._posts[request.id] = task
                task.add_done_callback(self._post_done)
        elif request.id in self._posts:
            self._own(self._show(request), f"approval-show:{request.id}")

    def _own(self, work: Awaitable[None], name: str) -> None:
        async def run() -> None:
            await work

        task = asyncio.create_task(run(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._work_done)

    def _work_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("approval message not edited", task=task.get_name(), error=repr(task.exception()))

    def _post_done(self, task: asyncio.Task[_Posted | None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("approval message not posted", task=task.get_name(), error=repr(task.exception()))

    async def _post(self, request: ApprovalRequest) -> _Posted | None:
        found = await self._locate(request)
        if found is None:
            return None
        binding, origin = found
        if not binding.approvers:
            return None
        message = await binding.post_approval(origin.route, request.wire())
        log.info("approval posted", approval_id=request.id, binding=binding.binding_id)
        return _Posted(binding.binding_id, message)

    async def _show(self, request: ApprovalRequest) -> None:
        post = self._posts.get(request.id)
        if post is None:
            return
        try:
            posted = await asyncio.shield(post) if not post.done() else post.result()
        except Exception:  # the post failed (logged): no message to edit
            posted = None
        finally:
            self._posts.pop(request.id, None)
        if posted is not None:
            await self._bindings[posted.binding_id].show_approval(posted.message, request.wire())

    async def _locate(self, request: ApprovalRequest) -> tuple[ApprovalBinding, SessionOrigin] | None:
        """The binding and conversation the request's session came from; None for a session
        that did not come from a chat."""
        key = request.session_key
        if key is not None:
            preferred = self._inputs.last_binding(key)
            order = sorted(self._bindings, key=lambda binding_id: binding_id != preferred)
            for binding_id in order:
                origin = self._bindings[binding_id].session_origin(key)
                if origin is not None:
                    return self._bindings[binding_id], origin
        for binding_id, binding in self._bindings.items():
            restored = await self._inputs.restore_origin(binding_id, request.session_id)
            if restored is not None:
                return binding, restored
        return None

    # -- clicks ------------------------------------------------------------------------------

    async def decide_approval(
        self, binding_id: str, approval_id: str, decision: ButtonDecision, *, sender_id: str
    ) -> ClickAnswer:
        binding = self._bindings.get(binding_id)
        post = self._posts.get(approval_id)
        posted = _result(post)
        try:
            if binding is None or posted is None or posted.binding_id != binding_id:
                request = await self._approvals.get(approval_id)
                if request.status.terminal:
                    return ClickAnswer(applied=False, approval=request.wire())
                return ClickAnswer(applied=False, refusal=NOT_POSTED_HERE)
            applied, request = await self._approvals.decide(
                approval_id, decision, by=sender_id, surface=binding.platform
            )
        except ApprovalNotFound:
            return ClickAnswer(applied=False, refusal=UNKNOWN_REQUEST)
        except SessionsError:
            log.exception("approval click not recorded", approval_id=approval_id, binding=binding_id)
            return ClickAnswer(applied=False, refusal=NOT_RECORDED)
        return ClickAnswer(applied=applied, approval=request.wire())


def _result(post: asyncio.Task[_Posted | None] | None) -> _Posted | None:
    """What a finished post made; None while it runs, or when it failed or made nothing."""
    if post is None or not post.done() or post.cancelled() or post.exception() is not None:
        return None
    return post.result()
