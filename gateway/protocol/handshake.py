"""The `connect` handshake, sans I/O: the challenge, validating `connect`, building `hello-ok`.

This module is long, and stays one module, because it is one ordered list of checks, each beside
the OpenClaw-shaped answer it gives, and `hello-ok` is built from what those checks established;
parameter models and their error wording are in `connect_params` and `validation_errors`.

Order of checks in `validate_connect`, each failure answered the way OpenClaw answers it
(`reference/openclaw-gateway.md` sections 3.2-3.5):

1. params against `ConnectParams` -> INVALID_REQUEST `invalid connect params: ...`, close 1008;
2. protocol range must contain 4 -> INVALID_REQUEST `protocol mismatch` with details
   PROTOCOL_MISMATCH, close 1002;
3. role must be `operator` -> INVALID_REQUEST `unauthorized role: X`, close 1008;
4. the secret: the root token or password (constant-time), or a named token the caller looked
   up (`presented_token`, then `validate_connect(named=...)`) -> AUTH_TOKEN_MISSING /
   AUTH_TOKEN_MISMATCH / AUTH_PASSWORD_*, close 1008;
5. a `device`, when present: id = sha256(public key), signed within 2 minutes, over the nonce of
   this connection's challenge, with a valid Ed25519 signature of the v3 (or legacy v2) payload
   -> DEVICE_AUTH_*, close 1008.

Granted scopes are the requested ones the operator role allows, in request order; unknown scopes
are dropped and no scopes requested means none granted (OpenClaw then refuses every scoped
method with MISSING_SCOPE). With a named token, only the requested scopes the token grants are
granted: a read-only token asking for `operator.admin` gets `operator.read` at most.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
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
    ErrorCode,
    ErrorShape,
    truncate_close_reason,
)
from gateway.protocol.connect_params import ConnectParams, DeviceIdentity
from gateway.protocol.frames import RawJSON, event_frame, response_from_error
from gateway.protocol.methods import OPERATOR_SCOPES
from gateway.protocol.validation_errors import describe_validation_error

DEVICE_SIGNATURE_SKEW_MS = 2 * 60 * 1000
"""How far a device signature's `signedAt` may be from the server clock."""

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


@dataclass(frozen=True, slots=True)
class ConnectRejected:
    """A refused `connect`: send `response(request_id)`, then close with `close_code`."""

    error: ErrorShape
    close_code: CloseCode
    close_reason: str
    auth_failure: bool = False
    """True when a wrong or missing secret or device proof caused it (count it in the limiter)."""

    def response(self, request_id: str) -> str:
        return response_from_error(request_id, self.error)


def _reject(
    message: str,
    *,
    details: Any = None,
    close_code: CloseCode = CloseCode.POLICY_VIOLATION,
    auth_failure: bool = False,
    code: ErrorCode = ErrorCode.INVALID_REQUEST,
    retryable: bool | None = None,
    retry_after_ms: int | None = None,
) -> ConnectRejected:
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
    return _reject(
        message,
        code=ErrorCode.UNAVAILABLE,
        details={"reason": reason},
        close_code=CloseCode.TRY_AGAIN_LATER,
        retryable=True,
        retry_after_ms=retry_after_ms,
    )


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
        return _reject("invalid connect params: must be object")
    try:
        connect = ConnectParams.model_validate(params)
    except ValidationError as exc:
        return _reject(f"invalid connect params: {describe_validation_error(exc)}")

    if not connect.min_protocol <= PROTOCOL_VERSION <= connect.max_protocol:
        return _reject(
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
        return _reject(f"unauthorized role: {role}")

    grant = named if named is not None and not _root_secret_presented(connect, auth) else None
    if grant is None:
        refused = _check_secret(connect, auth)
        if refused is not None:
            return refused

    device_id: str | None = None
    if connect.device is not None:
        checked = _check_device(connect, connect.device, nonce, _now_ms() if now_ms is None else now_ms)
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
            return _reject(
                TOKEN_MISSING_MESSAGE,
                details=_auth_details(DetailCode.AUTH_TOKEN_MISSING, "token_missing"),
                auth_failure=True,
            )
        return _reject(
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
        return _reject(
            TOKEN_MISMATCH_MESSAGE,
            details=_auth_details(DetailCode.AUTH_TOKEN_MISMATCH, "token_mismatch"),
            auth_failure=True,
        )
    return _reject(
        PASSWORD_MISMATCH_MESSAGE,
        details=_auth_details(DetailCode.AUTH_PASSWORD_MISMATCH, "password_mismatch"),
        auth_failure=True,
    )


# --- device identity --------------------------------------------------------------------------


def _device_reject(message: str, code: DetailCode, reason: str) -> ConnectRejected:
    return _reject(message, details={"code": code.value, "reason": reason}, auth_failure=True)


def b64url_decode(text: str) -> bytes:
    """Decode base64url with or without padding. Raises ValueError."""
    stripped = text.strip()
    try:
        return base64.urlsafe_b64decode(stripped + "=" * (-len(stripped) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not base64url") from exc


def device_id_for(public_key: bytes) -> str:
    """A device's id: the hex sha256 of its raw 32-byte Ed25519 public key."""
    return hashlib.sha256(public_key).hexdigest()


def _normalize_metadata(value: str | None) -> str:
    return (value or "").strip().translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def device_signature_payloads(
    *,
    device_id: str,
    client_id: str,
    client_mode: str,
    role: str,
    scopes: Sequence[str],
    signed_at: int,
    token: str,
    nonce: str,
    platform: str | None,
    device_family: str | None,
) -> tuple[str, str]:
    """The v3 and v2 strings a device signs (v3 adds lowercased platform and device family)."""
    common = [device_id, client_id, client_mode, role, ",".join(scopes), str(signed_at), token, nonce]
    v3 = "|".join(["v3", *common, _normalize_metadata(platform), _normalize_metadata(device_family)])
    v2 = "|".join(["v2", *common])
    return v3, v2


def _check_device(
    connect: ConnectParams, device: DeviceIdentity, nonce: str, now_ms: int
) -> str | ConnectRejected:
    # Imported by the first device that connects: clients without a device identity never need it.
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        public_bytes = b64url_decode(device.public_key)
        if len(public_bytes) != 32:
            raise ValueError("wrong length")
        public_key = Ed25519PublicKey.from_public_bytes(public_bytes)
    except ValueError:
        return _device_reject(
            "device public key invalid", DetailCode.DEVICE_AUTH_PUBLIC_KEY_INVALID, "device-public-key"
        )
    derived = device_id_for(public_bytes)
    if not secrets_equal(device.id.lower(), derived):
        return _device_reject(
            "device identity mismatch", DetailCode.DEVICE_AUTH_DEVICE_ID_MISMATCH, "device-id-mismatch"
        )
    if abs(now_ms - device.signed_at) > DEVICE_SIGNATURE_SKEW_MS:
        return _device_reject(
            "device signature expired", DetailCode.DEVICE_AUTH_SIGNATURE_EXPIRED, "device-signature-stale"
        )
    if not device.nonce:
        return _device_reject(
            "device nonce required", DetailCode.DEVICE_AUTH_NONCE_REQUIRED, "device-nonce-missing"
        )
    if not secrets_equal(device.nonce, nonce):
        return _device_reject(
            "device nonce mismatch", DetailCode.DEVICE_AUTH_NONCE_MISMATCH, "device-nonce-mismatch"
        )
    try:
        signature = b64url_decode(device.signature)
    except ValueError:
        signature = b""
    auth = connect.auth
    token = (auth.token or auth.device_token or "") if auth is not None else ""
    payloads = device_signature_payloads(
        device_id=device.id,
        client_id=connect.client.id,
        client_mode=connect.client.mode,
        role=connect.role or "operator",
        scopes=connect.scopes or (),
        signed_at=device.signed_at,
        token=token,
        nonce=device.nonce,
        platform=connect.client.platform,
        device_family=connect.client.device_family,
    )
    for payload in payloads:
        try:
            public_key.verify(signature, payload.encode("utf-8"))
        except (InvalidSignature, ValueError):
            continue
        return derived
    return _device_reject(
        "device signature invalid", DetailCode.DEVICE_AUTH_SIGNATURE_INVALID, "device-signature"
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
