"""The `[bindings]` settings: defaults, validation, secrets from the environment."""

from __future__ import annotations

import tomllib

import pytest
from pydantic import ValidationError

from bindings.access import ChannelAccess
from bindings.config import BindingsConfig, DiscordAccountConfig, SlackAccountConfig
from bindings.errors import BindingConfigError

TOML = """
[discord.default]
dm_policy = "allowlist"
allow_from = ["123"]
group_policy = "open"
channels."222" = { require_mention = false, queue_mode = "collect", users = ["9"] }
routes = [{ agent_id = "support", match = { channel = "discord", guild_id = "999" } }]

[slack.work]
mode = "events"
replyInThread = true
chunkLimit = 8000
"""


def test_parses_a_bindings_table() -> None:
    config = BindingsConfig.model_validate(tomllib.loads(TOML))
    discord = config.discord["default"]
    assert discord.api_base_url == "https://discord.com/api/v10"
    assert discord.intents == 37377 and discord.chunk_limit == 2000 and discord.mode == "gateway"
    assert discord.token_env == "DISCORD_BOT_TOKEN" and discord.public_key_env == "DISCORD_PUBLIC_KEY"
    assert discord.routes[0].agent_id == "support" and discord.routes[0].match.guild_id == "999"
    assert discord.queue_mode_for("222") == "collect" and discord.queue_mode_for("333") is None
    assert discord.queue_mode_for("thread", "222") == "collect"
    policy = discord.access_policy()
    assert policy.allow_from == frozenset({"123"})
    assert policy.channels["222"] == ChannelAccess(require_mention=False, users=frozenset({"9"}))
    slack = config.slack["work"]
    assert slack.api_base_url == "https://slack.com/api/"
    assert (slack.mode, slack.reply_in_thread, slack.chunk_limit) == ("events", True, 8000)
    assert slack.reply_in_thread_for("C1")
    assert (slack.bot_token_env, slack.app_token_env, slack.signing_secret_env) == (
        "SLACK_BOT_TOKEN",
        "SLACK_APP_TOKEN",
        "SLACK_SIGNING_SECRET",
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"discord": {"default": {"dm_policy": "open"}}}, 'requires "\\*" in allow_from'),
        ({"discord": {"default": {"dm_policy": "allowlist"}}}, "at least one entry"),
        ({"discord": {"Bad Name": {}}}, "invalid account id"),
        ({"discord": {"default": {"chunk_limit": 2001}}}, "less than or equal to 2000"),
        ({"slack": {"default": {"mode": "webhook"}}}, "socket"),
        ({"slack": {"default": {"tokn_env": "X"}}}, "Extra inputs"),
        ({"slack": {"default": {"default_agent_id": "Not OK"}}}, "invalid agent id"),
    ],
)
def test_invalid_settings_name_the_problem(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        BindingsConfig.model_validate(data)


def test_secrets_come_from_the_named_variables() -> None:
    discord = DiscordAccountConfig(token_env="MY_BOT")
    assert discord.bot_token({"MY_BOT": " abc \n"}) == "abc"
    with pytest.raises(BindingConfigError, match=r"MY_BOT.*token_env"):
        discord.bot_token({})
    slack = SlackAccountConfig()
    env = {"SLACK_BOT_TOKEN": "xoxb", "SLACK_APP_TOKEN": "xapp", "SLACK_SIGNING_SECRET": "s"}
    assert (slack.bot_token(env), slack.app_token(env), slack.signing_secret(env)) == ("xoxb", "xapp", "s")
    with pytest.raises(BindingConfigError, match="SLACK_SIGNING_SECRET"):
        slack.signing_secret({})
