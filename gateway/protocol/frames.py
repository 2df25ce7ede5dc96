"""Sans-I/O frames: parse what a client sends, serialise what the gateway sends.

`FrameParser.parse` takes one WebSocket message (text, or bytes holding UTF-8) and returns either
a `Request` to dispatch or a `ProtocolViolation` that says what to answer and whether to close.
It never raises for any input. The serialisers produce compact JSON text frames.

For fan-out, `encode_event_template` serialises an event once; `EventTemplate.with_seq` then makes
each connection's frame by splicing that connection's `seq` into the pre-serialised text, so the
payload is never serialised again per subscriber. A template also says whether the event is
droppable (a delta a slow client may lose, the gap visible in its `seq`).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Collection, Mapping
from typing import Any

import msgspec

from gateway.protocol.codes import CloseCode, ErrorCode, ErrorShape, truncate_close_reason
from gateway.protocol.methods import METHOD_NAMES

DEFAULT_MAX_PAYLOAD = 25 * 1024 * 1024
DEFAULT_PRE_AUTH_MAX_PAYLOAD = 64 * 1024
MAX_ID_LENGTH = 256
MAX_METHOD_LENGTH = 128

FIRST_REQUEST_MUST_BE_CONNECT = "invalid handshake: first request must be connect"

_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


class RawJSON(msgspec.Struct, frozen=True):
    """JSON text serialised already (compact, valid UTF-8), which `dumps` inserts as it is: a
    large value that changes rarely and is sent often (the presence list) is encoded once."""

    text: str


class _Raw(Exception):
    """`dumps` met a `RawJSON`: the value is encoded again with placeholders (`_with_raw`)."""


def _refuse_raw(value: Any) -> Any:
    if isinstance(value, RawJSON):
        raise _Raw
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _encode(value: Any, default: Any, *, ascii_only: bool = False) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=ascii_only, allow_nan=False, default=default)


def dumps(value: Any) -> str:
    """Compact JSON (no spaces, non-ASCII left unescaped). Raises TypeError/ValueError for values
    JSON cannot hold (objects of unknown types, NaN, infinities). A `RawJSON` anywhere in `value`
    is inserted as its text.

    The result always encodes to UTF-8: a string holding an unpaired surrogate (which a Python
    str can, e.g. from a provider's JSON) makes the whole text fall back to `\\u` escapes.
    """
    try:
        text = _encode(value, _refuse_raw)
    except _Raw:
        return _with_raw(value)
    if not _is_utf8(text):
        text = _encode(value, _refuse_raw, ascii_only=True)
    return text


def _is_utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _with_raw(value: Any) -> str:
    """`dumps` of a value holding `RawJSON`s: encoded once with a placeholder string in place of
    each, whose encoded form is then replaced by the raw text. A placeholder is a NUL, a random
    nonce of this call and the raw value's index, then a NUL: JSON escapes the NULs, so no string
    of the value's own can be mistaken for one unless it holds this call's nonce."""
    nonce = secrets.token_hex(8)
    raws: list[str] = []

    def placeholder(item: Any) -> str:
        if isinstance(item, RawJSON):
            raws.append(item.text)
            return f"\0{nonce}:{len(raws) - 1}\0"
        raise TypeError(f"Object of type {type(item).__name__} is not JSON serializable")

    text = _encode(value, placeholder)
    if not _is_utf8(text):
        raws.clear()
        text = _encode(value, placeholder, ascii_only=True)
    for index, raw in enumerate(raws):
        text = text.replace(f'"\\u0000{nonce}:{index}\\u0000"', raw, 1)
    return text


class Request(msgspec.Struct, frozen=True):
    """A well-formed request. `params` is whatever JSON value the client sent (None if absent)."""

    id: str
    method: str
    params: Any = None


class ProtocolViolation(msgspec.Struct, frozen=True):
    """A frame the gateway will not dispatch.

    The caller sends `response` when it is not None (an error response to the offending request),
    then closes the connection with `close_code` / `close_reason` when `close_code` is not None.
    `message` describes the problem for logs.
    """

    message: str
    response: str | None = None
    close_code: CloseCode | None = None
    close_reason: str = ""

    @property
    def closes(self) -> bool:
        return self.close_code is not None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class FrameParser:
    """Turns one incoming WebSocket message into a `Request` or a `ProtocolViolation`.

    Stateless: the caller says whether the connection has completed `connect`. Policy:

    - oversize (over `pre_auth_max_payload` before connect, `max_payload` after): close 1009;
    - bytes that are not UTF-8, text that is not JSON: before connect close 1000 without an
      answer (what OpenClaw does), after connect close 1008 (there is no id to answer);
    - JSON without a usable `id` (not an object, id missing, empty or longer than 256): close
      1008 without an answer;
    - before connect, anything but a well-formed `connect` request: answered `invalid handshake:
      first request must be connect`, close 1008;
    - after connect, a malformed request with a usable id: answered INVALID_REQUEST
      `invalid request frame: ...`; an unknown method: answered `unknown method: X`; a second
      `connect`: answered `invalid handshake: already connected`; the connection is kept.
    """

    def __init__(
        self,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        pre_auth_max_payload: int = DEFAULT_PRE_AUTH_MAX_PAYLOAD,
        *,
        methods: Collection[str] = METHOD_NAMES,
    ) -> None:
        if max_payload < 1 or pre_auth_max_payload < 1:
            raise ValueError("payload limits must be positive")
        self.max_payload = max_payload
        self.pre_auth_max_payload = pre_auth_max_payload
        self._methods = frozenset(methods)

    def parse(self, data: str | bytes, *, authenticated: bool) -> Request | ProtocolViolation:
        limit = self.max_payload if authenticated else self.pre_auth_max_payload
        text = self._decode(data, limit, authenticated=authenticated)
        if isinstance(text, ProtocolViolation):
            return text
        try:
            frame = json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            return self._unreadable(f"malformed JSON: {_first_line(exc)}", authenticated)
        if "\\u" in text and _ESCAPED_SURROGATE.search(text) and not _encodable(frame):
            return self._unreadable("string with an unpaired surrogate escape", authenticated)
        return self._request(frame, authenticated)

    # --- steps ----------------------------------------------------------------------------

    def _decode(self, data: str | bytes, limit: int, *, authenticated: bool) -> str | ProtocolViolation:
        if isinstance(data, str):
            # A character is 1-4 UTF-8 bytes: only encode when the length leaves doubt.
            if len(data) > limit:
                return _too_big(authenticated)
            if data.isascii():
                return data
            try:
                size = len(data.encode("utf-8"))
            except UnicodeEncodeError:
                return self._unreadable("text is not valid Unicode", authenticated)
            return _too_big(authenticated) if size > limit else data
        if len(data) > limit:
            return _too_big(authenticated)
        try:
            return bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            return self._unreadable("frame is not valid UTF-8", authenticated)

    def _request(self, frame: Any, authenticated: bool) -> Request | ProtocolViolation:
        if not isinstance(frame, dict):
            return self._unusable("frame is not a JSON object", authenticated)
        request_id = frame.get("id")
        if not isinstance(request_id, str) or not request_id or len(request_id) > MAX_ID_LENGTH:
            why = "id must be a non-empty string" + (
                f" of at most {MAX_ID_LENGTH} characters" if isinstance(request_id, str) else ""
            )
            return self._unusable(f"invalid request frame: {why}", authenticated)
        problem = _shape_problem(frame)
        if problem is not None:
            return self._answer(request_id, f"invalid request frame: {problem}", authenticated)
        method: str = frame["method"]
        params = frame.get("params")
        if not authenticated:
            if method != "connect":
                return self._answer(request_id, f"first request was {method!r}", authenticated)
            return Request(request_id, method, params)
        if method == "connect":
            return self._answer(request_id, "invalid handshake: already connected", authenticated)
        if method not in self._methods:
            return self._answer(request_id, f"unknown method: {method}", authenticated)
        return Request(request_id, method, params)

    @staticmethod
    def _answer(request_id: str, message: str, authenticated: bool) -> ProtocolViolation:
        """An error response to a request we could identify. Before connect every such answer is
        OpenClaw's `invalid handshake: first request must be connect`, followed by a close."""
        if authenticated:
            return ProtocolViolation(
                message=message, response=response_error(request_id, ErrorCode.INVALID_REQUEST, message)
            )
        return ProtocolViolation(
            message=message,
            response=response_error(request_id, ErrorCode.INVALID_REQUEST, FIRST_REQUEST_MUST_BE_CONNECT),
            close_code=CloseCode.POLICY_VIOLATION,
            close_reason=FIRST_REQUEST_MUST_BE_CONNECT,
        )

    @staticmethod
    def _unusable(message: str, authenticated: bool) -> ProtocolViolation:
        """JSON without a usable request id: nothing can be answered, so the connection closes."""
        reason = f"invalid frame: {message}" if authenticated else FIRST_REQUEST_MUST_BE_CONNECT
        return ProtocolViolation(
            message=message, close_code=CloseCode.POLICY_VIOLATION, close_reason=truncate_close_reason(reason)
        )

    @staticmethod
    def _unreadable(message: str, authenticated: bool) -> ProtocolViolation:
        """Not JSON at all. Before connect OpenClaw closes with 1000 and no reason; after connect
        it is a policy violation."""
        if authenticated:
            return ProtocolViolation(
                message=message,
                close_code=CloseCode.POLICY_VIOLATION,
                close_reason=truncate_close_reason(f"invalid frame: {message}"),
            )
        return ProtocolViolation(message=message, close_code=CloseCode.NORMAL, close_reason="")


def _shape_problem(frame: Mapping[str, Any]) -> str | None:
    if frame.get("type") != "req":
        return 'type must be "req"'
    method = frame.get("method")
    if not isinstance(method, str) or not method:
        return "method must be a non-empty string"
    if len(method) > MAX_METHOD_LENGTH:
        return f"method must be at most {MAX_METHOD_LENGTH} characters"
    return None


def _too_big(authenticated: bool) -> ProtocolViolation:
    reason = "payload too large" if authenticated else "preauth payload too large"
    return ProtocolViolation(message=reason, close_code=CloseCode.MESSAGE_TOO_BIG, close_reason=reason)


def _encodable(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, ValueError, RecursionError):
        return False
    return True


def _first_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]


# --- serialisers ------------------------------------------------------------------------------


def response_ok(request_id: str, payload: Any = None) -> str:
    """`{"type":"res","id":...,"ok":true,"payload":...}` (payload left out when None)."""
    frame: dict[str, Any] = {"type": "res", "id": request_id, "ok": True}
    if payload is not None:
        frame["payload"] = payload
    return dumps(frame)


def response_error(
    request_id: str,
    code: ErrorCode | str,
    message: str,
    *,
    details: Any = None,
    retryable: bool | None = None,
    retry_after_ms: int | None = None,
    payload: Any = None,
) -> str:
    """A failed response. `payload` is for the rare final answer that carries both (OpenClaw's
    failed `agent` final does)."""
    error = ErrorShape(code, message, details, retryable, retry_after_ms)
    return response_from_error(request_id, error, payload=payload)


def response_from_error(request_id: str, error: ErrorShape, *, payload: Any = None) -> str:
    frame: dict[str, Any] = {"type": "res", "id": request_id, "ok": False}
    if payload is not None:
        frame["payload"] = payload
    frame["error"] = error.to_dict()
    return dumps(frame)


def _state_version_dict(state_version: Mapping[str, int] | None) -> dict[str, int] | None:
    if state_version is None:
        return None
    return {"presence": int(state_version["presence"]), "health": int(state_version["health"])}


def event_frame(
    event: str,
    payload: Any = None,
    seq: int | None = None,
    state_version: Mapping[str, int] | None = None,
) -> str:
    """`{"type":"event","event":...,"payload":...,"seq":...,"stateVersion":...}`; absent parts
    (None) are left out. `state_version` needs the keys `presence` and `health`."""
    frame: dict[str, Any] = {"type": "event", "event": event}
    if payload is not None:
        frame["payload"] = payload
    if seq is not None:
        frame["seq"] = seq
    sv = _state_version_dict(state_version)
    if sv is not None:
        frame["stateVersion"] = sv
    return dumps(frame)


class EventTemplate(msgspec.Struct, frozen=True):
    """An event serialised once, waiting for each connection's `seq`.

    `head` is the frame up to and including the payload, `tail` is the rest (state version and
    closing brace); `with_seq(n)` is `head + ',"seq":n' + tail`, byte for byte what `event_frame`
    would produce with the same arguments. `droppable` events (deltas, progress, list
    notifications) may be dropped for a client that falls behind; the others may not.
    """

    event: str
    head: str
    tail: str
    head_bytes: int
    tail_bytes: int
    droppable: bool = False

    def with_seq(self, seq: int) -> str:
        return f'{self.head},"seq":{seq:d}{self.tail}'

    def without_seq(self) -> str:
        """The frame with no `seq` (only the challenge goes out like this)."""
        return self.head + self.tail

    def byte_size(self, seq: int) -> int:
        """UTF-8 size of `with_seq(seq)`, for send-buffer accounting without encoding it."""
        return self.head_bytes + self.tail_bytes + 7 + len(str(seq))


def encode_event_template(
    event: str,
    payload: Any = None,
    state_version: Mapping[str, int] | None = None,
    *,
    droppable: bool = False,
) -> EventTemplate:
    """Serialise `event` once for fan-out; see `EventTemplate`. Raises TypeError/ValueError for a
    payload JSON cannot hold (see `dumps`)."""
    return event_template_from_json(
        event, None if payload is None else dumps(payload), state_version, droppable=droppable
    )


def event_template_from_json(
    event: str,
    payload_json: str | None,
    state_version: Mapping[str, int] | None = None,
    *,
    droppable: bool = False,
) -> EventTemplate:
    """`encode_event_template` for a payload already serialised (`payload_json`, compact JSON
    text, None for no payload): the same template, without encoding the payload again."""
    head = '{"type":"event","event":' + dumps(event)
    if payload_json is not None:
        head += ',"payload":' + payload_json
    sv = _state_version_dict(state_version)
    tail = ("," + '"stateVersion":' + dumps(sv) if sv is not None else "") + "}"
    return EventTemplate(
        event=event,
        head=head,
        tail=tail,
        head_bytes=len(head.encode("utf-8")) if not head.isascii() else len(head),
        tail_bytes=len(tail),
        droppable=droppable,
    )
