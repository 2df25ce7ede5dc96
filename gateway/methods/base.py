"""What a method handler receives and how it fails.

A handler is `async def handler(call: Call, params: SomeParams) -> payload`: `params` is the
request's params already validated against the method's model (`gateway.protocol.methods`), so
handlers read typed attributes, never the raw dict. `Route` pairs a handler with its params
model; the method table checks the pairing against `METHODS`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import msgspec
from pydantic import BaseModel

from gateway.protocol.codes import ErrorCode
from sessions.errors import NotFound, SessionsError, StoreError

if TYPE_CHECKING:
    from gateway.outlet import Outlet
    from gateway.state import GatewayState

P = TypeVar("P", bound=BaseModel)


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
    return MethodError(ErrorCode.INVALID_REQUEST, f"invalid {method} params: {what}")


def from_sessions_error(exc: SessionsError) -> MethodError:
    """The answer for a failure of `sessions`: NOT_FOUND, retryable UNAVAILABLE, INTERNAL for a
    store failure a retry will not fix, INVALID_REQUEST for the rest (the request's fault)."""
    if isinstance(exc, NotFound):
        return MethodError(ErrorCode.NOT_FOUND, str(exc))
    if exc.retryable:
        return MethodError(
            ErrorCode.UNAVAILABLE, str(exc), retryable=True, retry_after_ms=exc.retry_after_ms or 1000
        )
    if isinstance(exc, StoreError):
        return MethodError(ErrorCode.INTERNAL, f"internal error: {exc}", retryable=False)
    return MethodError(ErrorCode.INVALID_REQUEST, str(exc))


class ConnState(msgspec.Struct, eq=False, dict=True):
    """One authenticated connection as handlers see it."""

    conn_id: str
    outlet: Outlet
    scopes: frozenset[str]
    caps: frozenset[str]
    client: dict[str, Any] = msgspec.field(default_factory=dict)
    remote: str = ""
    credential: str | None = None
    """The named token the connection authenticated with; None for the root token or password."""


class Call(msgspec.Struct, eq=False, dict=True):
    """One request as its handler sees it (the params come separately, typed)."""

    state: GatewayState
    conn: ConnState
    id: str
    method: str
    respond_later: Callable[[Any | None, MethodError | None], None] | None = None
    """Answer the same request id again later (`agent`'s final answer)."""
    after_response: Callable[[], None] | None = None
    """Run right after the response is queued (resume replays go after the answer)."""


@dataclass(frozen=True, slots=True)
class Route(Generic[P]):
    """A handler and the params model it takes."""

    params: type[P]
    handler: Callable[[Call, P], Awaitable[Any]]

    async def __call__(self, call: Call, params: BaseModel) -> Any:
        """Run the handler. Raises TypeError when `params` is not of the route's model (the
        method table and `METHODS` disagree: a bug)."""
        if not isinstance(params, self.params):
            raise TypeError(f"{call.method} got {type(params).__name__}, expects {self.params.__name__}")
        return await self.handler(call, params)
