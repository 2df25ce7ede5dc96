"""A refused `connect`: the error answered and the close that follows it, as OpenClaw gives them
(`handshake.validate_connect` and `device_auth` build them; the connection sends them)."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.protocol.codes import CloseCode, ErrorCode, ErrorShape, truncate_close_reason
from gateway.protocol.frames import response_from_error


class ConnectRejected(msgspec.Struct, frozen=True):
    """A refused `connect`: send `response(request_id)`, then close with `close_code`."""

    error: ErrorShape
    close_code: CloseCode
    close_reason: str
    auth_failure: bool = False
    """True when a wrong or missing secret or device proof caused it (count it in the limiter)."""

    def response(self, request_id: str) -> str:
        return response_from_error(request_id, self.error)


def reject(
    message: str,
    *,
    details: Any = None,
    close_code: CloseCode = CloseCode.POLICY_VIOLATION,
    auth_failure: bool = False,
    code: ErrorCode = ErrorCode.INVALID_REQUEST,
    retryable: bool | None = None,
    retry_after_ms: int | None = None,
) -> ConnectRejected:
    """A refusal with an error shaped as OpenClaw shapes it and a close reason that fits."""
    return ConnectRejected(
        error=ErrorShape(code, message, details, retryable, retry_after_ms),
        close_code=close_code,
        close_reason=truncate_close_reason(message),
        auth_failure=auth_failure,
    )


def unavailable_rejection(
    message: str = "gateway starting; retry shortly", retry_after_ms: int = 500, *, reason: str = "starting"
) -> ConnectRejected:
    """The refusal while the gateway is not ready (or cannot check the credential now):
    UNAVAILABLE, retryable, close 1013."""
    return reject(
        message,
        code=ErrorCode.UNAVAILABLE,
        details={"reason": reason},
        close_code=CloseCode.TRY_AGAIN_LATER,
        retryable=True,
        retry_after_ms=retry_after_ms,
    )
