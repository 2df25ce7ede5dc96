"""Property-based tests of every parser that reads untrusted input: whatever comes in, each one
answers or raises only the errors it documents, so no input can take down the loop that calls it.

- `gateway.protocol.frames.FrameParser.parse`: never raises (it returns a `ProtocolViolation`).
- `gateway.protocol.methods.validate_params`: returns the model or `InvalidParams`; KeyError only
  for a method not in the table.
- `agent_core.validation.validate_tool_arguments`: returns the arguments or raises `ToolError`.
- Discord's gateway protocol and Slack's Socket Mode protocol `receive`: events, or
  `GatewayProtocolError` / `StateTransitionError` (the only errors their shells catch).
- Slack's Events API and Discord's Interactions signature checks: None or `SignatureError`; a
  request is accepted only with the right signature (and, for Slack, a fresh timestamp).
- Exec mediation's `classify`: never raises.

The strategies lean on what breaks parsers: deep nesting, huge numbers, NaN and Infinity, lone
surrogates, invalid UTF-8, sizes at the limits, wrong types in every field.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agent_core.errors import ToolError
from agent_core.messages import ToolCall
from agent_core.tools import create_coding_tools
from agent_core.validation import validate_tool_arguments
from bindings.discord.gateway import DiscordGatewayProtocol
from bindings.discord.interactions import verify_interaction
from bindings.errors import GatewayProtocolError, SignatureError, StateTransitionError
from bindings.slack.events_api import EventsEndpoint, verify_slack_request
from bindings.slack.socket_mode import SocketModeProtocol
from gateway.protocol.codes import CloseCode
from gateway.protocol.frames import FrameParser, ProtocolViolation, Request
from gateway.protocol.methods import METHODS, InvalidParams, validate_params
from gateway.sandbox import Classification, RiskTier, classify
from gateway.sandbox.exec_mediation import MAX_COMMAND_CHARS

pytestmark = pytest.mark.slow

SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- strategies --------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=25,
)
nasty_text = st.sampled_from(
    [
        "[" * 100_000,
        '{"a":' * 50_000 + "1" + "}" * 50_000,
        "9" * 5000,
        '{"id":"1","type":"req","method":"health","params":{"n":' + "9" * 5000 + "}}",
        '{"id":"1","type":"req","method":"health","params":NaN}',
        '{"id":"1","type":"req","method":"health","params":[Infinity,-Infinity]}',
        '{"id":"\\ud800","type":"req","method":"health"}',
        '{"id":"1","type":"req","method":"health","params":{"x":"\\udfff"}}',
        '{"id":"1","id":"2","type":"req","method":"health"}',
        "\ufeff" + '{"id":"1","type":"req","method":"health"}',
        '{"id":"1","type":"req","method":"\\u0000"}',
        "\x00" * 64,
        "",
        "null",
        "[]",
        '"connect"',
    ]
)
frame_text = (
    st.text(max_size=300)
    | nasty_text
    | json_values.map(json.dumps)
    | st.fixed_dictionaries(
        {
            "type": st.sampled_from(["req", "res", "event"]) | json_values,
            "id": st.text(min_size=1, max_size=300) | json_values,
            "method": st.sampled_from([*METHODS, "connect", "x" * 200]) | json_values,
            "params": json_values,
        }
    ).map(json.dumps)
)
frame_bytes = st.binary(max_size=300) | frame_text.map(lambda t: t.encode("utf-8", "surrogatepass"))


# --- the wire protocol -------------------------------------------------------------------------

PARSER = FrameParser(max_payload=200_000, pre_auth_max_payload=1024)


def _check_parsed(result: Request | ProtocolViolation) -> None:
    if isinstance(result, Request):
        assert result.method in METHODS or result.method == "connect"
        return
    assert isinstance(result, ProtocolViolation)
    if result.response is not None:
        answer = json.loads(result.response)
        assert answer["ok"] is False and answer["error"]["code"] == "INVALID_REQUEST", answer
        result.response.encode("utf-8")
    if result.close_code is not None:
        assert result.close_code in (CloseCode.NORMAL, CloseCode.POLICY_VIOLATION, CloseCode.MESSAGE_TOO_BIG)
        assert len(result.close_reason.encode("utf-8")) <= 123


@SETTINGS
@given(data=frame_text | frame_bytes, authenticated=st.booleans())
def test_frame_parser_never_raises_on_any_frame(data: str | bytes, authenticated: bool) -> None:
    _check_parsed(PARSER.parse(data, authenticated=authenticated))


@SETTINGS
@given(limit=st.integers(min_value=8, max_value=4096), char=st.sampled_from(["a", "é", "€", "😀"]))
def test_frame_parser_size_limit_counts_utf8_bytes_exactly(limit: int, char: str) -> None:
    parser = FrameParser(max_payload=limit, pre_auth_max_payload=limit)
    width = len(char.encode())
    fitting = char * (limit // width)
    over = fitting + char
    for authenticated in (False, True):
        result = parser.parse(fitting, authenticated=authenticated)
        assert not (isinstance(result, ProtocolViolation) and result.close_code == CloseCode.MESSAGE_TOO_BIG)
        result = parser.parse(over, authenticated=authenticated)
        assert isinstance(result, ProtocolViolation) and result.close_code == CloseCode.MESSAGE_TOO_BIG
        assert isinstance(parser.parse(over.encode(), authenticated=authenticated), ProtocolViolation)


field_names = sorted(
    {
        alias
        for spec in METHODS.values()
        for f in spec.params.model_fields.values()
        for alias in (f.alias,)
        if alias
    }
    | {"key", "sessionKey", "sessionId", "message", "idempotencyKey", "afterSeq", "limit", "runId"}
)
params_like = json_values | st.dictionaries(st.sampled_from(field_names), json_values, max_size=6)


@SETTINGS
@given(method=st.sampled_from(sorted(METHODS)), params=params_like)
def test_validate_params_answers_a_model_or_invalid_params_for_any_params(method: str, params: Any) -> None:
    result = validate_params(method, params)
    if isinstance(result, InvalidParams):
        assert result.message.startswith(f"invalid {method} params: "), result.message
        json.dumps(result.to_error().to_dict())
    else:
        assert isinstance(result, BaseModel)


def test_validate_params_raises_key_error_only_for_unknown_methods() -> None:
    with pytest.raises(KeyError):
        validate_params("no.such.method", {})


# --- tool arguments ----------------------------------------------------------------------------

TOOLS = create_coding_tools(Path("/nonexistent-workspace"))
RICH_SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": 0},
        "ratio": {"type": ["number", "null"]},
        "flag": {"type": "boolean"},
        "mode": {"enum": ["a", "b"]},
        "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "maxItems": 3},
        "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "both": {"allOf": [{"type": "object"}, {"required": ["x"]}]},
        "nested": {"type": "object", "additionalProperties": {"type": "number"}},
    },
    "required": ["n"],
    "$defs": {"item": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
}


class _Schema:
    name = "rich"
    parameters = RICH_SCHEMA


ARGUMENT_NAMES = ["path", "content", "command", "timeout", "oldText", "newText", "pattern", "limit", "offset"]
ARGUMENT_NAMES += ["n", "ratio", "flag", "mode", "items", "either", "both", "nested"]
tool_arguments = st.dictionaries(
    st.sampled_from(ARGUMENT_NAMES) | st.text(max_size=8),
    json_values,
    max_size=6,
)  # fmt: skip


@SETTINGS
@given(tool=st.sampled_from([*TOOLS, _Schema()]), arguments=tool_arguments)
def test_tool_argument_validation_raises_only_tool_error(tool: Any, arguments: dict[str, Any]) -> None:
    call = ToolCall(id="t1", name=tool.name, arguments=arguments)
    try:
        result = validate_tool_arguments(tool, call)
    except ToolError as exc:
        assert f'Validation failed for tool "{tool.name}"' in str(exc)
    else:
        assert isinstance(result, dict)
    assert call.arguments == arguments, "validation changed the caller's arguments"


# --- chat platform protocols -------------------------------------------------------------------

discord_frames = (
    st.text(max_size=200)
    | nasty_text
    | st.fixed_dictionaries(
        {"op": st.sampled_from([0, 1, 7, 9, 10, 11, 99]) | json_values, "d": json_values},
        optional={
            "s": json_values,
            "t": st.sampled_from(["READY", "RESUMED", "MESSAGE_CREATE"]) | json_values,
        },
    ).map(json.dumps)
    | st.sampled_from(
        [
            '{"op": Infinity}',
            '{"op": -Infinity, "d": null}',
            '{"op": NaN}',
            '{"op": 0, "t": "READY", "d": {"session_id": "s"}}',
            '{"op": 0, "t": "READY", "d": {"session_id": "s", "user": "u", "application": "app"}}',
            '{"op": 0, "t": "READY", "d": {"session_id": "s", "user": {"id": 1}, "application": [1]}}',
            '{"op": 10, "d": {"heartbeat_interval": "soon"}}',
            '{"op": 10, "d": {"heartbeat_interval": Infinity}}',
        ]
    )
)


@SETTINGS
@given(frames=st.lists(discord_frames | st.binary(max_size=50), min_size=1, max_size=6))
def test_discord_gateway_raises_only_protocol_errors(frames: list[str | bytes]) -> None:
    proto = DiscordGatewayProtocol(token="t", intents=1)
    proto.start("wss://gateway.example/")
    proto.connection_made(0.0)
    for now, frame in enumerate(frames):
        try:
            proto.receive(frame, float(now))
        except (GatewayProtocolError, StateTransitionError):
            continue
        proto.tick(float(now))
        for text in proto.data_to_send():
            json.loads(text)


slack_frames = (
    st.text(max_size=200)
    | nasty_text
    | st.fixed_dictionaries(
        {"type": st.sampled_from(["hello", "disconnect", "events_api", "slash_commands"]) | json_values},
        optional={
            "envelope_id": json_values,
            "payload": json_values,
            "retry_attempt": json_values,
            "num_connections": json_values,
            "reason": json_values,
            "accepts_response_payload": json_values,
        },
    ).map(json.dumps)
    | st.sampled_from(
        [
            '{"type": "hello", "num_connections": "two"}',
            '{"type": "hello", "num_connections": Infinity}',
            '{"type": "hello", "num_connections": {"n": 1}}',
            '{"envelope_id": "e1", "retry_attempt": "x"}',
            '{"envelope_id": "e1", "retry_attempt": Infinity}',
            '{"envelope_id": "e1", "retry_attempt": [1]}',
        ]
    )
)


@SETTINGS
@given(frames=st.lists(slack_frames | st.binary(max_size=50), min_size=1, max_size=6))
def test_slack_socket_mode_raises_only_protocol_errors(frames: list[str | bytes]) -> None:
    proto = SocketModeProtocol()
    proto.start()
    proto.connection_made(0.0)
    for now, frame in enumerate(frames):
        try:
            proto.receive(frame, float(now))
        except (GatewayProtocolError, StateTransitionError):
            continue
        for text in proto.data_to_send():
            assert "envelope_id" in json.loads(text)


# --- signed webhooks ---------------------------------------------------------------------------

SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
NOW = 1_700_000_000
header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=80)


def _slack_headers(body: bytes, timestamp: str, secret: str = SLACK_SECRET) -> dict[str, str]:
    base = b"v0:" + timestamp.encode() + b":" + body
    return {
        "x-slack-request-timestamp": timestamp,
        "x-slack-signature": "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest(),
    }


@SETTINGS
@given(
    timestamp=header_text | st.integers(NOW - 10**6, NOW + 10**6).map(str),
    signature=header_text,
    body=st.binary(max_size=200),
)
def test_slack_signature_check_refuses_anything_not_signed_with_the_secret(
    timestamp: str, signature: str, body: bytes
) -> None:
    headers = {"x-slack-request-timestamp": timestamp, "x-slack-signature": signature}
    with pytest.raises(SignatureError):
        verify_slack_request(SLACK_SECRET, headers, body, now=NOW)


@SETTINGS
@given(body=st.binary(max_size=200), skew=st.integers(-1000, 1000), tamper=st.booleans())
def test_slack_signed_request_is_accepted_only_fresh_and_untouched(
    body: bytes, skew: int, tamper: bool
) -> None:
    headers = _slack_headers(body, str(NOW + skew))
    sent = body + b"!" if tamper else body
    fresh = abs(skew) <= 300
    if fresh and not tamper:
        verify_slack_request(SLACK_SECRET, headers, sent, now=NOW)
    else:
        with pytest.raises(SignatureError):
            verify_slack_request(SLACK_SECRET, headers, sent, now=NOW)


async def _post(app: Any, body: bytes, headers: dict[str, str]) -> int:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return (await client.post("/", content=body, headers=headers)).status_code


@settings(max_examples=80, deadline=None)
@given(body=st.binary(max_size=120) | json_values.map(lambda v: json.dumps(v).encode()), signed=st.booleans())
@example(body=b'{"type":"event_callback","event_id":"Ev1","event":{"type":"message"}}', signed=True)
def test_slack_events_endpoint_never_fails_on_any_body(body: bytes, signed: bool) -> None:
    seen: list[dict[str, Any]] = []

    async def handler(payload: dict[str, Any]) -> bool:
        seen.append(payload)
        return True

    app = EventsEndpoint(SLACK_SECRET, handler, clock=lambda: float(NOW))
    headers = _slack_headers(body, str(NOW)) if signed else {"x-slack-signature": "v0=00"}
    code = asyncio.run(_post(app, body, headers))
    assert code in ((200, 400) if signed else (401,)), code
    assert not seen or signed


DISCORD_KEY = Ed25519PrivateKey.generate()


@SETTINGS
@given(signature=header_text, timestamp=header_text, body=st.binary(max_size=200))
def test_discord_interaction_check_refuses_anything_not_signed_with_the_key(
    signature: str, timestamp: str, body: bytes
) -> None:
    with pytest.raises(SignatureError):
        verify_interaction(DISCORD_KEY.public_key(), signature, timestamp, body, now=NOW, max_age_s=300)


@SETTINGS
@given(body=st.binary(max_size=200), skew=st.integers(-1000, 1000))
def test_discord_signed_interaction_is_refused_outside_the_window(body: bytes, skew: int) -> None:
    timestamp = str(NOW + skew)
    signature = DISCORD_KEY.sign(timestamp.encode() + body).hex()
    if abs(skew) <= 300:
        verify_interaction(DISCORD_KEY.public_key(), signature, timestamp, body, now=NOW, max_age_s=300)
    else:
        with pytest.raises(SignatureError):
            verify_interaction(DISCORD_KEY.public_key(), signature, timestamp, body, now=NOW, max_age_s=300)


# --- exec mediation ----------------------------------------------------------------------------

shell_text = st.lists(
    st.sampled_from([*"abcrmfd -/\\\"'`$(){}[]|&;<>*?~!#=\n\t", "rm -rf /", "$(", "<(", "bash -c ", "eval "]),
    max_size=60,
).map("".join)


@SETTINGS
@given(command=st.text(max_size=300) | shell_text | nasty_text)
@example(command="$(" * 5000)
@example(command="bash -c '" * 500)
@example(command="x" * (MAX_COMMAND_CHARS + 1))
@example(command="cat /etc/sha[y-<]dow")  # a reversed glob range once raised re.error
def test_exec_classifier_never_raises_and_is_deterministic(command: str) -> None:
    started = time.monotonic()
    first = classify(command)
    assert time.monotonic() - started < 5, "classification took too long"
    assert isinstance(first, Classification)
    assert classify(command) == first
    if len(command) > MAX_COMMAND_CHARS:
        assert first.risk >= RiskTier.HIGH
