"""The `connect` handshake, sans I/O: the challenge, validating `connect`, building `hello-ok`.

Parameter models and their error wording are in `connect_params` and `validation_errors`.

Order of checks in `validate_connect`, each failure answered the way OpenClaw answers it
(`reference/openclaw-gateway.md` sections 3.2-3.5):

1. params against `ConnectParams` -> INVALID_REQUEST `invalid connect params: ...`, close 1008;
2. protocol range must contain 4 -> INVALID_REQUEST `protocol mismatch` with details
   PROTOCOL_MISMATCH, close 1002;
3. role must be `operator` -> INVALID_REQUEST `unauthorized role: X`, close 1008;
4. the secret: the root token or password (constant-time), or a named token the caller looked
   up (`presented_token`, then `validate_connect(named=...)`) -> AUTH_TOKEN_MISSING /
   AUTH_TOKEN_MISMATCH / AUTH_PASSWORD_*, close 1008;
5. a `device`, when present: checked by `device_auth` -> DEVICE_AUTH_*, close 1008.

Granted scopes are the requested ones the operator role allows, in request order; unknown scopes
are dropped and no scopes requested means none granted (OpenClaw then refuses every scoped
method with MISSING_SCOPE). With a named token, only the requested scopes the token grants are
granted: a read-only token asking for `operator.admin` gets `operator.read` at most.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import ValidationError

from gateway.auth import AuthConfig, secrets_equal
from gateway.protocol.codes import (
    PROTOCOL_VERSION,
    CloseCode,
    DetailCode,
)
from gateway.protocol.connect_params import ConnectParams
from gateway.protocol.connect_rejection import ConnectRejected, reject
from gateway.protocol.device_auth import check_device
from gateway.protocol.frames import RawJSON, event_frame
from gateway.protocol.methods import OPERATOR_SCOPES
from gateway.protocol.validation_errors import describe_validation_error

MINIMUM_PROBE_PROTOCOL = 3

TOKEN_MISSING_MESSAGE = (
    "unauthorized: gateway token missing (set gateway.remote.token to match gateway.auth.token)"
)
TOKEN_MISMATCH_MESSAGE = (
    "unauthorized: gateway token mismatch (use this gateway's gateway.auth.token or pair the device)"
)
PASSWORD_MISSING_MESSAGE = "unauthorized: gateway password missing (provide gateway auth password)"
PASSWORD_MISMATCH_MESSAGE = "unauthorized: gateway password mismatch (provide gateway auth password)"


class NamedGrant(Protocol):
    """A named token (`gateway.tokens.NamedToken`): its name, every scope it grants."""

    @property
    def name(self) -> str: ...
    @property
    def grants(self) -> frozenset[str]: ...


def _now_ms() -> int:
    return int(time.time() * 1000)


def make_challenge(now_ms: int | None = None) -> tuple[str, int, str]:
    """A fresh challenge: `(nonce, ts, frame)`. Send `frame` first on every new connection (it
    carries no `seq`) and keep `nonce` for `validate_connect`."""
    nonce = str(uuid.uuid4())
    ts = _now_ms() if now_ms is None else now_ms
    return nonce, ts, event_frame("connect.challenge", {"nonce": nonce, "ts": ts})


@dataclass(frozen=True, slots=True)
class ConnectAccepted:
    """A successful `connect`: answer with `build_hello_ok(...)`."""

    client: dict[str, Any]
    """The client's self-description as sent (`id`, `version`, `platform`, `mode`, optional
    `displayName`, `deviceFamily`, `instanceId`, ...), camelCase, validated."""
    role: str
    scopes: tuple[str, ...]
    """Granted scopes, in the order requested (what hello-ok's `auth.scopes` lists)."""
    caps: frozenset[str]
    device_id: str | None
    """Verified device id (sha256 of its public key, hex), or None when no device was sent."""
    auth_method: str
    """`token`, `password` or `none`."""
    credential: str | None = None
    """The named token that authenticated the connection; None for the root secret."""
    protocol: int = PROTOCOL_VERSION
    params: ConnectParams | None = field(default=None, compare=False, repr=False)


def presented_token(params: Any) -> str | None:
    """The token a `connect` request's params carry (`auth.token`), whatever else is wrong with
    them; None when there is none. The caller looks it up among the named tokens."""
    auth = params.get("auth") if isinstance(params, dict) else None
    token = auth.get("token") if isinstance(auth, dict) else None
    return token if isinstance(token, str) and token else None


def validate_connect(
    params: Any,
    *,
    nonce: str,
    auth: AuthConfig,
    named: NamedGrant | None = None,
    now_ms: int | None = None,
) -> ConnectAccepted | ConnectRejected:
    """Check a `connect` request's params (see the module docstring for the order of checks).

    `nonce` is the one sent in this connection's challenge; `named` the named token the
    presented token belongs to (None when it is none); `now_ms` is the wall clock (ms) used for
    the device signature window, injectable for tests.
    """
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return reject("invalid connect params: must be object")
    try:
        connect = ConnectParams.model_validate(params)
    except ValidationError as exc:
        return reject(f"invalid connect params: {describe_validation_error(exc)}")

    if not connect.min_protocol <= PROTOCOL_VERSION <= connect.max_protocol:
        return reject(
            "protocol mismatch",
            details={
                "code": DetailCode.PROTOCOL_MISMATCH.value,
                "clientMinProtocol": connect.min_protocol,
                "clientMaxProtocol": connect.max_protocol,
                "expectedProtocol": PROTOCOL_VERSION,
                "minimumProbeProtocol": MINIMUM_PROBE_PROTOCOL,
            },
            close_code=CloseCode.PROTOCOL_ERROR,
        )

    role = connect.role or "operator"
    if role != "operator":
        return reject(f"unauthorized role: {role}")

    grant = named if named is not None and not _root_secret_presented(connect, auth) else None
    if grant is None:
        refused = _check_secret(connect, auth)
        if refused is not None:
            return refused

    device_id: str | None = None
    if connect.device is not None:
        checked = check_device(connect, connect.device, nonce, _now_ms() if now_ms is None else now_ms)
        if isinstance(checked, ConnectRejected):
            return checked
        device_id = checked

    scopes = grant_scopes(connect.scopes or ())
    if grant is not None:
        scopes = tuple(s for s in scopes if s in grant.grants)
    return ConnectAccepted(
        client=connect.client.model_dump(mode="json", by_alias=True, exclude_none=True),
        role=role,
        scopes=scopes,
        caps=frozenset(connect.caps),
        device_id=device_id,
        auth_method="token" if grant is not None else auth.mode,
        credential=grant.name if grant is not None else None,
        params=connect,
    )


def grant_scopes(requested: Iterable[str]) -> tuple[str, ...]:
    """Requested scopes an operator may hold, deduplicated, in request order."""
    return tuple(dict.fromkeys(s for s in requested if s in OPERATOR_SCOPES))


# --- shared secret ----------------------------------------------------------------------------


def _root_secret_presented(connect: ConnectParams, auth: AuthConfig) -> bool:
    """Whether the request carries the root token or password (then it is not a named one)."""
    if not auth.enabled or connect.auth is None:
        return False
    presented = [s for s in (connect.auth.token, connect.auth.password) if s]
    matched = False
    for candidate in presented:
        matched |= auth.accepts(candidate)
    return matched


def _auth_details(code: DetailCode, reason: str) -> dict[str, Any]:
    return {
        "code": code.value,
        "authReason": reason,
        "canRetryWithDeviceToken": False,
        "recommendedNextStep": "update_auth_credentials",
    }


def _check_secret(connect: ConnectParams, auth: AuthConfig) -> ConnectRejected | None:
    """The shared secret may arrive as `auth.token` or `auth.password`; it must equal the
    configured token or password. Every configured secret is compared against every presented
    one, so timing does not tell which comparison matched."""
    if not auth.enabled:
        return None
    presented = [s for s in (connect.auth.token, connect.auth.password) if s] if connect.auth else []
    expected = [s for s in (auth.token, auth.password) if s is not None]
    if not presented:
        if auth.token is not None:
            return reject(
                TOKEN_MISSING_MESSAGE,
                details=_auth_details(DetailCode.AUTH_TOKEN_MISSING, "token_missing"),
                auth_failure=True,
            )
        return reject(
            PASSWORD_MISSING_MESSAGE,
            details=_auth_details(DetailCode.AUTH_PASSWORD_MISSING, "password_missing"),
            auth_failure=True,
        )
    matched = False
    for candidate in presented:
        for secret in expected:
            matched |= secrets_equal(candidate, secret)
    if matched:
        return None
    sent_token = connect.auth is not None and bool(connect.auth.token)
    if auth.token is not None and (sent_token or auth.password is None):
        return reject(
            TOKEN_MISMATCH_MESSAGE,
            details=_auth_details(DetailCode.AUTH_TOKEN_MISMATCH, "token_mismatch"),
            auth_failure=True,
        )
    return reject(
        PASSWORD_MISMATCH_MESSAGE,
        details=_auth_details(DetailCode.AUTH_PASSWORD_MISMATCH, "password_mismatch"),
        auth_failure=True,
    )


# --- hello-ok ---------------------------------------------------------------------------------

DEFAULT_MAX_IMAGE_BYTES = 6 * 1024 * 1024


def attachment_max_bytes(max_payload: int) -> int:
    """Largest attachment that still fits a frame once base64-encoded, with 192 KiB to spare for
    the rest of the request (25 MiB frames give OpenClaw's 19 464 192)."""
    return max(1, max_payload // 4 * 3 - 192 * 1024)


def build_hello_ok(
    *,
    server_version: str,
    conn_id: str,
    methods: Sequence[str],
    events: Sequence[str],
    presence: Sequence[Mapping[str, Any]] | RawJSON,
    health: Mapping[str, Any],
    state_version: Mapping[str, int],
    uptime_ms: int,
    role: str,
    scopes: Sequence[str],
    max_payload: int,
    max_buffered_bytes: int,
    tick_interval_ms: int,
    auth_method: str = "token",
    boot_id: str | None = None,
    build_id: str | None = None,
    capabilities: Sequence[str] = (),
    default_agent_id: str = "main",
    model_configured: bool = False,
    config_path: str | None = None,
    state_dir: str | None = None,
    applied_config_hash: str | None = None,
) -> dict[str, Any]:
    """The `hello-ok` payload, shaped field for field like the one a real OpenClaw gateway sends.

    OpenClaw-only features get honest empty values (no plugin surfaces, no control-UI widgets,
    no automatic updates, only the `shared` session visibility). `recoveryScope` (OpenClaw's
    device-token recovery) is not sent. `config_path` / `state_dir` are left out when None.
    """
    server: dict[str, Any] = {"version": server_version}
    if build_id is not None:
        server["buildId"] = build_id
    if boot_id is not None:
        server["bootId"] = boot_id
    server["controlUiBuildSource"] = "bundled"
    server["connId"] = conn_id

    snapshot: dict[str, Any] = {
        "suspension": {"phase": "accepting"},
        "presence": presence if isinstance(presence, RawJSON) else [dict(entry) for entry in presence],
        "health": dict(health),
        "stateVersion": {"presence": int(state_version["presence"]), "health": int(state_version["health"])},
        "uptimeMs": uptime_ms,
        "appliedConfigHash": applied_config_hash,
        "sessionDefaults": {
            "defaultAgentId": default_agent_id,
            "modelConfigured": model_configured,
            "ownership": "sole",
            "selectionRequired": False,
            "mainKey": "main",
            "mainSessionKey": f"agent:{default_agent_id}:main",
            "scope": "per-sender",
        },
        "updateSchedule": {"channel": "stable", "autoEnabled": False},
    }
    if config_path is not None:
        snapshot["configPath"] = config_path
    if state_dir is not None:
        snapshot["stateDir"] = state_dir
    snapshot["authMode"] = auth_method

    return {
        "type": "hello-ok",
        "protocol": PROTOCOL_VERSION,
        "server": server,
        "features": {"methods": list(methods), "events": list(events), "capabilities": list(capabilities)},
        "snapshot": snapshot,
        "controlUiWidgetKinds": [],
        "controlUiLinkReaders": [],
        "pluginSurfaceUrls": {},
        "auth": {"method": auth_method, "role": role, "scopes": list(scopes)},
        "policy": {
            "maxPayload": max_payload,
            "maxBufferedBytes": max_buffered_bytes,
            "tickIntervalMs": tick_interval_ms,
            "attachments": {
                "maxBytes": attachment_max_bytes(max_payload),
                "maxImageBytes": min(DEFAULT_MAX_IMAGE_BYTES, attachment_max_bytes(max_payload)),
            },
            "allowedSessionVisibilities": ["shared"],
            "hasMultipleSessionSharingIdentities": False,
        },
    }
