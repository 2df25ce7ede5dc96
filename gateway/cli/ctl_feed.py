"""One session's native events, in order and each once, across gaps and dropped connections.

    async with SessionFeed(ctl, key="agent:main:main", cursor=ResumeCursor(last_seq=0)) as feed:
        await feed.open()                  # subscribes; CtlError (code NOT_FOUND) for an unknown key
        while True:
            frame = await feed.next()      # the next event to show, reconnecting when needed
            ...

The connection belongs to the feed until `aclose()`. When it drops, `next()` reconnects (backing
off up to 2 s between attempts, for as long as it takes: the caller decides when to give up, e.g.
on Ctrl-C) and resubscribes by session id with `afterSeq` = the last seq shown.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gateway.cli.ctl_context import Ctl
from gateway.cli.ctl_errors import CtlError, ExitCode
from gateway.cli.ctl_follow import ResumeCursor, Verdict
from gateway.client import GatewayClient

MAX_BACKOFF_S = 2.0


class SessionFeed:
    def __init__(
        self, ctl: Ctl, *, key: str, cursor: ResumeCursor, client: GatewayClient | None = None
    ) -> None:
        self.ctl = ctl
        self.key = key
        self.cursor = cursor
        self.client = client

    async def __aenter__(self) -> SessionFeed:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def open(self) -> dict[str, Any]:
        """Connect (unless given a client) and subscribe. Raises CtlError."""
        if self.client is None:
            self.client = await self.ctl.open_client()
        return await self._subscribe()

    async def aclose(self) -> None:
        """Close the connection. Idempotent."""
        if self.client is not None:
            await self.client.aclose()

    async def _subscribe(self) -> dict[str, Any]:
        assert self.client is not None
        params: dict[str, Any] = (
            {"sessionId": self.cursor.session_id} if self.cursor.session_id else {"key": self.key}
        )
        if self.cursor.last_seq is not None:
            params["afterSeq"] = self.cursor.last_seq
        answer = await self.ctl.call(self.client, "sessions.events.subscribe", params)
        self.cursor.subscribed(answer)
        if answer.get("replay") == "compacted":
            self.ctl.out.note("old deltas were pruned on the gateway: a snapshot stands in for them")
        return dict(answer)

    async def next(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next frame to show, or None when `timeout` passes without one. A reconnect starts
        the wait over: the frames it replays are on their way, not missing."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            assert self.client is not None
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            frame = await self.client.next_event(timeout=remaining)
            if frame is None:
                if not self.client.closed.is_set():
                    return None
                await self._reconnect()
                deadline = None if timeout is None else time.monotonic() + timeout
                continue
            if frame.get("event") == "shutdown":
                reason = (frame.get("payload") or {}).get("reason") or "shutting down"
                self.ctl.out.note(f"the gateway is stopping ({reason}); will reconnect")
                continue
            if _approval_of(frame, self.cursor.session_id):
                return frame  # live only: a request is not replayed on resume
            verdict = self.cursor.verdict(frame)
            if verdict is Verdict.SHOW:
                return frame
            if verdict is Verdict.GAP:
                # The hub dropped some deltas for us: ask again from the last one shown.
                try:
                    await self._subscribe()
                except CtlError as exc:
                    if exc.exit_code != ExitCode.UNREACHABLE:
                        raise
                    # The connection dropped meanwhile: the next read reconnects and resumes.

    async def _reconnect(self) -> None:
        assert self.client is not None
        await self.client.aclose()
        out = self.ctl.out
        out.note(
            f"lost the connection to the gateway; reconnecting to resume after event #{self.cursor.last_seq}"
        )
        delay = 0.1
        with out.waiting(f"reconnecting to {self.ctl.target.url}"):
            while True:
                try:
                    self.client = await self.ctl.open_client(quiet=True)
                    answer = await self._subscribe()
                    break
                except CtlError as exc:
                    if exc.exit_code != ExitCode.UNREACHABLE:
                        raise  # refused credentials, or the session is gone: retrying will not help
                    await self.client.aclose()  # a connection that dropped again while subscribing
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF_S)
        out.note(f"reconnected; resumed after event #{self.cursor.last_seq} (replay: {answer.get('replay')})")


def _approval_of(frame: dict[str, Any], session_id: str | None) -> bool:
    """Whether `frame` is an approval event of the followed session."""
    payload = frame.get("payload")
    return (
        str(frame.get("event")).startswith("exec.approval.")
        and isinstance(payload, dict)
        and session_id is not None
        and payload.get("sessionId") == session_id
    )
