"""The gateway's wire protocol (OpenClaw protocol v4 plus native session events), sans I/O.

Modules: `frames` (parse requests, serialise responses and events), `codes` (error, detail and
close codes), `handshake` (challenge, connect validation, hello-ok), `methods` (method table,
scopes, params validation), `params` (params models), `events` (session events in every wire
shape: native `session.*`, `session.message`, and through `compat` OpenClaw's `agent` / `chat`).

The names below are imported from their modules on first use: a client of the protocol
(`gatewayctl`, which needs the scope names) does not load the session model that `compat` and
`events` render from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core.lazy_exports import exports_on_first_use

if TYPE_CHECKING:
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
    from gateway.protocol.handshake import ConnectAccepted, build_hello_ok, make_challenge, validate_connect
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

_ON_FIRST_USE = {
    "PROTOCOL_VERSION": "gateway.protocol.codes",
    "CloseCode": "gateway.protocol.codes",
    "DetailCode": "gateway.protocol.codes",
    "ErrorCode": "gateway.protocol.codes",
    "ErrorShape": "gateway.protocol.codes",
    "CompatPayloads": "gateway.protocol.compat",
    "RunStream": "gateway.protocol.compat",
    "render_compat": "gateway.protocol.compat",
    "ConnectRejected": "gateway.protocol.connect_rejection",
    "CompatFrames": "gateway.protocol.events",
    "EventRenderer": "gateway.protocol.events",
    "EventTemplate": "gateway.protocol.frames",
    "FrameParser": "gateway.protocol.frames",
    "ProtocolViolation": "gateway.protocol.frames",
    "Request": "gateway.protocol.frames",
    "encode_event_template": "gateway.protocol.frames",
    "event_frame": "gateway.protocol.frames",
    "response_error": "gateway.protocol.frames",
    "response_ok": "gateway.protocol.frames",
    "ConnectAccepted": "gateway.protocol.handshake",
    "build_hello_ok": "gateway.protocol.handshake",
    "make_challenge": "gateway.protocol.handshake",
    "validate_connect": "gateway.protocol.handshake",
    "EVENTS": "gateway.protocol.methods",
    "METHOD_NAMES": "gateway.protocol.methods",
    "METHODS": "gateway.protocol.methods",
    "InvalidParams": "gateway.protocol.methods",
    "Scope": "gateway.protocol.methods",
    "missing_scope_error": "gateway.protocol.methods",
    "scope_allows": "gateway.protocol.methods",
    "validate_params": "gateway.protocol.methods",
}
"""Every name this package exports, by the module that defines it."""

__getattr__ = exports_on_first_use(__name__, globals(), _ON_FIRST_USE)

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
