from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.protocol.codes import CloseCode
from gateway.protocol.frames import (
    MAX_ID_LENGTH,
    FrameParser,
    ProtocolViolation,
    RawJSON,
    Request,
    dumps,
    encode_event_template,
    event_frame,
    response_error,
    response_ok,
)
from tests.gateway.protocol._captures import exchanges, records

PARSER = FrameParser()


def req(method: str = "health", params: Any = None, id: Any = "r1", **extra: Any) -> str:
    frame: dict[str, Any] = {"type": "req", "id": id, "method": method, **extra}
    if params is not None:
        frame["params"] = params
    return json.dumps(frame, ensure_ascii=False)


def violation(result: Request | ProtocolViolation) -> ProtocolViolation:
    assert isinstance(result, ProtocolViolation), result
    return result


def error_of(v: ProtocolViolation) -> dict[str, Any]:
    assert v.response is not None
    frame: dict[str, Any] = json.loads(v.response)
    assert frame["type"] == "res" and frame["ok"] is False
    return frame


# --- well-formed requests ---------------------------------------------------------------------


def test_parses_a_request_with_and_without_params() -> None:
    assert PARSER.parse(req("chat.history", {"sessionKey": "k"}), authenticated=True) == Request(
        "r1", "chat.history", {"sessionKey": "k"}
    )
    assert PARSER.parse(req("health"), authenticated=True) == Request("r1", "health", None)


def test_accepts_utf8_bytes_and_keeps_non_ascii_text() -> None:
    raw = req("chat.send", {"message": "héllo ☃ 😀"}).encode()
    parsed = PARSER.parse(raw, authenticated=True)
    assert isinstance(parsed, Request)
    assert parsed.params == {"message": "héllo ☃ 😀"}


def test_surrogate_pair_escapes_are_fine() -> None:
    text = '{"type":"req","id":"r1","method":"chat.send","params":{"message":"\\ud83d\\ude00"}}'
    parsed = PARSER.parse(text, authenticated=True)
    assert isinstance(parsed, Request)
    assert parsed.params == {"message": "😀"}


def test_every_captured_client_request_parses() -> None:
    for name in ("captured_handshakes.jsonl", "captured_requests.jsonl"):
        for record in records(name):
            if record["dir"] != "C->S":
                continue
            frame = record["frame"]
            parsed = PARSER.parse(json.dumps(frame), authenticated=frame["method"] != "connect")
            assert parsed == Request(frame["id"], frame["method"], frame.get("params"))


# --- before connect ---------------------------------------------------------------------------


def test_first_frame_not_connect_is_answered_like_openclaw_and_closes_1008() -> None:
    (request, response, close), (not_json, _, not_json_close) = exchanges("captured_first_frames.jsonl")
    v = violation(PARSER.parse(json.dumps(request), authenticated=False))
    assert error_of(v) == response
    assert (v.close_code, v.close_reason) == (close["code"], close["reason"])

    v = violation(PARSER.parse(not_json, authenticated=False))
    assert v.response is None
    assert (v.close_code, v.close_reason) == (not_json_close["code"], not_json_close["reason"])


def test_connect_before_auth_is_a_request() -> None:
    assert PARSER.parse(req("connect", {"minProtocol": 4}), authenticated=False) == Request(
        "r1", "connect", {"minProtocol": 4}
    )


@pytest.mark.parametrize(
    "frame",
    [
        '{"type":"res","id":"r1","method":"connect"}',
        '{"type":"req","id":"r1","method":7}',
        '{"type":"req","id":"r1"}',
    ],
)
def test_malformed_request_before_connect_gets_the_handshake_answer(frame: str) -> None:
    v = violation(PARSER.parse(frame, authenticated=False))
    assert error_of(v)["error"]["message"] == "invalid handshake: first request must be connect"
    assert v.close_code == CloseCode.POLICY_VIOLATION


@pytest.mark.parametrize(
    "frame", ["[]", "7", '"x"', "null", '{"type":"req","method":"connect"}', '{"id":""}']
)
def test_json_without_a_usable_id_before_connect_closes_without_answer(frame: str) -> None:
    v = violation(PARSER.parse(frame, authenticated=False))
    assert v.response is None
    assert v.close_code == CloseCode.POLICY_VIOLATION
    assert v.close_reason == "invalid handshake: first request must be connect"


def test_pre_auth_size_limit_closes_1009_at_exactly_one_byte_over() -> None:
    parser = FrameParser(max_payload=1000, pre_auth_max_payload=100)
    base = req("connect", {"x": ""})
    at_limit = req("connect", {"x": "a" * (100 - len(base))})
    assert len(at_limit) == 100
    assert isinstance(parser.parse(at_limit, authenticated=False), Request)
    over = req("connect", {"x": "a" * (101 - len(base))})
    v = violation(parser.parse(over, authenticated=False))
    assert (v.close_code, v.close_reason) == (CloseCode.MESSAGE_TOO_BIG, "preauth payload too large")
    assert v.response is None
    v = violation(parser.parse(over.encode(), authenticated=False))
    assert v.close_code == CloseCode.MESSAGE_TOO_BIG
    # The same size is fine once connected.
    assert isinstance(parser.parse(req("health", {"x": "a" * 100}), authenticated=True), Request)


# --- after connect ----------------------------------------------------------------------------


def test_unknown_method_is_answered_exactly_like_openclaw_and_keeps_the_connection() -> None:
    request, response, _ = next(
        e for e in exchanges("captured_method_errors.jsonl") if e[0]["method"] == "no.such.method"
    )
    v = violation(PARSER.parse(json.dumps(request), authenticated=True))
    assert error_of(v) == response
    assert not v.closes


def test_second_connect_is_refused_without_closing() -> None:
    v = violation(PARSER.parse(req("connect"), authenticated=True))
    assert error_of(v)["error"] == {
        "code": "INVALID_REQUEST",
        "message": "invalid handshake: already connected",
    }
    assert not v.closes


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        ('{"type":"event","id":"r9","method":"health"}', 'invalid request frame: type must be "req"'),
        ('{"id":"r9","method":"health"}', 'invalid request frame: type must be "req"'),
        ('{"type":"req","id":"r9","method":""}', "invalid request frame: method must be a non-empty string"),
        (
            '{"type":"req","id":"r9","method":["health"]}',
            "invalid request frame: method must be a non-empty string",
        ),
        (
            '{"type":"req","id":"r9","method":"' + "m" * 200 + '"}',
            "invalid request frame: method must be at most 128 characters",
        ),
    ],
)
def test_wrong_types_with_a_usable_id_are_answered(frame: str, message: str) -> None:
    v = violation(PARSER.parse(frame, authenticated=True))
    assert error_of(v) == {
        "type": "res",
        "id": "r9",
        "ok": False,
        "error": {"code": "INVALID_REQUEST", "message": message},
    }
    assert not v.closes


@pytest.mark.parametrize(
    "frame",
    [
        "not json",
        "{",
        '{"type":"req","id":"r1","method":"health"} trailing',
        "[1,2]",
        "42",
        '{"type":"req","id":7,"method":"health"}',
        '{"type":"req","id":"","method":"health"}',
        '{"type":"req","id":null,"method":"health"}',
        '{"type":"req","id":"' + "x" * (MAX_ID_LENGTH + 1) + '","method":"health"}',
        '{"type":"req","id":"r1","method":"health","params":NaN}',
        '{"type":"req","id":"r1","method":"health","params":Infinity}',
    ],
)
def test_unusable_frames_after_connect_close_1008_without_answer(frame: str) -> None:
    v = violation(PARSER.parse(frame, authenticated=True))
    assert v.response is None
    assert v.close_code == CloseCode.POLICY_VIOLATION
    assert v.close_reason.startswith("invalid frame: ")
    assert len(v.close_reason.encode()) <= 123


def test_invalid_utf8_bytes_are_refused() -> None:
    v = violation(
        PARSER.parse(b'{"type":"req","id":"r1","method":"health","x":"\xff\xfe"}', authenticated=True)
    )
    assert v.message == "frame is not valid UTF-8"
    assert v.close_code == CloseCode.POLICY_VIOLATION
    v = violation(PARSER.parse(b"\xc3\x28", authenticated=False))
    assert v.close_code == CloseCode.NORMAL


def test_oversize_after_connect_closes_1009_counting_utf8_bytes() -> None:
    parser = FrameParser(max_payload=200, pre_auth_max_payload=100)
    # 60 characters of 3 bytes each: under the limit in characters, over it in bytes.
    text = req("chat.send", {"message": "☃" * 60})
    assert len(text) < 200 < len(text.encode())
    v = violation(parser.parse(text, authenticated=True))
    assert (v.close_code, v.close_reason) == (CloseCode.MESSAGE_TOO_BIG, "payload too large")
    v = violation(parser.parse(text.encode(), authenticated=True))
    assert v.close_code == CloseCode.MESSAGE_TOO_BIG
    assert isinstance(parser.parse(req("chat.send", {"message": "☃" * 30}), authenticated=True), Request)


def test_unpaired_surrogates_never_reach_the_caller() -> None:
    escaped = '{"type":"req","id":"\\ud800","method":"health"}'
    assert isinstance(PARSER.parse(escaped, authenticated=True), ProtocolViolation)
    raw = '{"type":"req","id":"r1","method":"health","params":{"x":"\ud800"}}'
    assert isinstance(PARSER.parse(raw, authenticated=True), ProtocolViolation)


def test_deep_nesting_does_not_raise() -> None:
    deep = '{"type":"req","id":"r1","method":"health","params":' + "[" * 100_000 + "]" * 100_000 + "}"
    assert isinstance(PARSER.parse(deep, authenticated=True), ProtocolViolation)


def test_custom_method_table() -> None:
    parser = FrameParser(methods={"only.this"})
    assert isinstance(parser.parse(req("only.this"), authenticated=True), Request)
    assert isinstance(parser.parse(req("health"), authenticated=True), ProtocolViolation)


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError):
        FrameParser(max_payload=0)


# --- the parser never raises ------------------------------------------------------------------

# Text including unpaired surrogates, which a Python str can hold but UTF-8 cannot.
any_text = st.text(st.characters(exclude_categories=[]))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | any_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(any_text, children, max_size=4),
    max_leaves=20,
)
frame_like = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["req", "res", "event"]) | json_values,
        "id": st.text(max_size=300) | any_text | json_values,
        "method": st.sampled_from(["health", "connect", "chat.send", "nope"]) | json_values,
        "params": json_values,
    },
)


def _check(result: Request | ProtocolViolation) -> None:
    if isinstance(result, Request):
        assert isinstance(result.id, str) and 0 < len(result.id) <= MAX_ID_LENGTH
        assert isinstance(result.method, str) and result.method
        dumps({"id": result.id, "params": result.params}).encode("utf-8")
        return
    assert isinstance(result, ProtocolViolation)
    if result.response is not None:
        frame = json.loads(result.response)
        assert frame["type"] == "res" and frame["ok"] is False
        result.response.encode("utf-8")
    if result.close_code is not None:
        assert result.close_code in CloseCode
        assert len(result.close_reason.encode("utf-8")) <= 123


@settings(max_examples=300, deadline=None)
@given(data=any_text | st.binary(), authenticated=st.booleans())
def test_arbitrary_input_never_raises(data: str | bytes, authenticated: bool) -> None:
    _check(FrameParser(max_payload=4096, pre_auth_max_payload=512).parse(data, authenticated=authenticated))


@settings(max_examples=300, deadline=None)
@given(frame=frame_like, authenticated=st.booleans(), as_bytes=st.booleans())
def test_arbitrary_frame_objects_never_raise(
    frame: dict[str, Any], authenticated: bool, as_bytes: bool
) -> None:
    text = json.dumps(frame, ensure_ascii=False)
    data: str | bytes = text.encode("utf-8", "surrogatepass") if as_bytes else text
    _check(PARSER.parse(data, authenticated=authenticated))


# --- serialisers ------------------------------------------------------------------------------


def test_response_serialisers_are_compact_and_keep_utf8() -> None:
    assert response_ok("r1", {"a": "é"}) == '{"type":"res","id":"r1","ok":true,"payload":{"a":"é"}}'
    assert response_ok("r1") == '{"type":"res","id":"r1","ok":true}'
    assert json.loads(
        response_error(
            "r2", "UNAVAILABLE", "busy", details={"reason": "x"}, retryable=True, retry_after_ms=500
        )
    ) == {
        "type": "res",
        "id": "r2",
        "ok": False,
        "error": {
            "code": "UNAVAILABLE",
            "message": "busy",
            "details": {"reason": "x"},
            "retryable": True,
            "retryAfterMs": 500,
        },
    }


def test_event_frame_field_order_matches_captures() -> None:
    captured = next(r["frame"] for r in records("fake_run_events.jsonl") if r["frame"]["event"] == "agent")
    assert event_frame("agent", captured["payload"], seq=captured["seq"]) == json.dumps(
        captured, separators=(",", ":"), ensure_ascii=False
    )
    health = event_frame("health", {"ok": True}, seq=1, state_version={"presence": 1, "health": 3})
    assert health == (
        '{"type":"event","event":"health","payload":{"ok":true},"seq":1,'
        '"stateVersion":{"presence":1,"health":3}}'
    )
    assert event_frame("tick") == '{"type":"event","event":"tick"}'


def test_serialised_text_always_encodes_to_utf8() -> None:
    text = response_ok("r1", {"text": "ok \ud800 😀"})
    text.encode("utf-8")
    assert json.loads(text)["payload"]["text"] == "ok \ud800 😀"
    assert response_ok("r1", {"text": "😀"}) == '{"type":"res","id":"r1","ok":true,"payload":{"text":"😀"}}'


def test_dumps_refuses_values_json_cannot_hold() -> None:
    with pytest.raises(ValueError):
        dumps({"x": float("nan")})
    with pytest.raises(TypeError):
        dumps({"x": object()})


@settings(max_examples=200, deadline=None)
@given(value=json_values, other=json_values)
@example(value="\x00", other="\ud800")
def test_raw_json_is_inserted_as_its_text_wherever_it_sits(value: Any, other: Any) -> None:
    try:
        raw = RawJSON(dumps(value))
        dumps(other)
    except ValueError:  # infinities: not JSON
        return
    framed = {"first": raw, "other": other, "nested": [other, {"again": raw}], "same": value}
    text = dumps(framed)
    assert json.loads(text) == {
        "first": value,
        "other": other,
        "nested": [other, {"again": value}],
        "same": value,
    }
    text.encode("utf-8")  # always valid UTF-8, whatever `other` holds


def test_a_string_shaped_like_a_placeholder_stays_a_string() -> None:
    lookalike = "\x000123456789abcdef:0\x00"
    text = dumps({"text": lookalike, "raw": RawJSON("[1,2]")})
    assert json.loads(text) == {"text": lookalike, "raw": [1, 2]}


@settings(max_examples=200, deadline=None)
@given(
    event=st.text(min_size=1, max_size=20),
    payload=json_values,
    seq=st.integers(min_value=0, max_value=2**53),
    state_version=st.none()
    | st.fixed_dictionaries({"presence": st.integers(0, 10**6), "health": st.integers(0, 10**6)}),
)
@example(event="\x7f", payload="\ud800", seq=0, state_version=None)
def test_template_splice_equals_full_serialisation(
    event: str, payload: Any, seq: int, state_version: dict[str, int] | None
) -> None:
    try:
        expected = event_frame(event, payload, seq=seq, state_version=state_version)
    except ValueError:
        return
    template = encode_event_template(event, payload, state_version=state_version)
    spliced = template.with_seq(seq)
    # The same frame; the bytes may differ only in escaping (a payload holding an unpaired
    # surrogate is escaped on its own, where the whole frame falls back to escapes as a unit).
    assert json.loads(spliced) == json.loads(expected)
    if "\\u" not in expected:
        assert spliced == expected
    assert template.byte_size(seq) == len(spliced.encode("utf-8"))
    assert json.loads(spliced)["seq"] == seq
    without = event_frame(event, payload, state_version=state_version)
    assert json.loads(template.without_seq()) == json.loads(without)
