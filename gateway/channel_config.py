"""Checking `[bindings.discord.<account>]` / `[bindings.slack.<account>]` before anything runs.

`gatewayd` calls `validate_bindings` right after loading the config, so a bad table or a missing
secret stops it with one line naming the file and the key (exit 2), like any other config error;
`Channels` validates again when it builds the bindings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from bindings import BindingConfigError, BindingsConfig, DiscordAccountConfig, SlackAccountConfig
from bindings.discord import load_public_key
from gateway.config import DEFAULTS_SOURCE, GatewayConfig
from gateway.errors import ConfigError, ConfigProblem

AccountEntry = tuple[str, str, DiscordAccountConfig | SlackAccountConfig]
"""`(platform, account id, settings)`."""


def bindings_config(config: GatewayConfig) -> BindingsConfig:
    """`config.bindings` validated. Raises `ConfigError` naming each bad key and the file."""
    try:
        return BindingsConfig.model_validate(config.bindings)
    except ValidationError as exc:
        source = source_name(config)
        problems = [
            ConfigProblem(source, _dotted(("bindings", *error["loc"])), _message(error))
            for error in exc.errors(include_url=False)
        ]
        raise ConfigError(problems) from None


def validate_bindings(config: GatewayConfig, env: Mapping[str, str] | None = None) -> BindingsConfig:
    """`bindings_config`, plus a check that every enabled account's secrets are set in `env`
    (default: the process environment), so that `gatewayd` refuses a bad table before it
    starts. Raises `ConfigError`."""
    settings = bindings_config(config)
    problems = []
    for platform, account_id, cfg in enabled_accounts(settings):
        try:
            for secret in _secrets(cfg):
                secret(env)
        except BindingConfigError as exc:
            problems.append(ConfigProblem(source_name(config), f"bindings.{platform}.{account_id}", str(exc)))
    if problems:
        raise ConfigError(problems)
    return settings


def enabled_accounts(settings: BindingsConfig) -> list[AccountEntry]:
    """The enabled accounts, Discord first."""
    accounts: list[AccountEntry] = [
        *(("discord", account, cfg) for account, cfg in settings.discord.items()),
        *(("slack", account, cfg) for account, cfg in settings.slack.items()),
    ]
    return [entry for entry in accounts if entry[2].enabled]


def _secrets(
    cfg: DiscordAccountConfig | SlackAccountConfig,
) -> list[Callable[[Mapping[str, str] | None], object]]:
    """The secret readers an account's mode needs (each raises `BindingConfigError`)."""
    if isinstance(cfg, DiscordAccountConfig):
        if cfg.mode == "interactions":
            discord = cfg

            def public_key(env: Mapping[str, str] | None) -> object:
                return load_public_key(discord.public_key(env))

            return [cfg.bot_token, public_key]
        return [cfg.bot_token]
    return [cfg.bot_token, cfg.app_token if cfg.mode == "socket" else cfg.signing_secret]


def source_name(config: GatewayConfig) -> str:
    return str(config.source_path) if config.source_path is not None else DEFAULTS_SOURCE


def _dotted(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key"
    return str(error["msg"]).removeprefix("Value error, ")


__all__ = ["AccountEntry", "bindings_config", "enabled_accounts", "source_name", "validate_bindings"]
