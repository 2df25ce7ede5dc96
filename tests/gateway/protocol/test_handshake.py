from __future__ import annotations

import base64
import copy
import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from gateway.auth import AuthConfig
from gateway.protocol.codes import CloseCode
from gateway.protocol.connect_rejection import ConnectRejected, unavailable_rejection
from gateway.protocol.device_auth import DEVICE_SIGNATURE_SKEW_MS
from gateway.protocol.handshake import (
    ConnectAccepted,
    build_hello_ok,
    make_challenge,
    presented_token,
    validate_connect,
)
from gateway.protocol.methods import EVENTS, METHOD_NAMES
from tests.gateway.protocol._captures import TOKEN, example, exchanges

AUTH = AuthConfig(token=TOKEN)
NONCE = "3b5fa05a-7d3a-4b67-abe9-917167fb6bcb"
NOW = 1_795_653_976_799


def accepted(result: ConnectAccepted | ConnectRejected) -> ConnectAccepted:
    assert isinstance(result, ConnectAccepted), result
    return result


def rejected(result: ConnectAccepted | ConnectRejected) -> ConnectRejected:
    assert isinstance(result, ConnectRejected), result
    return result


def cli_params(**changes: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "minProtocol": 4,
        "maxProtocol": 4,
        "client": {
            "id": "cli",
            "version": "2026.9.6",
            "platform": "linux",
            "deviceFamily": "Linux",
            "mode": "cli",
        },
        "caps": [],
        "auth": {"token": TOKEN},
        "role": "operator",
        "scopes": ["operator.read"],
    }
    params.update(changes)
    return params


# --- challenge --------------------------------------------------------------------------------


def test_challenge_is_an_event_without_seq() -> None:
    nonce, ts, frame = make_challenge(now_ms=1234)
    assert json.loads(frame) == {
        "type": "event",
        "event": "connect.challenge",
        "payload": {"nonce": nonce, "ts": 1234},
    }
    assert uuid.UUID(nonce)
    assert ts == 1234
    assert make_challenge()[0] != nonce


# --- captured connects ------------------------------------------------------------------------


def test_every_captured_client_connect_with_the_right_token_is_accepted() -> None:
    seen_clients = set()
    for request, response, _close in exchanges("captured_handshakes.jsonl"):
        params = request["params"]
        if response is not None or params["auth"]["token"] != TOKEN:
            continue  # the real gateway refused these: see the tests below
        device = params.get("device")
        nonce = device["nonce"] if device else NONCE
        now = device["signedAt"] if device else NOW
        result = accepted(validate_connect(params, nonce=nonce, auth=AUTH, now_ms=now))
        assert result.scopes == tuple(params["scopes"])
        assert result.role == "operator"
        assert result.caps == frozenset(params["caps"])
        assert result.client["id"] == params["client"]["id"]
        assert result.client["mode"] == params["client"]["mode"]
        assert result.auth_method == "token"
        if device:
            assert result.device_id == device["id"]
        else:
            assert result.device_id is None
        seen_clients.add(params["client"]["id"])
    # The CLI, `openclaw health` (gateway-client) and the TUI (signed device) are all covered.
    assert seen_clients == {"cli", "gateway-client", "openclaw-tui"}


def test_the_captured_tui_device_signature_verifies_only_with_its_nonce_and_token() -> None:
    request = next(r for r, _, _ in exchanges("captured_handshakes.jsonl") if r["params"].get("device"))
    params = request["params"]
    device = params["device"]
    ok = accepted(validate_connect(params, nonce=device["nonce"], auth=AUTH, now_ms=device["signedAt"]))
    assert ok.device_id == "3ec41c893cadb78e6a7ad24ebf9b35b56c11e4ad40969d50941a5797d03c1cc6"

    other_token = copy.deepcopy(params)
    other_token["auth"]["token"] = "another-token"
    result = rejected(
        validate_connect(
            other_token,
            nonce=device["nonce"],
            auth=AuthConfig(token="another-token"),
            now_ms=device["signedAt"],
        )
    )
    assert result.error.details["code"] == "DEVICE_AUTH_SIGNATURE_INVALID"


def test_wrong_token_is_refused_exactly_like_openclaw() -> None:
    request, response, close = next(
        e
        for e in exchanges("captured_handshakes.jsonl")
        if e[1] and e[1]["error"]["details"]["code"] == "AUTH_TOKEN_MISMATCH"
    )
    result = rejected(validate_connect(request["params"], nonce=NONCE, auth=AUTH))
    assert json.loads(result.response(request["id"])) == response
    assert (result.close_code, result.close_reason) == (close["code"], close["reason"])
    assert result.auth_failure


def test_protocol_mismatch_is_refused_exactly_like_openclaw() -> None:
    request, response, close = next(
        e
        for e in exchanges("captured_handshakes.jsonl")
        if e[1] and e[1]["error"]["message"] == "protocol mismatch"
    )
    result = rejected(validate_connect(request["params"], nonce=NONCE, auth=AUTH))
    assert json.loads(result.response(request["id"])) == response
    assert (result.close_code, result.close_reason) == (close["code"], close["reason"])
    assert result.close_code == CloseCode.PROTOCOL_ERROR
    assert not result.auth_failure


@pytest.mark.parametrize(("low", "high"), [(3, 4), (4, 5), (1, 9)])
def test_any_range_containing_4_is_accepted(low: int, high: int) -> None:
    accepted(validate_connect(cli_params(minProtocol=low, maxProtocol=high), nonce=NONCE, auth=AUTH))


@pytest.mark.parametrize(("low", "high"), [(5, 6), (1, 3), (5, 4)])
def test_ranges_without_4_are_refused(low: int, high: int) -> None:
    result = rejected(validate_connect(cli_params(minProtocol=low, maxProtocol=high), nonce=NONCE, auth=AUTH))
    assert result.error.details["code"] == "PROTOCOL_MISMATCH"
    assert result.error.details["clientMinProtocol"] == low


def test_not_ready_answer_matches_the_captured_one() -> None:
    _request, response, _ = next(
        e for e in exchanges("captured_handshakes.jsonl") if e[1] and e[1]["error"]["code"] == "UNAVAILABLE"
    )
    result = unavailable_rejection()
    error = result.error.to_dict()
    for key in ("code", "message", "retryable", "retryAfterMs"):
        assert error[key] == response["error"][key]
    assert result.close_code == CloseCode.TRY_AGAIN_LATER


# --- shared secret ----------------------------------------------------------------------------


def test_missing_token() -> None:
    result = rejected(validate_connect(cli_params(auth={}), nonce=NONCE, auth=AUTH))
    assert result.error.code == "INVALID_REQUEST"
    assert result.error.message.startswith("unauthorized: gateway token missing")
    assert result.error.details["code"] == "AUTH_TOKEN_MISSING"
    assert result.close_code == CloseCode.POLICY_VIOLATION
    assert result.auth_failure
    params = cli_params()
    del params["auth"]
    assert (
        rejected(validate_connect(params, nonce=NONCE, auth=AUTH)).error.details["code"]
        == "AUTH_TOKEN_MISSING"
    )


def test_password_auth() -> None:
    auth = AuthConfig(password="hunter2-long")
    ok = accepted(validate_connect(cli_params(auth={"password": "hunter2-long"}), nonce=NONCE, auth=auth))
    assert ok.auth_method == "password"
    # Clients may put the shared secret in either field.
    accepted(validate_connect(cli_params(auth={"token": "hunter2-long"}), nonce=NONCE, auth=auth))
    bad = rejected(validate_connect(cli_params(auth={"password": "nope"}), nonce=NONCE, auth=auth))
    assert bad.error.details["code"] == "AUTH_PASSWORD_MISMATCH"
    missing = rejected(validate_connect(cli_params(auth={}), nonce=NONCE, auth=auth))
    assert missing.error.details["code"] == "AUTH_PASSWORD_MISSING"


def test_token_and_password_both_configured() -> None:
    auth = AuthConfig(token=TOKEN, password="pw-secret")
    accepted(validate_connect(cli_params(auth={"password": "pw-secret"}), nonce=NONCE, auth=auth))
    accepted(validate_connect(cli_params(auth={"token": TOKEN}), nonce=NONCE, auth=auth))
    assert (
        rejected(validate_connect(cli_params(auth={"token": "x"}), nonce=NONCE, auth=auth)).error.details[
            "code"
        ]
        == "AUTH_TOKEN_MISMATCH"
    )


def test_no_auth_configured_accepts_anyone() -> None:
    ok = accepted(validate_connect(cli_params(auth={}), nonce=NONCE, auth=AuthConfig()))
    assert ok.auth_method == "none"


@dataclass(frozen=True)
class Grant:
    name: str
    grants: frozenset[str]


def test_a_named_token_grants_only_the_requested_scopes_it_holds() -> None:
    everything = ["operator.read", "operator.write", "operator.admin"]
    params = cli_params(auth={"token": "gwt_named"}, scopes=everything)
    assert presented_token(params) == "gwt_named"
    read_only = Grant("viewer", frozenset({"operator.read"}))
    ok = accepted(validate_connect(params, nonce=NONCE, auth=AUTH, named=read_only))
    assert ok.scopes == ("operator.read",) and ok.credential == "viewer" and ok.auth_method == "token"
    # Without the named token the same secret is simply wrong.
    assert rejected(validate_connect(params, nonce=NONCE, auth=AUTH)).auth_failure
    # The root token stays admin whatever else is passed.
    root = accepted(validate_connect(cli_params(scopes=everything), nonce=NONCE, auth=AUTH, named=read_only))
    assert root.scopes == tuple(everything) and root.credential is None


# --- params and role ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"client": None}, "invalid connect params: at /client: must be object"),
        ({"minProtocol": "4"}, "invalid connect params: at /minProtocol: must be integer"),
        (
            {"client": {"id": "cli", "version": "1", "platform": "linux"}},
            "invalid connect params: at /client: must have required property 'mode'",
        ),
        (
            {"client": {"id": "", "version": "1", "platform": "linux", "mode": "cli"}},
            "invalid connect params: at /client/id: must NOT have fewer than 1 characters",
        ),
        ({"scopes": "operator.read"}, "invalid connect params: at /scopes: must be array"),
        ({"caps": [""]}, "invalid connect params: at /caps/0: must NOT have fewer than 1 characters"),
        (
            {"device": {"id": "x"}},
            "invalid connect params: at /device: must have required property 'publicKey'",
        ),
    ],
)
def test_invalid_connect_params(change: dict[str, Any], message: str) -> None:
    result = rejected(validate_connect(cli_params(**change), nonce=NONCE, auth=AUTH))
    assert result.error.message == message
    assert result.error.code == "INVALID_REQUEST"
    assert result.close_code == CloseCode.POLICY_VIOLATION
    assert not result.auth_failure


def test_missing_required_connect_fields() -> None:
    assert rejected(validate_connect({}, nonce=NONCE, auth=AUTH)).error.message == (
        "invalid connect params: must have required property 'minProtocol'"
    )
    assert rejected(validate_connect([1], nonce=NONCE, auth=AUTH)).error.message == (
        "invalid connect params: must be object"
    )


def test_only_the_operator_role_is_served() -> None:
    result = rejected(validate_connect(cli_params(role="node"), nonce=NONCE, auth=AUTH))
    assert result.error.message == "unauthorized role: node"
    params = cli_params()
    del params["role"]
    assert accepted(validate_connect(params, nonce=NONCE, auth=AUTH)).role == "operator"


def test_granted_scopes_are_the_known_requested_ones_in_order() -> None:
    requested = ["operator.write", "bogus.scope", "operator.read", "operator.write", "operator.pairing"]
    ok = accepted(validate_connect(cli_params(scopes=requested), nonce=NONCE, auth=AUTH))
    assert ok.scopes == ("operator.write", "operator.read", "operator.pairing")
    assert accepted(validate_connect(cli_params(scopes=[]), nonce=NONCE, auth=AUTH)).scopes == ()
    params = cli_params()
    del params["scopes"]
    assert accepted(validate_connect(params, nonce=NONCE, auth=AUTH)).scopes == ()


def test_unknown_extra_fields_from_newer_clients_are_tolerated() -> None:
    params = cli_params(workerRuns={"x": 1}, futureThing=True)
    params["client"] = {**params["client"], "someNewField": "x"}
    accepted(validate_connect(params, nonce=NONCE, auth=AUTH))


# --- device identity ------------------------------------------------------------------------


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Device:
    def __init__(self) -> None:
        self.key = Ed25519PrivateKey.generate()
        self.public = self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.id = hashlib.sha256(self.public).hexdigest()

    def sign(
        self, params: dict[str, Any], *, nonce: str, signed_at: int, version: str = "v3", token: str = TOKEN
    ) -> dict[str, Any]:
        client = params["client"]
        parts = [
            version,
            self.id,
            client["id"],
            client["mode"],
            params.get("role", "operator"),
            ",".join(params.get("scopes", [])),
            str(signed_at),
            token,
            nonce,
        ]
        if version == "v3":
            parts += [client.get("platform", "").lower(), client.get("deviceFamily", "").lower()]
        signature = self.key.sign("|".join(parts).encode())
        return {
            "id": self.id,
            "publicKey": b64url(self.public),
            "signature": b64url(signature),
            "signedAt": signed_at,
            "nonce": nonce,
        }


def signed_params(device: Device, **sign: Any) -> dict[str, Any]:
    params = cli_params(scopes=["operator.read", "operator.write"])
    params["device"] = device.sign(
        params, nonce=sign.pop("nonce", NONCE), signed_at=sign.pop("signed_at", NOW), **sign
    )
    return params


@pytest.mark.parametrize("version", ["v3", "v2"])
def test_valid_device_signatures(version: str) -> None:
    device = Device()
    ok = accepted(
        validate_connect(signed_params(device, version=version), nonce=NONCE, auth=AUTH, now_ms=NOW)
    )
    assert ok.device_id == device.id


def test_signed_at_may_be_off_by_the_skew_window_but_not_more() -> None:
    device = Device()
    params = signed_params(device)
    accepted(validate_connect(params, nonce=NONCE, auth=AUTH, now_ms=NOW + DEVICE_SIGNATURE_SKEW_MS))
    accepted(validate_connect(params, nonce=NONCE, auth=AUTH, now_ms=NOW - DEVICE_SIGNATURE_SKEW_MS))
    late = rejected(
        validate_connect(params, nonce=NONCE, auth=AUTH, now_ms=NOW + DEVICE_SIGNATURE_SKEW_MS + 1)
    )
    assert late.error.details == {"code": "DEVICE_AUTH_SIGNATURE_EXPIRED", "reason": "device-signature-stale"}
    assert late.error.message == "device signature expired"


def _device_code(params: dict[str, Any], nonce: str = NONCE) -> str:
    result = rejected(validate_connect(params, nonce=nonce, auth=AUTH, now_ms=NOW))
    assert result.close_code == CloseCode.POLICY_VIOLATION
    assert result.auth_failure
    code: str = result.error.details["code"]
    return code


def test_device_refusals() -> None:
    device = Device()
    assert _device_code(signed_params(device), nonce="another-challenge") == "DEVICE_AUTH_NONCE_MISMATCH"
    assert _device_code(signed_params(device, nonce="")) == "DEVICE_AUTH_NONCE_REQUIRED"
    assert _device_code(signed_params(device, token="not-the-token")) == "DEVICE_AUTH_SIGNATURE_INVALID"

    tampered = signed_params(device)
    tampered["scopes"] = ["operator.admin"]  # scopes are part of what was signed
    assert _device_code(tampered) == "DEVICE_AUTH_SIGNATURE_INVALID"

    garbage = signed_params(device)
    garbage["device"]["signature"] = "%%%not-base64%%%"
    assert _device_code(garbage) == "DEVICE_AUTH_SIGNATURE_INVALID"

    wrong_id = signed_params(device)
    wrong_id["device"]["id"] = Device().id
    assert _device_code(wrong_id) == "DEVICE_AUTH_DEVICE_ID_MISMATCH"

    other_key = signed_params(device)
    other_key["device"]["publicKey"] = b64url(Device().public)
    assert _device_code(other_key) == "DEVICE_AUTH_DEVICE_ID_MISMATCH"

    for bad_key in ("AAAA", "!!!!", b64url(b"\x00" * 31)):
        params = signed_params(device)
        params["device"]["publicKey"] = bad_key
        assert _device_code(params) == "DEVICE_AUTH_PUBLIC_KEY_INVALID"


def test_a_device_does_not_replace_the_shared_secret() -> None:
    device = Device()
    params = signed_params(device, token="")
    params["auth"] = {}
    result = rejected(validate_connect(params, nonce=NONCE, auth=AUTH, now_ms=NOW))
    assert result.error.details["code"] == "AUTH_TOKEN_MISSING"


# --- hello-ok ---------------------------------------------------------------------------------


def _hello(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "server_version": "0.1.0",
        "conn_id": "c1",
        "methods": METHOD_NAMES,
        "events": EVENTS,
        "presence": [{"host": "h", "ts": 1}],
        "health": {"ok": True, "ts": 1},
        "state_version": {"presence": 1, "health": 2},
        "uptime_ms": 17,
        "role": "operator",
        "scopes": ["operator.read"],
        "max_payload": 26_214_400,
        "max_buffered_bytes": 52_428_800,
        "tick_interval_ms": 30_000,
        "boot_id": "b1",
        "build_id": "0.1.0-dev",
        "config_path": "/etc/gateway.toml",
        "state_dir": "/var/lib/gateway",
        "applied_config_hash": "sha256:00",
    }
    args.update(overrides)
    return build_hello_ok(**args)


def _key_paths(value: Any, prefix: str = "", skip: frozenset[str] = frozenset()) -> set[str]:
    if not isinstance(value, dict):
        return set()
    out = set()
    for key, item in value.items():
        path = f"{prefix}.{key}" if prefix else key
        out.add(path)
        if path not in skip:
            out |= _key_paths(item, path, skip)
    return out


def test_hello_ok_has_the_captured_shape_field_for_field() -> None:
    captured = example("hello-ok.json")["payload"]
    # Contents the caller supplies (health, presence) and lists are compared elsewhere.
    opaque = frozenset({"snapshot.health", "snapshot.presence", "features.methods", "pluginSurfaceUrls"})
    ours = _key_paths(_hello(), skip=opaque)
    theirs = _key_paths(captured, skip=opaque)
    # recoveryScope belongs to OpenClaw's device-token recovery, which the gateway does not offer.
    assert theirs - ours == {"auth.recoveryScope"}
    assert ours - theirs == set()


def test_hello_ok_values() -> None:
    captured = example("hello-ok.json")["payload"]
    hello = _hello()
    assert hello["type"] == "hello-ok" and hello["protocol"] == 4
    assert hello["server"]["connId"] == "c1"
    assert hello["features"]["methods"] == list(METHOD_NAMES)
    assert hello["features"]["events"] == list(EVENTS)
    assert hello["snapshot"]["stateVersion"] == {"presence": 1, "health": 2}
    assert hello["snapshot"]["presence"] == [{"host": "h", "ts": 1}]
    assert hello["auth"] == {"method": "token", "role": "operator", "scopes": ["operator.read"]}
    # With OpenClaw's limits the whole policy block, attachment sizes included, is identical.
    assert {
        k: hello["policy"][k] for k in ("maxPayload", "maxBufferedBytes", "tickIntervalMs", "attachments")
    } == {
        k: captured["policy"][k] for k in ("maxPayload", "maxBufferedBytes", "tickIntervalMs", "attachments")
    }
    assert hello["snapshot"]["sessionDefaults"]["mainSessionKey"] == "agent:main:main"
    json.dumps(hello)


def test_hello_ok_minimal_arguments_still_carry_the_schema_required_fields() -> None:
    hello = _hello(boot_id=None, build_id=None, config_path=None, state_dir=None)
    assert {"version", "connId"} <= set(hello["server"])
    assert {"methods", "events"} <= set(hello["features"])
    assert {"presence", "health", "stateVersion", "uptimeMs"} <= set(hello["snapshot"])
    assert {"role", "scopes"} <= set(hello["auth"])
    assert {"maxPayload", "maxBufferedBytes", "tickIntervalMs"} <= set(hello["policy"])
    assert "configPath" not in hello["snapshot"]
