"""Authentication building blocks: the shared secret, its token file, Origin and Host checks, bind
safety and the per-address slowdown of failed attempts.

All of it is synchronous and free of sockets; the server calls these at the right moments.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import stat
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from gateway.errors import InsecureBindError, TokenFileError

TOKEN_FILE_NAME = "token"
_TOKEN_MAX_BYTES = 4096


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """The shared secrets a client may present in `connect.auth`. Both None means no auth, which
    is only allowed on a loopback address (see `require_auth_for_bind`)."""

    token: str | None = None
    password: str | None = None

    def __post_init__(self) -> None:
        if self.token == "" or self.password == "":
            raise ValueError("an empty token or password is not a secret; use None")

    @property
    def enabled(self) -> bool:
        return self.token is not None or self.password is not None

    def accepts(self, presented: str) -> bool:
        """Whether `presented` is the token or the password (each compared in constant time)."""
        matched = False
        for secret in (self.token, self.password):
            if secret is not None:
                matched |= secrets_equal(presented, secret)
        return matched

    @property
    def mode(self) -> str:
        """`token`, `password` or `none`, as hello-ok's `authMode` names it."""
        if self.token is not None:
            return "token"
        if self.password is not None:
            return "password"
        return "none"

    def __repr__(self) -> str:
        # Never let a secret reach a log through repr().
        token = "***" if self.token is not None else None
        password = "***" if self.password is not None else None
        return f"AuthConfig(token={token!r}, password={password!r})"


def secrets_equal(presented: str, expected: str) -> bool:
    """Constant-time comparison of two secrets (time does not depend on where they differ)."""
    return hmac.compare_digest(presented.encode("utf-8", "surrogatepass"), expected.encode("utf-8"))


# --- token file -------------------------------------------------------------------------------


def load_or_create_token(home: Path) -> tuple[str, bool]:
    """Return the gateway token kept in `home/token`, creating it (and `home`, mode 0700) when it
    does not exist. Returns `(token, created)`.

    The file is written with mode 0600. An existing file that group or others may read or write
    has its mode reset to 0600 before it is used. An existing empty file is refilled.
    Raises TokenFileError when the file cannot be read or written, is not a regular file, or is
    owned by another user.
    """
    path = home / TOKEN_FILE_NAME
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        token = _read_token(path)
        if token:
            return token, False
        token = secrets.token_urlsafe(32)
        _write_token(path, token)
    except OSError as exc:
        raise TokenFileError(f"cannot use token file {path}: {exc.strerror or exc}") from exc
    return token, True


def _read_token(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise TokenFileError(f"token file {path} is not a regular file")
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            raise TokenFileError(f"token file {path} is owned by another user (uid {info.st_uid})")
        if info.st_mode & 0o077:
            os.fchmod(handle.fileno(), 0o600)
        raw = handle.read(_TOKEN_MAX_BYTES + 1)
    if len(raw) > _TOKEN_MAX_BYTES:
        raise TokenFileError(f"token file {path} is larger than {_TOKEN_MAX_BYTES} bytes")
    try:
        return raw.decode("utf-8").strip() or None
    except UnicodeDecodeError as exc:
        raise TokenFileError(f"token file {path} is not UTF-8 text") from exc


def _write_token(path: Path, token: str) -> None:
    # Write a sibling file and rename it into place, so a crash never leaves a half-written
    # token and the secret is never readable by others, not even for a moment.
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(token + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# --- origin and bind --------------------------------------------------------------------------

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def _host_port(netloc: str, scheme: str | None) -> tuple[str, int | None] | None:
    try:
        parts = urlsplit(f"//{netloc}")
        host = parts.hostname
        port = parts.port
    except ValueError:
        return None
    if not host:
        return None
    if port is None and scheme is not None:
        port = _DEFAULT_PORTS.get(scheme)
    return host.lower().rstrip("."), port


def _origin_key(origin: str) -> tuple[str, str, int | None] | None:
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.netloc:
        return None
    hp = _host_port(parts.netloc, scheme)
    if hp is None:
        return None
    return scheme, hp[0], hp[1]


def check_origin(origin: str | None, host: str, allowed_origins: Iterable[str]) -> bool:
    """Whether a WebSocket upgrade with this `Origin` header may proceed.

    No Origin (non-browser clients: CLIs, libraries) is allowed. `null` (sandboxed frames, files)
    is refused. A browser Origin must name the gateway itself, the `Host` the request was sent to
    (same host and port; the scheme's default port when none is written), or match one of
    `allowed_origins` (scheme, host and port).
    """
    if origin is None:
        return True
    key = _origin_key(origin)
    if key is None:
        return False
    scheme, origin_host, origin_port = key
    if host:
        own = _host_port(host, scheme)
        if own is not None and own == (origin_host, origin_port):
            return True
    return any(_origin_key(allowed) == key for allowed in allowed_origins)


def is_loopback_host(host: str) -> bool:
    """True for `localhost` and loopback IP addresses (127.0.0.0/8, ::1)."""
    name = host.strip().strip("[]").lower()
    if name in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(name.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


LOOPBACK_HOST_NAMES = ("localhost", "127.0.0.1", "[::1]")


def allowed_host_names(bind_host: str, configured: Iterable[str]) -> list[str]:
    """The `Host` names a request may carry (patterns as Starlette's TrustedHostMiddleware takes
    them): the loopback names, the address the gateway listens on, and `configured`. Anything
    else (a DNS-rebinding page's own name above all) is refused."""
    bind = bind_host.strip().lower()
    if ":" in bind and not bind.startswith("["):
        bind = f"[{bind}]"
    names = [*LOOPBACK_HOST_NAMES, bind, *(name.strip().lower() for name in configured)]
    return list(dict.fromkeys(name for name in names if name))


def is_wildcard_host(host: str) -> bool:
    """True for the all-interfaces addresses (`0.0.0.0`, `::`)."""
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_unspecified
    except ValueError:
        return False


def require_auth_for_bind(host: str, auth: AuthConfig) -> None:
    """Raise InsecureBindError when `host` is not a loopback address and `auth` has no secret."""
    if auth.enabled or is_loopback_host(host):
        return
    raise InsecureBindError(
        f"refusing to listen on {host} without authentication: set GATEWAY_TOKEN or "
        "GATEWAY_PASSWORD (or gateway.token / gateway.password in the config file), "
        "or bind to 127.0.0.1"
    )


# --- failed attempts --------------------------------------------------------------------------


class FailureDelays:
    """Slows down wrong credentials, per address, without ever locking anyone out.

    The refusal of a failed authentication is answered after `first_s * 2**(n - 1)` seconds, at
    most `max_s`, where n counts the address's failures in the last `window_s` seconds (this one
    included). A correct credential is never delayed, and a success does not forget the
    failures: an attacker who shares the operator's address gains nothing when the operator
    connects. While its answer waits, a failed connection still holds its place in the door's
    per-address quota (`gateway.door`), which bounds how many guesses one address has in flight.

    State per address lives until its last failure is older than the window (forgotten at the
    next failure from anywhere); at most `max_addresses` addresses are tracked (the least
    recently failing forgotten first, so an attacker rotating addresses only shortens its own
    delays). `clock` is monotonic seconds.
    """

    def __init__(
        self,
        first_s: float = 0.25,
        max_s: float = 5.0,
        window_s: float = 300.0,
        *,
        max_addresses: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if first_s < 0 or max_s < 0 or window_s <= 0 or max_addresses < 1:
            raise ValueError("FailureDelays needs non-negative delays and a positive window")
        self.first_s = first_s
        self.max_s = max_s
        self.window_s = window_s
        self.max_addresses = max_addresses
        self._clock = clock
        self._failures: OrderedDict[str, list[float]] = OrderedDict()

    def __len__(self) -> int:
        """How many addresses are tracked (observable size of the bounded state)."""
        return len(self._failures)

    def failed(self, address: str) -> float:
        """Count a failed authentication from `address`; the seconds its answer must wait."""
        now = self._clock()
        times = [t for t in self._failures.pop(address, []) if now - t < self.window_s]
        times.append(now)
        # Oldest last failure first: forget addresses quiet for a window, and the excess.
        while self._failures:
            oldest = next(iter(self._failures.values()))
            if now - oldest[-1] < self.window_s and len(self._failures) < self.max_addresses:
                break
            self._failures.popitem(last=False)
        self._failures[address] = times
        return min(self.max_s, self.first_s * 2.0 ** min(len(times) - 1, 62))

    def failures(self, address: str) -> int:
        """Failures from `address` within the window."""
        now = self._clock()
        return sum(1 for t in self._failures.get(address, ()) if now - t < self.window_s)
