"""Settings of the chat bindings: `[bindings.discord.<account>]` and `[bindings.slack.<account>]`.

Secrets never sit in the file: each account names the environment variables that hold them
(`DISCORD_BOT_TOKEN`, `DISCORD_PUBLIC_KEY`, `SLACK_BOT_TOKEN`, `SLACK_APP_TOKEN`,
`SLACK_SIGNING_SECRET` by default) and they are read when the binding starts. Keys may be written
in snake_case or camelCase; unknown keys are errors.

```toml
[bindings.discord.default]
dm_policy = "pairing"
allow_from = ["123456789012345678"]
group_policy = "allowlist"
channels."222222222222222222" = { require_mention = false, queue_mode = "collect" }
routes = [{ agent_id = "support", match = { channel = "discord", guild_id = "999" } }]

[bindings.slack.default]
mode = "socket"
reply_in_thread = true
```
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from bindings.access import AccessPolicy, ChannelAccess, DmPolicy, GroupPolicy
from bindings.chunking import DISCORD_MESSAGE_LIMIT, MIN_LIMIT, SLACK_MESSAGE_LIMIT, SLACK_TEXT_HARD_LIMIT
from bindings.errors import BindingConfigError, RoutingError
from bindings.host import QueueModeName
from bindings.routing import DEFAULT_AGENT_ID, DmScope, RouteRule, normalize_agent_id

DISCORD_API_BASE_URL = "https://discord.com/api/v10"
SLACK_API_BASE_URL = "https://slack.com/api/"
DISCORD_DEFAULT_INTENTS = 1 | 512 | 4096 | 32768
"""GUILDS | GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT (the last one is privileged: enable
it for the bot in the developer portal, or message text arrives empty)."""

_ACCOUNT_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ChannelConfig(_Model):
    """Per-channel overrides (a thread without its own entry uses its parent channel's)."""

    enabled: bool = True
    require_mention: bool | None = None
    users: list[str] | None = None
    queue_mode: QueueModeName | None = None
    reply_in_thread: bool | None = None


class AccountConfig(_Model):
    RESTART_KEYS: ClassVar[frozenset[str]] = frozenset({"enabled", "edit_interval_s"})
    """Settings a running binding cannot take on (the connection, the secrets, the reply relay);
    every other one (access, routing, queueing, threads) applies live (`ChatBinding.reconfigure`)."""

    enabled: bool = True
    dm_policy: DmPolicy = "pairing"
    allow_from: list[str] = Field(default_factory=list)
    group_policy: GroupPolicy = "allowlist"
    require_mention: bool = True
    allow_bots: bool = False
    """Accept messages written by other bots (never by this bot itself)."""
    channels: dict[str, ChannelConfig] = Field(default_factory=dict)
    routes: list[RouteRule] = Field(default_factory=list)
    default_agent_id: str = DEFAULT_AGENT_ID
    dm_scope: DmScope = "main"
    queue_mode: QueueModeName | None = None
    reply_in_thread: bool = False
    edit_interval_s: float = Field(default=1.0, ge=0.0)
    """Least time between two edits of a streaming reply."""
    approvers: list[str] = Field(default_factory=list)
    """Platform user ids that may approve or deny tool calls from the chat's buttons; with none,
    requests of this account's sessions are not posted to the chat."""

    @field_validator("default_agent_id")
    @classmethod
    def _agent_id(cls, value: str) -> str:
        try:
            return normalize_agent_id(value)
        except RoutingError as exc:
            raise ValueError(str(exc)) from exc

    @model_validator(mode="after")
    def _open_needs_wildcard(self) -> AccountConfig:
        if self.dm_policy == "open" and "*" not in self.allow_from:
            raise ValueError('dm_policy "open" requires "*" in allow_from')
        if self.dm_policy == "allowlist" and not self.allow_from:
            raise ValueError('dm_policy "allowlist" requires at least one entry in allow_from')
        return self

    def restart_changes(self, other: AccountConfig) -> list[str]:
        """The keys of `RESTART_KEYS` whose values differ in `other`, sorted."""
        return sorted(key for key in self.RESTART_KEYS if getattr(self, key) != getattr(other, key, None))

    def access_policy(self) -> AccessPolicy:
        return AccessPolicy(
            dm_policy=self.dm_policy,
            allow_from=frozenset(self.allow_from),
            group_policy=self.group_policy,
            require_mention=self.require_mention,
            channels={
                cid: ChannelAccess(
                    enabled=c.enabled,
                    require_mention=c.require_mention,
                    users=frozenset(c.users) if c.users is not None else None,
                )
                for cid, c in self.channels.items()
            },
        )

    def channel_entry(self, channel_id: str, parent_id: str | None = None) -> ChannelConfig | None:
        entry = self.channels.get(channel_id)
        if entry is None and parent_id is not None:
            entry = self.channels.get(parent_id)
        return entry

    def queue_mode_for(self, channel_id: str, parent_id: str | None = None) -> QueueModeName | None:
        entry = self.channel_entry(channel_id, parent_id)
        if entry is not None and entry.queue_mode is not None:
            return entry.queue_mode
        return self.queue_mode

    def reply_in_thread_for(self, channel_id: str, parent_id: str | None = None) -> bool:
        entry = self.channel_entry(channel_id, parent_id)
        if entry is not None and entry.reply_in_thread is not None:
            return entry.reply_in_thread
        return self.reply_in_thread


def _secret(env: Mapping[str, str] | None, name: str, setting: str) -> str:
    source = os.environ if env is None else env
    value = source.get(name, "").strip()
    if not value:
        raise BindingConfigError(f"environment variable {name} (named by {setting}) is not set")
    return value


class DiscordAccountConfig(AccountConfig):
    """`[bindings.discord.<account>]`. `mode = "gateway"` reads messages over the Gateway
    WebSocket; `"interactions"` takes only slash commands on the signed HTTP endpoint."""

    RESTART_KEYS = AccountConfig.RESTART_KEYS | {
        "mode",
        "api_base_url",
        "token_env",
        "public_key_env",
        "intents",
        "chunk_limit",
    }

    mode: Literal["gateway", "interactions"] = "gateway"
    api_base_url: str = DISCORD_API_BASE_URL
    token_env: str = "DISCORD_BOT_TOKEN"
    public_key_env: str = "DISCORD_PUBLIC_KEY"
    application_id: str | None = None
    intents: int = DISCORD_DEFAULT_INTENTS
    chunk_limit: int = Field(default=DISCORD_MESSAGE_LIMIT, ge=MIN_LIMIT, le=DISCORD_MESSAGE_LIMIT)
    catch_up: bool = True
    """After a fresh start, fetch the messages missed in channels seen before."""
    catch_up_limit: int = Field(default=100, ge=1, le=1000)
    """At most this many missed messages per channel are caught up."""

    def bot_token(self, env: Mapping[str, str] | None = None) -> str:
        return _secret(env, self.token_env, "token_env")

    def public_key(self, env: Mapping[str, str] | None = None) -> str:
        return _secret(env, self.public_key_env, "public_key_env")


class SlackAccountConfig(AccountConfig):
    """`[bindings.slack.<account>]`. `mode = "socket"` (default) uses Socket Mode with the app
    token; `"events"` takes the signed Events API requests on the daemon's HTTP port."""

    RESTART_KEYS = AccountConfig.RESTART_KEYS | {
        "mode",
        "api_base_url",
        "bot_token_env",
        "app_token_env",
        "signing_secret_env",
        "chunk_limit",
    }

    mode: Literal["socket", "events"] = "socket"
    api_base_url: str = SLACK_API_BASE_URL
    bot_token_env: str = "SLACK_BOT_TOKEN"
    app_token_env: str = "SLACK_APP_TOKEN"
    signing_secret_env: str = "SLACK_SIGNING_SECRET"
    chunk_limit: int = Field(default=SLACK_MESSAGE_LIMIT, ge=MIN_LIMIT, le=SLACK_TEXT_HARD_LIMIT)

    def bot_token(self, env: Mapping[str, str] | None = None) -> str:
        return _secret(env, self.bot_token_env, "bot_token_env")

    def app_token(self, env: Mapping[str, str] | None = None) -> str:
        return _secret(env, self.app_token_env, "app_token_env")

    def signing_secret(self, env: Mapping[str, str] | None = None) -> str:
        return _secret(env, self.signing_secret_env, "signing_secret_env")


class BindingsConfig(_Model):
    """The `[bindings]` table: accounts by platform, keyed by account id."""

    discord: dict[str, DiscordAccountConfig] = Field(default_factory=dict)
    slack: dict[str, SlackAccountConfig] = Field(default_factory=dict)

    @field_validator("discord", "slack")
    @classmethod
    def _account_ids(cls, accounts: dict[str, Any]) -> dict[str, Any]:
        for account_id in accounts:
            if not _ACCOUNT_ID.match(account_id):
                raise ValueError(f"invalid account id {account_id!r}: expected [a-z0-9][a-z0-9_-]{{0,63}}")
        return accounts
