"""The gateway's wire protocol (OpenClaw protocol v4 plus native session events), sans I/O.

Modules: `frames` (parse requests, serialise responses and events), `codes` (error, detail and
close codes), `handshake` (challenge, connect validation, hello-ok), `methods` (method table,
scopes, params validation), `params` (params models), `events` (session events in every wire
shape: native `session.*`, `session.message`, and through `compat` OpenClaw's `agent` / `chat`).
"""

from __future__ import annotations

from gateway.protocol.codes import PROTOCOL_VERSION, CloseCode, DetailCode, ErrorCode, ErrorShape
from gateway.protocol.compat import CompatPayloads, RunStream, render_compat
from gateway.protocol.connect_rejection import ConnectRejected
from gateway.protocol.events import CompatFrames, EventRenderer
from gateway.protocol.frames import (
    EventTemplate,
    FrameParser,
    ProtocolViolation,
    Request,
    encode_event_template,
    event_frame,
    response_error,
    response_ok,
)
from gateway.protocol.handshake import (
    ConnectAccepted,
    build_hello_ok,
    make_challenge,
    validate_connect,
)
from gateway.protocol.methods import (
    EVENTS,
    METHOD_NAMES,
    METHODS,
    InvalidParams,
    Scope,
    missing_scope_error,
    scope_allows,
    validate_params,
)

__all__ = [
    "EVENTS",
    "METHODS",
    "METHOD_NAMES",
    "PROTOCOL_VERSION",
    "CloseCode",
    "CompatFrames",
    "CompatPayloads",
    "ConnectAccepted",
    "ConnectRejected",
    "DetailCode",
    "ErrorCode",
    "ErrorShape",
    "EventRenderer",
    "EventTemplate",
    "FrameParser",
    "InvalidParams",
    "ProtocolViolation",
    "Request",
    "RunStream",
    "Scope",
    "build_hello_ok",
    "encode_event_template",
    "event_frame",
    "make_challenge",
    "missing_scope_error",
    "render_compat",
    "response_error",
    "response_ok",
    "scope_allows",
    "validate_connect",
    "validate_params",
]
