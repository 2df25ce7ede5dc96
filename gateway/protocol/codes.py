"""Codes of the wire protocol: error codes, `error.details.code` values, WebSocket close codes.

Values follow what OpenClaw gateways send (`reference/openclaw-gateway.md` section 2), since real
clients branch on them. `ErrorShape` is the `error` object of a failed response.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import Any

import msgspec

PROTOCOL_VERSION = 4
"""The only protocol version this gateway speaks; `connect` must offer a range that contains it."""

MAX_CLOSE_REASON_BYTES = 123
"""A close frame carries at most 125 payload bytes, two of which are the code."""


class ErrorCode(StrEnum):
    """`error.code` of a failed response."""

    INVALID_REQUEST = "INVALID_REQUEST"
    """Bad frame, unknown method, schema failure, and every handshake refusal (reason in details)."""
    FORBIDDEN = "FORBIDDEN"
    """The connection lacks the scope the method needs (`details.code` MISSING_SCOPE)."""
    UNAVAILABLE = "UNAVAILABLE"
    """Busy, starting or stopping; usually `retryable` with `retryAfterMs`."""
    INTERNAL = "INTERNAL"
    """The gateway failed unexpectedly (a bug or damaged state; its log has the details). Never
    `retryable`: the same request would fail the same way. Not in OpenClaw's set (it answers
    `UNAVAILABLE` without `retryable`); the schema allows any code and clients show the message."""
    NOT_FOUND = "NOT_FOUND"
    """An unknown session, run or entry."""
    NOT_PAIRED = "NOT_PAIRED"
    """A device identity that has not been approved (`pairing.approve`)."""
    APPROVAL_NOT_FOUND = "APPROVAL_NOT_FOUND"
    """An approval id that does not exist or has already been resolved."""


class DetailCode(StrEnum):
    """`error.details.code`: the specific reason behind an `ErrorCode`."""

    PROTOCOL_MISMATCH = "PROTOCOL_MISMATCH"
    AUTH_TOKEN_MISSING = "AUTH_TOKEN_MISSING"
    AUTH_TOKEN_MISMATCH = "AUTH_TOKEN_MISMATCH"
    AUTH_PASSWORD_MISSING = "AUTH_PASSWORD_MISSING"
    AUTH_PASSWORD_MISMATCH = "AUTH_PASSWORD_MISMATCH"
    AUTH_RATE_LIMITED = "AUTH_RATE_LIMITED"
    PAIRING_REQUIRED = "PAIRING_REQUIRED"
    DEVICE_IDENTITY_REQUIRED = "DEVICE_IDENTITY_REQUIRED"
    DEVICE_AUTH_NONCE_REQUIRED = "DEVICE_AUTH_NONCE_REQUIRED"
    DEVICE_AUTH_NONCE_MISMATCH = "DEVICE_AUTH_NONCE_MISMATCH"
    DEVICE_AUTH_SIGNATURE_INVALID = "DEVICE_AUTH_SIGNATURE_INVALID"
    DEVICE_AUTH_SIGNATURE_EXPIRED = "DEVICE_AUTH_SIGNATURE_EXPIRED"
    DEVICE_AUTH_DEVICE_ID_MISMATCH = "DEVICE_AUTH_DEVICE_ID_MISMATCH"
    DEVICE_AUTH_PUBLIC_KEY_INVALID = "DEVICE_AUTH_PUBLIC_KEY_INVALID"
    MISSING_SCOPE = "MISSING_SCOPE"
    UNKNOWN_AGENT_ID = "UNKNOWN_AGENT_ID"


class CloseCode(IntEnum):
    """WebSocket close codes the gateway sends."""

    NORMAL = 1000
    """Normal closure; also what OpenClaw sends after a non-JSON first frame."""
    PROTOCOL_ERROR = 1002
    """Protocol version mismatch in `connect`."""
    POLICY_VIOLATION = 1008
    """Handshake refused (auth, first frame not connect), slow consumer, bad frame."""
    MESSAGE_TOO_BIG = 1009
    """A frame over `maxPayload` (or over the pre-auth limit before `connect` succeeded)."""
    INTERNAL_ERROR = 1011
    """The server hit an unexpected condition."""
    SERVICE_RESTART = 1012
    """The gateway is shutting down (after the `shutdown` event)."""
    TRY_AGAIN_LATER = 1013
    """The gateway is still starting; clients retry."""


class ErrorShape(msgspec.Struct, frozen=True):
    """The `error` object of a response: `{code, message, details?, retryable?, retryAfterMs?}`."""

    code: ErrorCode | str
    message: str
    details: Any = None
    retryable: bool | None = None
    retry_after_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; absent optional fields are left out."""
        out: dict[str, Any] = {"code": str(self.code), "message": self.message}
        if self.details is not None:
            out["details"] = self.details
        if self.retryable is not None:
            out["retryable"] = self.retryable
        if self.retry_after_ms is not None:
            out["retryAfterMs"] = self.retry_after_ms
        return out


def truncate_close_reason(reason: str) -> str:
    """Cut `reason` to what fits in a close frame (123 UTF-8 bytes), never splitting a character."""
    encoded = reason.encode("utf-8", "replace")
    return encoded[:MAX_CLOSE_REASON_BYTES].decode("utf-8", "ignore")
