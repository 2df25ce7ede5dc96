"""Named tokens: `tokens.create`, `tokens.list`, `tokens.revoke` (all `operator.admin`).

The secret of a new token is in `tokens.create`'s answer and nowhere else. Revoking a token
closes every connection it authenticated before the answer; the calling connection itself, when
it used that token, is closed right after its answer has been queued.
"""

from __future__ import annotations

from typing import Any

from gateway.methods.base import Call, MethodError, from_sessions_error, invalid
from gateway.protocol import params as p
from gateway.protocol.codes import ErrorCode
from gateway.tokens import Closer, NamedToken
from sessions import SessionsError


def _close_later(call: Call, close: Closer) -> None:
    call.state.background.spawn(close(), name=f"close-revoked-{call.conn.conn_id}")


def _row(call: Call, token: NamedToken) -> dict[str, Any]:
    return {
        "name": token.name,
        "scopes": list(token.scopes),
        "createdAt": token.created_at,
        "connections": call.state.tokens.connections(token),
    }


async def tokens_create(call: Call, params: p.TokensCreateParams) -> Any:
    try:
        token, secret = await call.state.tokens.store.create(params.name, params.scopes)
    except ValueError as exc:
        raise invalid(call.method, str(exc)) from exc
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    return {**_row(call, token), "token": secret}


async def tokens_list(call: Call, params: p.NativeEmptyParams) -> Any:
    try:
        tokens = await call.state.tokens.store.list()
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    return {"tokens": [_row(call, token) for token in tokens]}


async def tokens_revoke(call: Call, params: p.TokensRevokeParams) -> Any:
    state = call.state
    try:
        revoked = await state.tokens.revoke(params.name, spare=call.conn.conn_id)
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    if revoked is None:
        raise MethodError(ErrorCode.NOT_FOUND, f"no token named {params.name!r}")
    closed, own = revoked
    if own is not None:
        call.after_response = lambda: _close_later(call, own)
    return {"name": params.name, "revoked": True, "closedConnections": closed + (own is not None)}
