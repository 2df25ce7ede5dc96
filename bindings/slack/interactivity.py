"""Slack's interactivity Request URL (mode `events`): signed button clicks over HTTP.

Slack posts each interaction as a form (`application/x-www-form-urlencoded`) with one field,
`payload`, holding the JSON payload (`block_actions` for a button click). It is signed exactly
as Events API requests are (`verify_slack_request`: v0 HMAC-SHA256 of the raw body, timestamps
within five minutes), and checked the same way before anything is parsed. Slack waits three
seconds for the 200; the handler decides a click in well under that.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from bindings.slack.events_api import SignedEndpoint

InteractiveHandler = Callable[[dict[str, Any]], Awaitable[None]]


class InteractivityEndpoint(SignedEndpoint):
    """An ASGI app for Slack's interactivity Request URL."""

    def __init__(
        self, signing_secret: str, handler: InteractiveHandler, *, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(signing_secret, clock=clock)
        self._handler = handler

    async def accept(self, request: Request, body: bytes) -> Response:
        try:
            fields = parse_qs(body.decode(), strict_parsing=True)
            payload = json.loads(fields["payload"][0])
        except (ValueError, KeyError, UnicodeDecodeError):
            return PlainTextResponse("expected a form with a JSON payload", status_code=400)
        if not isinstance(payload, dict):
            return PlainTextResponse("payload is not a JSON object", status_code=400)
        await self._handler(payload)
        return PlainTextResponse("")
