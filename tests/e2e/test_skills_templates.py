"""Skills and prompt templates end to end: the real `gatewayd`, the examples of
docs/extensions.md written where the docs say, and what the model receives.

The faux/echo model answers `echo: <the message it received>`, so an expanded template or skill
shows in the reply; the system prompt is checked at the network edge, with the daemon's OpenAI
provider pointed at a local scripted server that records each request. A stand-in Discord shows
the same expansion for a message typed in a channel.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.client import GatewayClient
from gateway.config import load_config
from tests.agent_core.providers.llm_server import LLMServer, sse
from tests.daemon import Daemon, start_daemon
from tests.e2e.test_channels import (
    CHANNEL,
    bindings_toml,
    bot_messages,
    channels_ready,
    client_of,
    gatewayd,
    platforms,
    settle,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "extensions.md"
_EXAMPLE = re.compile(r"<!-- example: (?P<what>[^>]+?) -->\n```\w*\n(?P<body>.*?)```", re.S)


def examples(what: str) -> list[str]:
    """The bodies of the doc's code blocks marked `<!-- example: what -->`, in order."""
    return [m["body"] for m in _EXAMPLE.finditer(DOC.read_text()) if m["what"] == what]


def section(title: str) -> str:
    return DOC.read_text().split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def write_doc_files(home: Path) -> None:
    """Every file example of the doc, written under `home` where the doc puts it."""
    for match in _EXAMPLE.finditer(DOC.read_text()):
        what = match["what"]
        if "/" in what:
            path = home / what
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(match["body"])


SKILL_SEND, TEMPLATE_SEND = examples("send")
[TEMPLATE_RECEIVES] = examples("receives")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    home = tmp_path_factory.mktemp("skills")
    write_doc_files(home / "state")
    with pytest.MonkeyPatch.context() as patch:
        for variable in ("GATEWAY_CONFIG", "GATEWAY_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
            patch.delenv(variable, raising=False)
        running = start_daemon(home / "state", env={"HOME": str(home / "user")})
    try:
        yield running
    finally:
        running.stop()


async def ask(client: GatewayClient, key: str, message: str, run_id: str) -> dict[str, Any]:
    sent = await client.call("chat.send", {"sessionKey": key, "message": message, "idempotencyKey": run_id})
    assert sent["status"] == "started", sent
    outcome: dict[str, Any] = await client.call("agent.wait", {"runId": run_id, "timeoutMs": 20_000})
    assert outcome["status"] == "ok", outcome
    return outcome


async def test_the_docs_template_is_what_the_model_receives(daemon: Daemon) -> None:
    async with GatewayClient(daemon.url, token=daemon.token) as client:
        outcome = await ask(client, "agent:main:templates", TEMPLATE_SEND.strip(), "tpl-1")
        assert outcome["text"] == "echo: " + TEMPLATE_RECEIVES.strip()
        history = await client.call("chat.history", {"sessionKey": "agent:main:templates"})
        assert history["messages"][0]["content"][0]["text"] == TEMPLATE_RECEIVES.strip()


async def test_the_docs_skill_is_loaded_by_name_and_readable_by_the_agent(daemon: Daemon) -> None:
    skill_file = Path(daemon.env["GATEWAY_HOME"]) / "skills" / "release-notes" / "SKILL.md"
    body = skill_file.read_text().split("---\n", 2)[2].strip()
    async with GatewayClient(daemon.url, token=daemon.token) as client:
        outcome = await ask(client, "agent:main:skills", SKILL_SEND.strip(), "skill-1")
        text = outcome["text"]
        assert text.startswith(f'echo: <skill name="release-notes" location="{skill_file}">')
        assert body in text and text.endswith("</skill>\n\nsince v1.4")

        # The system prompt names the file outside the workspace; the agent's read tool reads it.
        read = await ask(client, "agent:main:skills", f'!tool read {{"path": "{skill_file}"}}', "skill-2")
        assert "git describe --tags --abbrev=0" in read["text"]


async def test_commands_list_offers_the_template_and_the_skill(daemon: Daemon) -> None:
    async with GatewayClient(daemon.url, token=daemon.token) as client:
        answer = await client.call(
            "commands.list", {"agentId": "main", "scope": "text", "includeArgs": False}
        )
    by_name = {c["name"]: c for c in answer["commands"]}
    assert by_name["review"]["description"] == "Review a file for bugs, then for unclear names"
    assert by_name["skill:release-notes"]["description"].startswith(
        "Write release notes from the git history."
    )
    assert by_name["skill:release-notes"]["source"] == "skill"


def test_the_docs_config_blocks_and_headings(tmp_path: Path) -> None:
    blocks = re.findall(r"```toml\n(.*?)```", section("Skills") + section("Prompt templates"), re.S)
    assert blocks
    for block in blocks:
        path = tmp_path / "gateway.toml"
        path.write_text(block)
        config = load_config(path, env={"HOME": str(tmp_path / "me")})
        assert config.skills.dirs == [tmp_path / "me" / "team" / "skills", tmp_path / "shared" / "skills"]
    for title in ("MCP servers", "Python extensions", "Skills", "Prompt templates", "Chat commands"):
        assert f"\n## {title}\n" in DOC.read_text()


# --- the system prompt, as the model's API receives it --------------------------------------


class ThreadedLLM:
    """`LLMServer` on an event loop of its own thread (the daemon calls it from its process)."""

    def __init__(self) -> None:
        self.server = LLMServer()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="llm", daemon=True)

    def __enter__(self) -> ThreadedLLM:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.aclose(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def reply(self, text: str) -> None:
        body = {
            "id": "c1",
            "object": "chat.completion.chunk",
            "model": "gpt-4o-mini",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}],
        }
        reply = sse(f"data: {json.dumps(body)}\n\n", "data: [DONE]\n\n")
        self.loop.call_soon_threadsafe(self.server.script, reply)

    def system_prompts(self) -> list[str]:
        out = []
        for request in list(self.server.requests):
            for message in request.json.get("messages", []):
                if message.get("role") in ("system", "developer"):
                    content = message["content"]
                    out.append(content if isinstance(content, str) else "".join(p["text"] for p in content))
        return out


async def test_the_system_prompt_lists_every_skill_with_its_file(tmp_path: Path) -> None:
    home = tmp_path / "state"
    write_doc_files(home)
    team = tmp_path / "team-skills"
    (team / "triage").mkdir(parents=True)
    (team / "triage" / "SKILL.md").write_text("---\ndescription: Sort new issues by urgency\n---\nsteps\n")
    workspace = home / "workspaces" / "main" / ".agents" / "skills" / "hidden"
    workspace.mkdir(parents=True)
    (workspace / "SKILL.md").write_text(
        "---\ndescription: Only by name\ndisable-model-invocation: true\n---\n"
    )
    with ThreadedLLM() as llm:
        config = f'[providers.openai]\nbase_url = "{llm.server.base_url}/v1"\n[skills]\ndirs = ["{team}"]\n'
        daemon = await asyncio.to_thread(
            start_daemon, home, model="openai/gpt-4o-mini", env={"OPENAI_API_KEY": "test"}, config=config
        )
        try:
            llm.reply("hello back")
            async with GatewayClient(daemon.url, token=daemon.token) as client:
                outcome = await ask(client, "agent:main:prompt", "hello", "sys-1")
            assert outcome["text"] == "hello back"
        finally:
            await asyncio.to_thread(daemon.stop)
    [prompt] = llm.system_prompts()
    skill_file = home / "skills" / "release-notes" / "SKILL.md"
    documented = examples_of_prompt().replace(
        "/home/me/.gateway/skills/release-notes/SKILL.md", str(skill_file)
    )
    head, _, rest = documented.partition("<available_skills>\n")
    element = rest.removesuffix("</available_skills>").strip()
    assert prompt.rstrip().endswith("</available_skills>")
    assert head + "<available_skills>\n" in prompt  # the doc's section, as the model gets it
    assert element in prompt  # the doc's skill, among the others
    assert (
        "<name>triage</name>" in prompt and f"<location>{team / 'triage' / 'SKILL.md'}</location>" in prompt
    )
    assert "hidden" not in prompt and "Only by name" not in prompt


def examples_of_prompt() -> str:
    """The system prompt's skills section as the doc shows it."""
    block = section("Skills").split("```text\n", 1)[1].split("```", 1)[0]
    return block.strip()


# --- a chat channel ----------------------------------------------------------------------------


async def test_a_template_typed_in_discord_is_expanded(gateway_home: Path) -> None:
    write_doc_files(gateway_home)
    async with (
        platforms() as (discord, _),
        gatewayd(gateway_home, bindings_toml(discord, None)) as daemon,
        client_of(daemon) as client,
    ):
        await channels_ready(client, "discord:default")
        await discord.dispatch_message(CHANNEL, TEMPLATE_SEND.strip())
        expected = "echo: " + TEMPLATE_RECEIVES.strip()
        await settle(lambda: [m["content"] for m in bot_messages(discord, CHANNEL)] == [expected])
