"""Errors of the daemon package.

GatewayError
├── ConfigError          a configuration file or environment variable is invalid; the message is
│                        one line naming the source and the key path, fit to print as-is
├── AuthError            an authentication setup problem found before serving
│   ├── InsecureBindError    binding a non-loopback address without a token or password
│   └── TokenFileError       the state directory's token file cannot be read or written
└── TransportClosed      a client connection went away while the gateway wrote to it (expected:
                         clients disconnect at any time; the writer stops, nothing else fails)

Wire-level failures (bad frames, bad credentials sent by a client) are not exceptions: the
sans-I/O protocol layer returns them as values (`ProtocolViolation`, `ConnectRejected`), because a
misbehaving client is an expected input, not a bug. Subpackages of `gateway` derive their own
errors from `GatewayError`.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec


class GatewayError(Exception):
    """Root of the daemon's errors."""


class ConfigProblem(msgspec.Struct, frozen=True):
    """One invalid setting: where it came from, its dotted key path, what is wrong."""

    source: str
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"config error in {self.source}: {where}{self.message}"


class ConfigError(GatewayError):
    """The configuration could not be loaded.

    `str(error)` is a single line such as
    ``config error in /etc/gateway.toml: runs.max_concurrent: Input should be greater than 0``;
    `problems` lists every problem found (the message joins them with ``; ``).
    """

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        if not problems:
            raise ValueError("ConfigError needs at least one problem")
        self.problems: tuple[ConfigProblem, ...] = tuple(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


class AuthError(GatewayError):
    """Authentication cannot be set up safely."""


class InsecureBindError(AuthError):
    """Refused to listen on a non-loopback address without a shared secret."""


class TokenFileError(AuthError):
    """The token file in the state directory is unusable."""


class TransportClosed(GatewayError):
    """The peer of a WebSocket connection is gone; nothing more can be written to it."""
