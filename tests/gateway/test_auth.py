from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gateway.auth import (
    AuthConfig,
    FailureDelays,
    allowed_host_names,
    check_origin,
    is_loopback_host,
    is_wildcard_host,
    load_or_create_token,
    require_auth_for_bind,
    secrets_equal,
)
from gateway.errors import AuthError, InsecureBindError, TokenFileError


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- AuthConfig -------------------------------------------------------------------------------


def test_auth_config_never_shows_its_secrets() -> None:
    auth = AuthConfig(token="s3cret-token", password="s3cret-pw")
    assert "s3cret" not in repr(auth)
    assert auth.enabled and auth.mode == "token"
    assert AuthConfig(password="pw").mode == "password"
    assert AuthConfig().mode == "none" and not AuthConfig().enabled
    with pytest.raises(ValueError):
        AuthConfig(token="")


def test_secrets_equal() -> None:
    assert secrets_equal("abc", "abc")
    assert not secrets_equal("abc", "abd")
    assert not secrets_equal("abc", "abcd")
    assert not secrets_equal("\ud800", "x")


# --- token file -------------------------------------------------------------------------------


def test_token_is_created_once_with_mode_0600(tmp_path: Path) -> None:
    home = tmp_path / "state"
    token, created = load_or_create_token(home)
    assert created
    assert len(token) >= 32
    assert mode(home / "token") == 0o600
    assert mode(home) == 0o700
    assert (home / "token").read_text().strip() == token
    again, created_again = load_or_create_token(home)
    assert (again, created_again) == (token, False)
    assert [p.name for p in home.iterdir()] == ["token"]  # no temporary file left behind


def test_a_token_file_others_can_read_is_locked_down(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("my-own-token\n")
    path.chmod(0o644)
    assert load_or_create_token(tmp_path) == ("my-own-token", False)
    assert mode(path) == 0o600


def test_an_empty_token_file_is_refilled(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("  \n")
    (tmp_path / "token").chmod(0o600)
    token, created = load_or_create_token(tmp_path)
    assert created and token
    assert (tmp_path / "token").read_text().strip() == token
    assert mode(tmp_path / "token") == 0o600


def test_unusable_token_files_are_errors(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("x")
    (tmp_path / "token").symlink_to(target)
    with pytest.raises(TokenFileError, match="token"):
        load_or_create_token(tmp_path)

    other = tmp_path / "dir-home"
    (other / "token").mkdir(parents=True)
    with pytest.raises(TokenFileError):
        load_or_create_token(other)

    big = tmp_path / "big-home"
    big.mkdir()
    (big / "token").write_text("x" * 5000)
    with pytest.raises(TokenFileError, match="larger"):
        load_or_create_token(big)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_home_is_a_token_file_error(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(TokenFileError):
            load_or_create_token(locked)
    finally:
        locked.chmod(0o700)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the file away")
def test_a_token_file_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("planted-token")
    os.chown(path, 12345, 12345)
    with pytest.raises(TokenFileError, match="another user"):
        load_or_create_token(tmp_path)


def test_token_file_error_is_an_auth_error() -> None:
    assert issubclass(TokenFileError, AuthError)


# --- origin -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("origin", "host", "allowed", "ok"),
    [
        (None, "127.0.0.1:18789", [], True),  # CLI, libraries: no Origin header
        ("http://127.0.0.1:18789", "127.0.0.1:18789", [], True),
        ("http://LOCALHOST:18789", "localhost:18789", [], True),
        ("http://127.0.0.1:18789", "localhost:18789", [], False),
        ("http://127.0.0.1:9999", "127.0.0.1:18789", [], False),
        ("https://gw.example.com", "gw.example.com", [], True),  # default port
        ("http://gw.example.com", "gw.example.com:80", [], True),
        ("https://gw.example.com", "gw.example.com:80", [], False),
        ("http://[::1]:18789", "[::1]:18789", [], True),
        ("null", "127.0.0.1:18789", ["null"], False),
        ("https://evil.example", "127.0.0.1:18789", [], False),
        ("https://dash.example.com", "127.0.0.1:18789", ["https://dash.example.com"], True),
        ("https://dash.example.com", "127.0.0.1:18789", ["https://dash.example.com:443/"], True),
        ("https://dash.example.com:8443", "127.0.0.1:18789", ["https://dash.example.com"], False),
        ("http://dash.example.com", "127.0.0.1:18789", ["https://dash.example.com"], False),
        ("file://", "127.0.0.1:18789", [], False),
        ("chrome-extension://abc", "127.0.0.1:18789", [], False),
        ("http://h:notaport", "h:notaport", [], False),
        ("", "127.0.0.1:18789", [], False),
    ],
)
def test_check_origin(origin: str | None, host: str, allowed: list[str], ok: bool) -> None:
    assert check_origin(origin, host, allowed) is ok


# --- bind -------------------------------------------------------------------------------------


def test_loopback_detection() -> None:
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback_host(host), host
    for host in ("0.0.0.0", "::", "192.168.1.5", "example.com", ""):
        assert not is_loopback_host(host), host


def test_non_loopback_bind_needs_a_secret() -> None:
    require_auth_for_bind("127.0.0.1", AuthConfig())
    require_auth_for_bind("0.0.0.0", AuthConfig(token="t"))
    require_auth_for_bind("0.0.0.0", AuthConfig(password="p"))
    with pytest.raises(InsecureBindError, match=r"0\.0\.0\.0.*GATEWAY_TOKEN"):
        require_auth_for_bind("0.0.0.0", AuthConfig())


# --- host names -------------------------------------------------------------------------------


def test_allowed_host_names_are_loopback_the_bind_address_and_the_configured_ones() -> None:
    assert allowed_host_names("127.0.0.1", []) == ["localhost", "127.0.0.1", "[::1]"]
    assert allowed_host_names("::1", []) == ["localhost", "127.0.0.1", "[::1]"]
    assert allowed_host_names("192.168.1.5", ["Gateway.Example.com", " *.example.org "]) == [
        "localhost",
        "127.0.0.1",
        "[::1]",
        "192.168.1.5",
        "gateway.example.com",
        "*.example.org",
    ]
    assert "[fd00::5]" in allowed_host_names("fd00::5", [])


def test_wildcard_addresses() -> None:
    assert is_wildcard_host("0.0.0.0") and is_wildcard_host("::") and is_wildcard_host("[::]")
    assert not is_wildcard_host("127.0.0.1") and not is_wildcard_host("example.com")


def test_auth_config_accepts_its_token_and_password_only() -> None:
    auth = AuthConfig(token="tok", password="pw")
    assert auth.accepts("tok") and auth.accepts("pw")
    assert not auth.accepts("tok ") and not auth.accepts("")
    assert not AuthConfig().accepts("anything")


# --- failure delays ---------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_each_failure_from_an_address_doubles_its_delay_up_to_the_bound() -> None:
    delays = FailureDelays(first_s=0.25, max_s=2.0, window_s=60, clock=Clock())
    assert [delays.failed("1.2.3.4") for _ in range(6)] == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    assert delays.failures("1.2.3.4") == 6
    assert delays.failed("5.6.7.8") == 0.25  # other addresses are unaffected


def test_failures_older_than_the_window_stop_counting() -> None:
    clock = Clock()
    delays = FailureDelays(first_s=1, max_s=100, window_s=60, clock=clock)
    delays.failed("a")
    delays.failed("a")
    clock.now += 61
    assert delays.failures("a") == 0
    assert delays.failed("a") == 1
    clock.now += 61
    delays.failed("b")
    assert len(delays) == 1  # "a" has been quiet for a window: forgotten


def test_tracked_addresses_are_bounded() -> None:
    delays = FailureDelays(first_s=1, max_s=100, max_addresses=3, clock=Clock())
    for address in ("a", "b", "c", "d"):
        delays.failed(address)
    assert len(delays) == 3 and delays.failures("a") == 0
    delays.failed("b")  # refreshed: "c" is now the oldest
    delays.failed("e")
    assert len(delays) == 3 and delays.failures("c") == 0 and delays.failures("b") == 2


def test_delay_arguments_are_checked() -> None:
    with pytest.raises(ValueError):
        FailureDelays(first_s=-1)
    with pytest.raises(ValueError):
        FailureDelays(window_s=0)
