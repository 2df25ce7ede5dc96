"""Slack's Events API endpoint: signed HTTP requests.

Slack signs each request: `X-Slack-Signature` is `v0=` + hex HMAC-SHA256 of
`v0:{X-Slack-Request-Timestamp}:{raw body}` keyed with the app's signing secret. We verify the
raw bytes (constant-time comparison) before parsing, and refuse timestamps more than five
minutes from our clock, so a captured request cannot be replayed later. `url_verification` is
answered with its challenge. Event callbacks go to the handler, which must return quickly (Slack
retries after 3 s, sending `X-Slack-Retry-Num`) and says whether the event is recorded: 200 when
it is, 503 when it is not (Slack retries that too). The handler deduplicates by `event_id`, which
covers retries and replays alike, so the retry header is only logged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

from bindings.errors import SignatureError

log = structlog.get_logger("bindings.slack.events")

MAX_SKEW_S = 300.0

EventHandler = Callable[[dict[str, Any]], Awaitable[bool]]
"""Handles one event callback; True when it is recorded (or needs nothing)."""


def verify_slack_request(
    signing_secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float,
    max_skew_s: float = MAX_SKEW_S,
) -> None:
    """Raise `SignatureError` unless `headers` carry a valid, fresh v0 signature of `body`."""
    timestamp = headers.get("x-slack-request-timestamp")
    signature = headers.get("x-slack-signature")
    if not timestamp or not signature:
        raise SignatureError("missing Slack signature headers")
    try:
        sent_at = int(timestamp)
    except ValueError as exc:
        raise SignatureError("request timestamp is not an integer") from exc
    if abs(now - sent_at) > max_skew_s:
        raise SignatureError("request timestamp outside the five-minute window")
    base = b"v0:" + timestamp.encode() + b":" + body
    expected = "v0=" + hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        raise SignatureError("invalid request signature")


class SignedEndpoint:
    """An ASGI app for one of Slack's signed Request URLs: a POST whose signature is checked
    (`verify_slack_request`) before anything of its body is parsed; `accept` answers the rest."""

    def __init__(self, signing_secret: str, *, clock: Callable[[], float] = time.time) -> None:
        self._secret = signing_secret
        self._clock = clock
        self.rejected = 0
        """Requests refused for their signature."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self._respond(Request(scope, receive))
        await response(scope, receive, send)

    async def _respond(self, request: Request) -> Response:
        if request.method != "POST":
            return PlainTextResponse("method not allowed", status_code=405)
        body = await request.body()
        try:
            verify_slack_request(self._secret, request.headers, body, now=self._clock())
        except SignatureError as exc:
            self.rejected += 1
            return PlainTextResponse(str(exc), status_code=401)
        return await self.accept(request, body)

    async def accept(self, request: Request, body: bytes) -> Response:
        """Answer a request whose signature holds."""
        raise NotImplementedError


class EventsEndpoint(SignedEndpoint):
    """The Events API's Request URL."""

    def __init__(
        self,
        signing_secret: str,
        handler: EventHandler,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(signing_secret, clock=clock)
        self._handler = handler

    async def accept(self, request: Request, body: bytes) -> Response:
        try:
            payload = json.loads(body)
        except ValueError:
            return PlainTextResponse("body is not JSON", status_code=400)
        if not isinstance(payload, dict):
            return PlainTextResponse("body is not a JSON object", status_code=400)
        kind = payload.get("type")
        if kind == "url_verification":
            return JSONResponse({"challenge": payload.get("challenge", "")})
        if kind == "event_callback":
            retry = request.headers.get("x-slack-retry-num")
            if retry is not None:
                log.info(
                    "slack retried an event",
                    event_id=payload.get("event_id"),
                    retry=retry,
                    reason=request.headers.get("x-slack-retry-reason"),
                )
            if not await self._handler(payload):
                return PlainTextResponse("event not recorded; retry later", status_code=503)
        return PlainTextResponse("")
