"""Discord's signed Interactions endpoint (slash commands over HTTP).

Discord signs every request: `X-Signature-Ed25519` is the hex Ed25519 signature, made with the
application's key, of `X-Signature-Timestamp` followed by the raw body. We verify the raw bytes
with the application's public key before parsing anything and answer 401 to anything else
(Discord itself sends badly signed requests to check that endpoints refuse them). A PING
(type 1) is answered with PONG (type 1); every other interaction goes to the handler, which
returns the interaction response.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

from bindings.errors import BindingConfigError, SignatureError

PING = 1
APPLICATION_COMMAND = 2
PONG = 1
CHANNEL_MESSAGE_WITH_SOURCE = 4
EPHEMERAL = 64

InteractionHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def load_public_key(hex_key: str) -> Ed25519PublicKey:
    """The application's public key from its hex form (as the developer portal shows it)."""
    try:
        return Ed25519PublicKey.from_public_bytes(bytes.fromhex(hex_key.strip()))
    except ValueError as exc:
        raise BindingConfigError("the Discord public key must be 64 hex characters") from exc


def verify_interaction(
    public_key: Ed25519PublicKey,
    signature_hex: str | None,
    timestamp: str | None,
    body: bytes,
    *,
    now: float | None = None,
    max_age_s: float | None = None,
) -> None:
    """Raise `SignatureError` unless `signature_hex` signs `timestamp + body`. With `max_age_s`,
    also refuse timestamps further than that from `now` (Discord does not require it)."""
    if not signature_hex or not timestamp:
        raise SignatureError("missing signature headers")
    try:
        signature = bytes.fromhex(signature_hex)
    except ValueError as exc:
        raise SignatureError("signature is not hex") from exc
    try:
        public_key.verify(signature, timestamp.encode() + body)
    except InvalidSignature as exc:
        raise SignatureError("invalid request signature") from exc
    if max_age_s is not None:
        try:
            age = abs((time.time() if now is None else now) - int(timestamp))
        except ValueError as exc:
            raise SignatureError("timestamp is not an integer") from exc
        if age > max_age_s:
            raise SignatureError("timestamp outside the accepted window")


class InteractionsEndpoint:
    """An ASGI app for `POST` interactions. Mount it where Discord's "Interactions Endpoint URL"
    points."""

    def __init__(
        self,
        public_key: Ed25519PublicKey,
        handler: InteractionHandler,
        *,
        max_age_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._public_key = public_key
        self._handler = handler
        self._max_age_s = max_age_s
        self._clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self._respond(Request(scope, receive))
        await response(scope, receive, send)

    async def _respond(self, request: Request) -> Response:
        if request.method != "POST":
            return PlainTextResponse("method not allowed", status_code=405)
        body = await request.body()
        try:
            verify_interaction(
                self._public_key,
                request.headers.get("x-signature-ed25519"),
                request.headers.get("x-signature-timestamp"),
                body,
                now=self._clock(),
                max_age_s=self._max_age_s,
            )
        except SignatureError as exc:
            return PlainTextResponse(f"invalid request signature: {exc}", status_code=401)
        try:
            interaction = json.loads(body)
            kind = int(interaction["type"])
        except (ValueError, KeyError, TypeError):
            return PlainTextResponse("bad interaction", status_code=400)
        if kind == PING:
            return JSONResponse({"type": PONG})
        return JSONResponse(await self._handler(interaction))
