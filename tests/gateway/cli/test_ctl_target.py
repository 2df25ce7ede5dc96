"""Which gateway `gatewayctl` talks to and which secret it sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli.ctl_errors import CtlError, ExitCode
from gateway.cli.ctl_target import normalize_url, resolve_target


def test_the_local_gateway_and_its_token_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("secret-1\n")
    target = resolve_target(url=None, token=None, password=None, env={"GATEWAY_HOME": str(tmp_path)})
    assert target.url == "ws://127.0.0.1:18789/"
    assert target.token == "secret-1"
    assert target.secret_source == str(tmp_path / "token")


def test_config_file_and_environment_override_the_defaults(tmp_path: Path) -> None:
    config = tmp_path / "gw.toml"
    config.write_text('[gateway]\nhost = "0.0.0.0"\nport = 1234\ntoken = "from-file"\n')
    env = {"GATEWAY_HOME": str(tmp_path), "GATEWAY_CONFIG": str(config)}
    target = resolve_target(url=None, token=None, password=None, env=env)
    assert (target.url, target.token) == ("ws://127.0.0.1:1234/", "from-file")
    env.update(GATEWAY_PORT="4321", GATEWAY_TOKEN="from-env", GATEWAY_HOST="::1")
    target = resolve_target(url=None, token=None, password=None, env=env)
    assert (target.url, target.token, target.secret_source) == (
        "ws://[::1]:4321/",
        "from-env",
        "GATEWAY_TOKEN",
    )


def test_an_explicit_url_never_gets_the_local_token(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("local-secret")
    env = {"GATEWAY_HOME": str(tmp_path)}
    target = resolve_target(url="gw.example:9", token=None, password=None, env=env)
    assert (target.url, target.token, target.secret_source) == ("ws://gw.example:9/", None, None)
    target = resolve_target(url=None, token="t", password=None, env={**env, "GATEWAY_URL": "wss://h/x"})
    assert (target.url, target.token, target.url_source) == ("wss://h/x", "t", "GATEWAY_URL")


@pytest.mark.parametrize("raw", ["ftp://host", "ws://", "ws://host:notaport"])
def test_urls_that_are_not_gateway_urls_are_usage_errors(raw: str) -> None:
    with pytest.raises(CtlError) as caught:
        normalize_url(raw, "--url")
    assert caught.value.exit_code == ExitCode.USAGE


def test_an_invalid_config_file_is_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "gw.toml"
    config.write_text("[gateway]\nport = 'many'\n")
    with pytest.raises(CtlError) as caught:
        resolve_target(url=None, token=None, password=None, env={"GATEWAY_CONFIG": str(config)})
    assert caught.value.exit_code == ExitCode.USAGE
    assert "gateway.port" in caught.value.message
