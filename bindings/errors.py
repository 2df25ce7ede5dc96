"""Errors of the chat bindings.

BindingError
├── BindingConfigError         a setting or a secret is missing or invalid (names the key)
├── StateTransitionError       an illegal connection-state change (names the states expected)
├── RoutingError               an agent id or session key that breaks the key grammar
├── GatewayProtocolError       a frame the platform's socket protocol does not allow
│   └── FatalCloseError        the platform closed the socket for good (bad token, bad intents)
├── SignatureError             an inbound HTTP request with a bad signature, timestamp or body
└── PlatformError              the platform's HTTP API failed
    ├── PlatformUnavailableError   transport failures or 5xx answers after the bounded retries
    └── PlatformRequestError       a refusal that retrying cannot fix (4xx other than 429, Slack
                                   `ok: false`); carries the HTTP status and the platform's code

Errors of httpx, websockets and cryptography are translated where they are caught
(`raise PlatformUnavailableError(...) from exc`); they never leave this package.
"""

from __future__ import annotations


class BindingError(Exception):
    """Root of the bindings' errors."""


class BindingConfigError(BindingError):
    pass


class StateTransitionError(BindingError):
    pass


class RoutingError(BindingError):
    pass


class GatewayProtocolError(BindingError):
    pass


class FatalCloseError(GatewayProtocolError):
    """The platform closed the connection with a code that forbids reconnecting."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"closed for good with code {code}: {reason}")
        self.code = code
        self.reason = reason


class SignatureError(BindingError):
    pass


class PlatformError(BindingError):
    pass


class PlatformUnavailableError(PlatformError):
    pass


class PlatformRequestError(PlatformError):
    """A refusal by the platform: `status` is the HTTP status, `code` the platform's error code."""

    def __init__(self, message: str, *, status: int, code: str | int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
