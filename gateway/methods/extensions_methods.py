"""Python extensions: `extensions.list`, `extensions.enable`, `extensions.disable` (all
`operator.admin`).

Every enable or disable is stored with who asked (`actor`: the credential, the client and its
address) and audited; the change applies at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.methods.base import Call, ConnState, MethodError, from_sessions_error
from gateway.protocol import params as p
from gateway.protocol.codes import ErrorCode
from sessions import SessionsError
from sessions.schema import ExtensionTrustState

if TYPE_CHECKING:
    from gateway.extensions.runtime import Extensions


def actor(conn: ConnState) -> str:
    """Who a connection is, for the audit trail: `token NAME` or the root credential, the
    client's name and version, and its address."""
    who = f"token {conn.credential}" if conn.credential else "root credential"
    client = conn.client.get("displayName") or conn.client.get("id") or "client"
    version = conn.client.get("version")
    named = f"{client} {version}" if version else str(client)
    where = f" from {conn.remote}" if conn.remote else ""
    return f"{who} ({named}{where})"


def running(call: Call) -> Extensions:
    extensions = call.state.extensions
    if extensions is None:
        raise MethodError(ErrorCode.UNAVAILABLE, "extensions are not running", retryable=True)
    return extensions


async def extensions_list(call: Call, params: p.NativeEmptyParams) -> Any:
    try:
        return await running(call).extensions_status()
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc


async def extensions_enable(call: Call, params: p.ExtensionNameParams) -> Any:
    return await _change(call, params.name, ExtensionTrustState.ENABLED)


async def extensions_disable(call: Call, params: p.ExtensionNameParams) -> Any:
    return await _change(call, params.name, ExtensionTrustState.DISABLED)


async def _change(call: Call, name: str, state: ExtensionTrustState) -> Any:
    from gateway.extensions.errors import TrustTransitionError, UnknownExtensionError

    extensions = running(call)
    try:
        await extensions.set_extension_state(name, state, actor(call.conn))
    except UnknownExtensionError as exc:
        raise MethodError(ErrorCode.NOT_FOUND, str(exc)) from exc
    except TrustTransitionError as exc:
        raise MethodError(ErrorCode.INVALID_REQUEST, str(exc)) from exc
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    return {"extension": extensions.extension_row(name)}
