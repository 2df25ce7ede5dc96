"""Authentication building blocks: the shared secret, its token file, Origin checks, bind safety and
a per-address limiter of failed attempts.

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


@dataclass(slots=True)
class _Record:
    failures: list[float]
    locked_until: float = 0.0


class FailureLimiter:
    """Refuses an address for `lockout_s` seconds after `max_failures` failed authentications
    within `window_s` seconds.

    State lives per address until it has been quiet for a window and any lockout has passed.
    At most `max_addresses` addresses are tracked; past that the least recently seen one is
    forgotten (an attacker rotating addresses can only evict, never lock out others).
    `clock` is the monotonic time source (seconds); tests pass a fake.
    """

    def __init__(
        self,
        max_failures: int = 10,
        window_s: float = 60.0,
        lockout_s: float = 300.0,
        *,
        max_addresses: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_failures < 1 or window_s <= 0 or lockout_s < 0 or max_addresses < 1:
            raise ValueError("FailureLimiter needs positive limits")
        self.max_failures = max_failures
        self.window_s = window_s
        self.lockout_s = lockout_s
        self.max_addresses = max_addresses
        self._clock = clock
        self._records: OrderedDict[str, _Record] = OrderedDict()

    def __len__(self) -> int:
        """How many addresses are tracked (observable size of the bounded state)."""
        return len(self._records)

    def blocked(self, address: str) -> float | None:
        """Seconds until `address` may try again, or None if it may try now."""
        record = self._records.get(address)
        if record is None:
            return None
        now = self._clock()
        if record.locked_until > now:
            return record.locked_until - now
        self._prune(address, record, now)
        return None

    def failed(self, address: str) -> float | None:
        """Count a failed attempt; returns the lockout (seconds) when this one triggered it."""
        now = self._clock()
        record = self._records.get(address)
        if record is None:
            record = _Record(failures=[])
            self._records[address] = record
            while len(self._records) > self.max_addresses:
                self._records.popitem(last=False)
        else:
            self._records.move_to_end(address)
        record.failures = [t for t in record.failures if now - t < self.window_s]
        record.failures.append(now)
        if len(record.failures) >= self.max_failures and self.lockout_s > 0:
            record.failures.clear()
            record.locked_until = now + self.lockout_s
            return self.lockout_s
        return None

    def succeeded(self, address: str) -> None:
        """Forget the address's failures after a successful authentication."""
        self._records.pop(address, None)

    def _prune(self, address: str, record: _Record, now: float) -> None:
        record.failures = [t for t in record.failures if now - t < self.window_s]
        if not record.failures:
            self._records.pop(address, None)
