"""Exit codes of `gatewayctl` and its one error type.

CtlError            one line for the user (`message`, then `hint`: what to do next), an exit code
                    and, when the gateway answered, its error `code`

Every failure a command can meet ends as a `CtlError` at the boundary where it happens: the
client's `ConnectError` / `CallError` are translated by `connect_error` and `call_error`, config
and token-file problems by the target discovery. `gatewayctl.main` prints it and exits with its
code; nothing else reaches the user as a traceback.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from gateway.client import CallError, ConnectError, GatewayUnreachable


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    """The gateway answered with an error, or the run ended in error or was aborted."""
    USAGE = 2
    """Bad command line, invalid --params JSON, unreadable or invalid config file."""
    UNREACHABLE = 3
    """Nothing answered at the URL, the handshake failed, or the connection dropped mid-call."""
    AUTH = 4
    """The gateway refused the credentials, or the granted scopes do not allow the method."""
    INTERRUPTED = 130
    """Ctrl-C (except for `sessions tail`, where Ctrl-C is the normal way out: 0)."""


class CtlError(Exception):
    """A failure to report to the user in one line: `message` — `hint`."""

    def __init__(
        self,
        message: str,
        *,
        exit_code: ExitCode = ExitCode.FAILED,
        hint: str | None = None,
        code: str | None = None,
        details: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.hint = hint
        self.code = code
        self.details = details

    def line(self) -> str:
        return f"{self.message} — {self.hint}" if self.hint else self.message

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"message": self.message, "exitCode": int(self.exit_code)}
        if self.code:
            error["code"] = self.code
        if self.hint:
            error["hint"] = self.hint
        if self.details is not None:
            error["details"] = self.details
        return {"ok": False, "error": error}


# `error.details.code` of handshake refusals (gateway.protocol.codes.DetailCode, spelled out here:
# importing that package pulls in pydantic, a tenth of a second at every start of the CLI).
_AUTH_WORDS = {
    "AUTH_TOKEN_MISSING": "needs a token and none was given",
    "AUTH_TOKEN_MISMATCH": "refused the token",
    "AUTH_PASSWORD_MISSING": "needs a password and none was given",
    "AUTH_PASSWORD_MISMATCH": "refused the password",
    "AUTH_RATE_LIMITED": "refuses this address after too many failed attempts",
    "PAIRING_REQUIRED": "requires this device to be paired first",
}

START_HINT = "is gatewayd running? (start it with `make run` or `gatewayd`)"


def connect_error(exc: ConnectError, *, url: str, credential_hint: str) -> CtlError:
    """The user-facing form of a failed connect to `url`. `credential_hint` says where the secret
    came from and how to pass another one (used for auth refusals)."""
    if isinstance(exc, GatewayUnreachable):
        return CtlError(f"cannot reach the gateway at {url}", exit_code=ExitCode.UNREACHABLE, hint=START_HINT)
    detail = exc.details.get("code") if isinstance(exc.details, dict) else None
    if isinstance(detail, str) and detail in _AUTH_WORDS:
        hint = credential_hint
        if detail == "AUTH_RATE_LIMITED":
            hint = "wait a few minutes, then retry with the right token"
        return CtlError(
            f"the gateway at {url} {_AUTH_WORDS[detail]}", exit_code=ExitCode.AUTH, hint=hint, code=detail
        )
    if detail == "PROTOCOL_MISMATCH":
        return CtlError(
            f"the gateway at {url} speaks another protocol version: {exc}",
            hint="use the gatewayctl that comes with that gateway",
            code=str(detail),
        )
    if exc.code == "UNAVAILABLE":
        return CtlError(
            f"the gateway at {url} is still starting",
            exit_code=ExitCode.UNREACHABLE,
            hint="try again in a moment",
            code=exc.code,
        )
    return CtlError(
        f"could not connect to the gateway at {url}: {exc}",
        exit_code=ExitCode.UNREACHABLE,
        hint="check that the URL points at a gateway",
        code=exc.code,
    )


def call_error(exc: CallError, method: str) -> CtlError:
    """The user-facing form of a request answered `ok:false`."""
    if exc.code == "FORBIDDEN":
        missing = exc.details.get("missingScope") if isinstance(exc.details, dict) else None
        return CtlError(
            f"the gateway refused {method}: {exc}",
            exit_code=ExitCode.AUTH,
            hint=f"use a token that grants {missing or 'that scope'}",
            code=exc.code,
            details=exc.details,
        )
    hint = None
    if exc.code == "NOT_FOUND" and method.startswith(("sessions.", "chat.")):
        hint = "see the sessions there are with `gatewayctl sessions list`"
    elif exc.code == "UNAVAILABLE" and exc.retryable:
        after = exc.retry_after_ms
        hint = f"try again in {max(1, round(after / 1000))} s" if isinstance(after, int) else "try again"
    elif exc.code == "INVALID_REQUEST" and str(exc).startswith("unknown method"):
        hint = "the gateway names its methods in its handshake (`features.methods` of hello-ok)"
    return CtlError(f"{method} failed: {exc}", hint=hint, code=exc.code, details=exc.details)


def dropped(url: str, while_doing: str) -> CtlError:
    return CtlError(
        f"lost the connection to the gateway at {url} while {while_doing}",
        exit_code=ExitCode.UNREACHABLE,
        hint="check that gatewayd is still running, then retry",
    )
