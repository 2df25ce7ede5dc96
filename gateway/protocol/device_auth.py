"""Device authentication, step 5 of the `connect` handshake (`handshake.validate_connect`).

A `device`, when present: id = sha256(public key), signed within 2 minutes, over the nonce of
this connection's challenge, with a valid Ed25519 signature of the v3 (or legacy v2) payload
-> DEVICE_AUTH_*, close 1008.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence

from gateway.auth import secrets_equal
from gateway.protocol.codes import DetailCode
from gateway.protocol.connect_params import ConnectParams, DeviceIdentity
from gateway.protocol.connect_rejection import ConnectRejected, reject

DEVICE_SIGNATURE_SKEW_MS = 2 * 60 * 1000
"""How far a device signature's `signedAt` may be from the server clock."""


def _device_reject(message: str, code: DetailCode, reason: str) -> ConnectRejected:
    return reject(message, details={"code": code.value, "reason": reason}, auth_failure=True)


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


def check_device(
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
