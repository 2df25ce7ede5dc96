"""Which gateway `gatewayctl` talks to, and with which secret.

Precedence (first found wins):

- URL: `--url`, then `GATEWAY_URL`, then the local gateway as `gatewayd` would listen:
  `[gateway] host/port` of the config file (`GATEWAY_CONFIG`) overridden by `GATEWAY_HOST` /
  `GATEWAY_PORT` (defaults 127.0.0.1 and 18789), read with the daemon's own `load_config`.
- Secret for an explicit URL (`--url` or `GATEWAY_URL`): `--token` / `--password`, then
  `GATEWAY_TOKEN` / `GATEWAY_PASSWORD`. The local token file is never sent to another gateway.
- Secret for the local gateway: `--token` / `--password`, then `GATEWAY_TOKEN` /
  `GATEWAY_PASSWORD` or `[gateway] token/password` of the config file, then the token `gatewayd`
  generated into its state directory (`<GATEWAY_HOME>/token`, GATEWAY_HOME defaulting to
  `~/.gateway`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gateway.cli.ctl_errors import CtlError, ExitCode

if TYPE_CHECKING:
    from gateway.config import GatewayConfig


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    token: str | None
    password: str | None
    url_source: str
    """Where the URL came from, for messages: `--url`, `GATEWAY_URL`, `local gateway`."""
    secret_source: str | None
    """Where the secret came from (`--token`, `GATEWAY_TOKEN`, a file path, ...), None without one."""
    token_file: Path | None = None
    """The local token file looked at (whether or not it existed)."""

    def credential_hint(self) -> str:
        """What to do when the gateway refuses the secret."""
        if self.secret_source is None:
            looked = f" (none in {self.token_file})" if self.token_file is not None else ""
            return f"pass --token or set GATEWAY_TOKEN{looked}"
        local = f"; the local gatewayd keeps its token in {self.token_file}" if self.token_file else ""
        return f"the secret came from {self.secret_source}: pass the right one with --token{local}"


def resolve_target(
    *, url: str | None, token: str | None, password: str | None, env: Mapping[str, str]
) -> Target:
    """Find the gateway and the secret (see the module docstring).

    Raises CtlError: exit 2 for a malformed URL or an invalid config file, exit 4 for a token
    file that exists but cannot be read.
    """
    explicit = url or env.get("GATEWAY_URL") or None
    if explicit is None:
        return _local_target(token, password, env)
    source = "--url" if url else "GATEWAY_URL"
    secret_source = _given_secret(token, password)
    if secret_source is None:
        token = env.get("GATEWAY_TOKEN") or None
        password = None if token else env.get("GATEWAY_PASSWORD") or None
        secret_source = "GATEWAY_TOKEN" if token else ("GATEWAY_PASSWORD" if password else None)
    return Target(normalize_url(explicit, source), token, password, source, secret_source)


def _given_secret(token: str | None, password: str | None) -> str | None:
    if token is not None:
        return "--token"
    return "--password" if password is not None else None


def _local_target(token: str | None, password: str | None, env: Mapping[str, str]) -> Target:
    from gateway.auth import TOKEN_FILE_NAME
    from gateway.config import load_config
    from gateway.errors import ConfigError

    try:
        config = load_config(None, env)
    except ConfigError as exc:
        raise CtlError(
            str(exc), exit_code=ExitCode.USAGE, hint="fix the config file, or pass --url and --token"
        ) from None
    port = config.gateway.port
    if port == 0:
        raise CtlError(
            "the configuration sets port 0 (gatewayd picks a free port at start)",
            exit_code=ExitCode.USAGE,
            hint="pass the address it printed: --url ws://HOST:PORT/",
        )
    url = f"ws://{_connect_host(config.gateway.host)}:{port}/"
    token_file = config.home / TOKEN_FILE_NAME
    secret_source = _given_secret(token, password)
    if secret_source is None:
        token, password, secret_source = _configured_secret(config, env, token_file)
    return Target(url, token, password, "local gateway", secret_source, token_file)


def _configured_secret(
    config: GatewayConfig, env: Mapping[str, str], token_file: Path
) -> tuple[str | None, str | None, str | None]:
    """(token, password, where it came from) as the local gatewayd would use them."""
    in_file = f"the config file {config.source_path}"
    if config.gateway.token is not None:
        source = "GATEWAY_TOKEN" if env.get("GATEWAY_TOKEN") else in_file
        return config.gateway.token.get_secret_value(), None, source
    if config.gateway.password is not None:
        source = "GATEWAY_PASSWORD" if env.get("GATEWAY_PASSWORD") else in_file
        return None, config.gateway.password.get_secret_value(), source
    token = read_token_file(token_file)
    return token, None, (str(token_file) if token is not None else None)


def read_token_file(path: Path) -> str | None:
    """The token in `path`, None when the file does not exist or is empty.

    Raises CtlError (exit 4) when it exists but cannot be read (typically: another user's file).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CtlError(
            f"cannot read the token file {path}: {reason}",
            exit_code=ExitCode.AUTH,
            hint="run gatewayctl as the user that runs gatewayd, or pass --token",
        ) from None
    return text.strip() or None


def _connect_host(host: str) -> str:
    """Where to connect for a daemon listening on `host` (a wildcard address means loopback)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    return f"[{address}]" if address.version == 6 else host


def normalize_url(raw: str, source: str) -> str:
    """`ws://` / `wss://` URL from what a user typed: `host:port`, `http(s)://...` or a ws URL.

    Raises CtlError (exit 2) for anything else.
    """
    text = raw.strip()
    if "://" not in text:
        text = f"ws://{text}"
    scheme, _, rest = text.partition("://")
    scheme = {"http": "ws", "https": "wss"}.get(scheme.lower(), scheme.lower())
    text = f"{scheme}://{rest}"
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise CtlError(
            f"{source} is not a gateway URL: {raw!r}",
            exit_code=ExitCode.USAGE,
            hint="write it like ws://127.0.0.1:18789/",
        )
    return text if parts.path else text + "/"
