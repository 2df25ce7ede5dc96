"""The tables of scheduled and triggered runs: `[cron]` and `[webhooks.<name>]`.

Cron jobs themselves live in the database (`cron.add`, `gatewayctl cron add`); `[cron]` only
tunes the scheduler. Each `[webhooks.<name>]` table makes `POST /hooks/<name>` accept signed (or
token-bearing) deliveries and turn them into agent runs. Secrets are never written here: a hook
names the environment variables that hold them, read when the daemon starts (a variable that is
not set is reported then, naming the key and the file).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from gateway.config.sections import Positive, PositiveFloat, Section

__all__ = ["HOOK_NAME_PATTERN", "CronSection", "HookName", "WebhookConfig", "WebhookDeliverConfig"]

HOOK_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,39}$"
HookName = Annotated[str, StringConstraints(pattern=HOOK_NAME_PATTERN)]
"""A hook's name: the last part of its URL, `/hooks/<name>`."""


class CronSection(Section):
    enabled: bool = True
    """Run the scheduler. Off: jobs can still be managed and run by hand (`cron.run`)."""
    missed_after_s: PositiveFloat = 60.0
    """A slot more than this late when the scheduler first sees it (or more than its job's
    period, when that is shorter) was missed while the daemon was down; the job's `catchUp`
    decides whether it still runs."""
    max_catch_up: Positive = 100
    """The most missed slots one job runs at once under `catchUp = "all"` (the newest)."""
    keep_runs: Positive = 200
    """Runs kept per job in its history (`cron.runs`)."""


class WebhookDeliverConfig(Section):
    """Where the agent's reply is posted (besides its session)."""

    channel: Literal["discord", "slack"]
    to: str = Field(min_length=1)
    """The channel id (`channel:<id>` works too)."""
    account_id: str | None = None
    """The binding's account; may be left out when that platform has one account."""
    thread_id: str | None = None


class WebhookConfig(Section):
    template: str = Field(min_length=1)
    """The message the agent gets; `{{ path.in.body }}` inserts a field of the JSON body and
    `{{ body }}` all of it."""
    secret_env: str | None = None
    """Environment variable holding the HMAC-SHA256 secret deliveries are signed with."""
    token_env: str | None = None
    """Environment variable holding a bearer token deliveries may carry instead."""
    agent: str = Field(default="main", min_length=1)
    session_key: str | None = Field(default=None, min_length=1, max_length=512)
    """The session every delivery goes to (placeholders allowed, e.g.
    `agent:main:ci:{{ repository.name }}`); unset: a new session per delivery."""
    deliver: WebhookDeliverConfig | None = None
    enabled: bool = True
    replay_window_s: PositiveFloat = 300.0
    """How far a signed delivery's timestamp may be from the gateway's clock."""
    rate_per_minute: PositiveFloat = 60.0
    burst: Positive = 10
    max_body_bytes: Positive = 256 * 1024

    @model_validator(mode="after")
    def _some_secret(self) -> WebhookConfig:
        if self.secret_env is None and self.token_env is None:
            raise ValueError("a webhook needs secret_env (signed deliveries) or token_env (a bearer token)")
        return self
