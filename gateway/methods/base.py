"""What a method handler receives and how it fails."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sessions.errors import NotFound, SessionsError

if TYPE_CHECKING:
    from gateway.hub import Outlet
    from gateway.state import GatewayState


class MethodError(Exception):
    """A request failed; becomes `{ok:false, error:{code, message, details?, retryable?, ...}}`."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retryable: bool | None = None,
        retry_after_ms: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details
        self.retryable = retryable
        self.retry_after_ms = retry_after_ms


def invalid(method: str, what: str) -> MethodError:
    return MethodError("INVALID_REQUEST", f"invalid {method} params: {what}")


def from_sessions_error(exc: SessionsError) -> MethodError:
    if isinstance(exc, NotFound):
        return MethodError("NOT_FOUND", str(exc))
    if exc.retryable:
        return MethodError("UNAVAILABLE", str(exc), retryable=True, retry_after_ms=exc.retry_after_ms or 1000)
    return MethodError("INVALID_REQUEST", str(exc))


@dataclass(eq=False)
class ConnState:
    """One authenticated connection as handlers see it."""

    conn_id: str
    outlet: Outlet
    scopes: frozenset[str]
    caps: frozenset[str]
    client: dict[str, Any] = field(default_factory=dict)
    remote: str = ""


@dataclass(eq=False)
class Call:
    state: GatewayState
    conn: ConnState
    id: str
    method: str
    params: dict[str, Any]
    respond_later: Callable[[Any | None, MethodError | None], None] | None = None
    after_response: Callable[[], None] | None = None
    """Run right after the response is queued (resume replays go after the answer)."""

    def str_param(self, *names: str, required: bool = True, default: str | None = None) -> str | None:
        for name in names:
            value = self.params.get(name)
            if value is None:
                continue
            if not isinstance(value, str) or not value:
                raise invalid(self.method, f"{name} must be a non-empty string")
            return value
        if required:
            raise invalid(self.method, f"{names[0]} is required")
        return default

    def int_param(self, name: str, *, default: int, minimum: int = 0, maximum: int = 10_000) -> int:
        value = self.params.get(name, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(self.method, f"{name} must be an integer")
        if value < minimum or value > maximum:
            raise invalid(self.method, f"{name} must be between {minimum} and {maximum}")
        return value


Handler = Callable[[Call], Awaitable[Any]]
