"""Who may trigger a webhook: an HMAC-SHA256 signature over timestamp and body, or a bearer token.

Sans-I/O: `verify` takes the request's headers, body and the current time, and returns how the
request proved itself or raises `Refused` with the HTTP status and a one-line reason.

Signed requests carry (header names are case-insensitive):

- `X-Gateway-Timestamp`: Unix seconds when the sender signed;
- `X-Gateway-Signature`: `sha256=` and the hex HMAC-SHA256, keyed with the hook's secret, of the
  bytes `<timestamp>.<body>` (the timestamp as sent, a dot, the raw body);
- `X-Gateway-Delivery` (optional): the sender's id for this delivery, the same on every retry.

A timestamp more than the hook's replay window away from the gateway's clock (either way) is
refused even when the signature is right, so a captured request stops working after the window.
Inside the window, the signature itself is remembered (`gateway.automation.webhooks`), so the
same signed request cannot run twice under a new delivery id either.

A bearer token (`Authorization: Bearer <token>`) proves only who sent the request, not what it
says or when: prefer signatures where the sender can make them. Secrets are compared in constant
time.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Final, Literal

import msgspec

from gateway.automation.errors import Refused

__all__ = [
    "DELIVERY_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "Credentials",
    "Verified",
    "sign",
    "verify",
]

SIGNATURE_HEADER: Final = "x-gateway-signature"
TIMESTAMP_HEADER: Final = "x-gateway-timestamp"
DELIVERY_HEADER: Final = "x-gateway-delivery"
_SCHEME: Final = "sha256="


class Credentials(msgspec.Struct, frozen=True):
    """A hook's secrets (at least one is set)."""

    secret: str | None = None
    token: str | None = None


class Verified(msgspec.Struct, frozen=True):
    method: Literal["signature", "token"]
    signature: str | None = None
    """The verified signature's hex digest (signed requests)."""


def sign(secret: str, timestamp: int | str, body: bytes) -> str:
    """The `X-Gateway-Signature` value for `body` signed at `timestamp` (Unix seconds)."""
    return _SCHEME + _digest(secret, str(timestamp), body)


def verify(
    credentials: Credentials, headers: Mapping[str, str], body: bytes, *, now_s: float, window_s: float
) -> Verified:
    """How the request proved itself. Raises Refused (401) for a missing, wrong or stale proof.
    `headers` must be keyed by lower-case names."""
    authorization = headers.get("authorization")
    if authorization is not None and credentials.token is not None:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), credentials.token.encode()
        ):
            raise Refused(401, "the bearer token does not match")
        return Verified("token")
    signature = headers.get(SIGNATURE_HEADER)
    if signature is None or credentials.secret is None:
        wanted = " or ".join(
            name
            for name, have in (
                ("an X-Gateway-Signature", credentials.secret is not None),
                ("a bearer token", credentials.token is not None),
            )
            if have
        )
        raise Refused(401, f"this webhook needs {wanted}")
    stamp = headers.get(TIMESTAMP_HEADER, "").strip()
    if not stamp.isdigit():
        raise Refused(401, "a signed request needs X-Gateway-Timestamp (Unix seconds)")
    given = signature.strip().lower().removeprefix(_SCHEME)
    expected = _digest(credentials.secret, stamp, body)
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise Refused(401, "the signature does not match")
    if abs(now_s - int(stamp)) > window_s:
        raise Refused(401, f"the timestamp is outside the replay window ({window_s:g} s)")
    return Verified("signature", expected)


def _digest(secret: str, stamp: str, body: bytes) -> str:
    return hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
