"""The bindings' configuration checks (`gateway.channel_config`) and `gateway.channel_resume`:
finishing the replies a previous process left in the outbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from bindings import OutboxRecord, ReplyRoute, chunk_text, outbox_key
from gateway.channel_config import validate_bindings
from gateway.channel_resume import settle_outbox
from gateway.channel_store import ChannelStore
from gateway.config import load_config
from gateway.errors import ConfigError
from sessions.records import NewEvent
from sessions.store import Store, default_url

ENV = {"DISCORD_BOT_TOKEN": "t", "SLACK_BOT_TOKEN": "xoxb", "SLACK_APP_TOKEN": "xapp"}


def config_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


def test_valid_bindings_pass(tmp_path: Path) -> None:
    path = config_file(
        tmp_path,
        '[bindings.discord.default]\ndmPolicy = "allowlist"\nallow_from = ["1"]\n'
        "[bindings.slack.work]\nreply_in_thread = true\n"
        '[bindings.slack.off]\nenabled = false\nbot_token_env = "UNSET_BUT_DISABLED"\n',
    )
    settings = validate_bindings(load_config(path, {}), ENV)
    assert settings.discord["default"].dm_policy == "allowlist"
    assert settings.slack["work"].reply_in_thread


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        (
            '[bindings.discord.default]\ndm_policy = "maybe"\n',
            "bindings.discord.default.dm_policy: Input should be",
        ),
        ("[bindings.discord.default]\nbogus = 1\n", "bindings.discord.default.bogus: unknown key"),
        ("[bindings.teams.default]\n", "bindings.teams: unknown key"),
        (
            '[bindings.discord.default]\ndm_policy = "open"\n',
            'bindings.discord.default: dm_policy "open" requires',
        ),
        (
            '[bindings.slack.default]\nmode = "events"\n',
            "bindings.slack.default: environment variable SLACK_SIGNING",
        ),
        (
            '[bindings.discord.default]\nmode = "interactions"\npublic_key_env = "PK"\n',
            "bindings.discord.default: environment variable PK",
        ),
    ],
)
def test_a_bad_table_or_missing_secret_is_one_config_error_naming_key_and_file(
    tmp_path: Path, toml: str, expected: str
) -> None:
    path = config_file(tmp_path, toml)
    with pytest.raises(ConfigError) as failed:
        validate_bindings(load_config(path, {}), ENV)
    assert str(failed.value).startswith(f"config error in {path}: ")
    assert expected in str(failed.value)


def test_a_malformed_public_key_is_refused(tmp_path: Path) -> None:
    path = config_file(tmp_path, '[bindings.discord.default]\nmode = "interactions"\n')
    with pytest.raises(ConfigError, match="64 hex characters"):
        validate_bindings(load_config(path, {}), {**ENV, "DISCORD_PUBLIC_KEY": "xyz"})


ROUTE = ReplyRoute(platform="discord", account_id="default", channel_id="500", reply_to="41")


async def _cut_off_run(store: Store, text: str) -> str:
    """A session whose run streamed `text` and was then closed as interrupted (as recovery does)."""
    session = await store.tree.create_session(agent_id="main", key="agent:main:discord:channel:500")
    await store.runs.create("run-1", session.id)
    message = {"role": "assistant", "content": [{"type": "text", "text": text}], "stopReason": "aborted"}
    events = [
        NewEvent(1, "agent.started", {}, "run-1"),
        NewEvent(2, "message.started", {"messageId": "m1", "role": "assistant"}, "run-1"),
        NewEvent(3, "message.delta", {"messageId": "m1", "kind": "text", "delta": text[:10]}, "run-1"),
        NewEvent(4, "message.completed", {"messageId": "m1", "message": message}, "run-1"),
        NewEvent(5, "agent.finished", {"terminationReason": "interrupted"}, "run-1"),
    ]
    await store.events.append(session.id, events)
    await store.runs.finish("run-1", status="interrupted", termination_reason="interrupted")
    return session.id


async def test_settling_rewrites_saved_chunks_and_adds_the_missing_ones(gateway_home: Path) -> None:
    text = " ".join(f"w{i}" for i in range(1, 601))  # about 2,900 characters: two messages
    async with Store.open(default_url(gateway_home)) as store:
        await _cut_off_run(store, text)
        channels = ChannelStore(store.database)
        key0 = outbox_key("discord", "default", "run-1", 0)
        shown = "w1 w2 w3"
        await channels.outbox_put(
            OutboxRecord(
                key=key0,
                platform="discord",
                account_id="default",
                route=ROUTE,
                run_id="run-1",
                chunk_index=0,
                text=shown,
                state="edited",
                platform_message_id="9001",
            )
        )
        changed = await settle_outbox(
            channels, store, platform="discord", account_id="default", chunk_limit=2000
        )
        assert changed == 2
        first, second = await channels.outbox_pending("discord", "default")
        expected = chunk_text(text + "\n\n_(stopped)_", 2000)
        assert (first.key, first.state, first.text, first.platform_message_id) == (
            key0,
            "edited",
            expected[0],
            "9001",
        )
        assert (second.state, second.chunk_index, second.text) == ("pending", 1, expected[1])
        assert second.key == outbox_key("discord", "default", "run-1", 1)
        assert second.route.reply_to is None and second.route.channel_id == "500"

        assert (
            await settle_outbox(channels, store, platform="discord", account_id="default", chunk_limit=2000)
            == 0
        )
