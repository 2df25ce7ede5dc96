"""`gateway.commands.inbound`: chat commands answered as runs, templates and skills expanded,
everything else passed on, over a real SessionManager (faux/echo) and the gateway's Directory."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agent_core import ImageContent, TextContent, UserMessage
from gateway.commands import CommandFailed, InboundCommands
from gateway.config import load_config
from gateway.directory import Directory
from sessions import StoreUnavailable
from tests.sessions.conftest import store_url
from tests.sessions.manager_support import FAST, Harness, HarnessFactory, harnesses

__all__ = ["harnesses", "store_url"]

KEY = "agent:main:main"
RUN_EVENTS = [
    "agent.started",
    "message.completed",
    "message.started",
    "message.delta",
    "message.completed",
    "agent.finished",
]


@dataclass
class Setup:
    h: Harness
    commands: InboundCommands
    directory: Directory
    home: Path

    @property
    def workspace(self) -> Path:
        return self.directory.config.resolve_agent("main").workspace

    async def send(self, text: str | UserMessage, key: str, session_key: str = KEY) -> dict[str, Any]:
        session = await self.h.session(session_key)
        result = await self.commands.submit(
            key=session_key, session=session, message=text, idempotency_key=key
        )
        assert result.status == "started", result
        return await self.h.wait(key)

    def run_events(self, run_id: str) -> list[tuple[str, dict[str, Any]]]:
        return [(e.name, e.data.dump()) for e in self.h.recorder.events if e.run_id == run_id]


@pytest.fixture
async def setup(harnesses: HarnessFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Setup:
    monkeypatch.setenv("GATEWAY_FAUX_PACE_MS", "1")
    home = tmp_path / "home"
    directory = Directory(load_config(None, env={"GATEWAY_HOME": str(home), "GATEWAY_MODEL": "faux/echo"}))
    h = await harnesses(directory=directory)  # type: ignore[arg-type]
    commands = InboundCommands(
        manager=h.manager, directory=lambda: directory, notify=h.recorder.session_changed
    )
    return Setup(h, commands, directory, home)


def reply_text(events: list[tuple[str, dict[str, Any]]]) -> str:
    completed = [data["message"] for name, data in events if name == "message.completed"]
    return "".join(b["text"] for b in completed[-1]["content"] if b["type"] == "text")


async def test_status_is_answered_as_a_run_that_never_reaches_the_model_or_the_transcript(
    setup: Setup,
) -> None:
    outcome = await setup.send("/status", "k1")

    events = setup.run_events("k1")
    assert [name for name, _ in events] == RUN_EVENTS
    user = events[1][1]["message"]
    assert user["role"] == "user" and user["idempotencyKey"] == "k1"
    assert user["content"][0]["text"] == "/status"
    text = reply_text(events)
    assert text.startswith(f"Session {KEY} (")
    assert "model faux/echo · thinking off · queue steer" in text
    assert events[3][1]["delta"] == text  # one delta: clients that show deltas show it all
    assert events[-1][1]["terminationReason"] == "no_tool_calls"
    assert (outcome["status"], outcome["text"]) == ("ok", text)
    session = await setup.h.manager.get(key=KEY)
    assert await setup.h.messages(session.id) == []
    await setup.h.check_log(session.id)
    record = await setup.h.input("k1")
    assert record.status == "done"

    again = await setup.commands.submit(key=KEY, session=session, message="/status", idempotency_key="k1")
    assert (again.status, again.result and again.result["text"]) == ("ok", text)
    assert len(setup.run_events("k1")) == len(RUN_EVENTS)  # answered once


async def test_think_and_model_change_the_session_and_refuse_what_does_not_exist(setup: Setup) -> None:
    assert (await setup.send("/think: high", "t1"))["text"] == "Thinking level set to high."
    assert (await setup.send("/model openai/gpt-4o-mini", "m1"))["text"] == "Model set to openai/gpt-4o-mini."
    session = await setup.h.manager.get(key=KEY)
    assert (session.thinking_level, session.model) == ("high", "openai/gpt-4o-mini")
    assert (session.id, "patch") in setup.h.recorder.changes

    refused = await setup.send("/think enormous", "t2")
    assert "Unknown thinking level 'enormous'" in refused["text"] and "xhigh" in refused["text"]
    unknown = await setup.send("/model nowhere/nothing", "m2")
    assert unknown["text"].startswith("The model stays as it was: Unknown model 'nowhere/nothing'")
    assert "Known models" not in unknown["text"]
    session = await setup.h.manager.get(key=KEY)
    assert (session.thinking_level, session.model) == ("high", "openai/gpt-4o-mini")

    assert (await setup.send("/think", "t3"))["text"].startswith("Thinking level: high.")
    assert (await setup.send("/MODEL", "m3"))["text"].startswith(
        "Model: openai/gpt-4o-mini (set for this session)."
    )
    assert (await setup.send("/think off", "t4"))["text"] == "Thinking is off."


async def test_stop_aborts_the_run_in_progress(setup: Setup) -> None:
    session = await setup.h.session(KEY)
    await setup.h.send(session, "!sleep 10000 never", "long")
    await setup.h.wait_for_event(session.id, "agent.started")

    assert (await setup.send("/stop", "s1"))["text"] == "Stopped the run."
    assert (await setup.h.wait("long"))["status"] == "aborted"
    assert (await setup.send("/stop", "s2"))["text"] == "Nothing is running."


async def test_a_command_during_a_run_leaves_the_run_and_its_transcript_whole(setup: Setup) -> None:
    session = await setup.h.session(KEY)
    await setup.h.send(session, "!long 400", "run")
    await setup.h.wait_for_event(session.id, "message.delta")

    status = await setup.send("/status", "during")
    assert "a run is in progress" in status["text"]
    assert (await setup.h.wait("run"))["status"] == "ok"
    assert [role for role, _ in await setup.h.texts(session.id)] == ["user", "assistant"]
    await setup.h.check_log(session.id)


async def test_new_moves_the_key_to_an_empty_session_and_sends_what_follows_there(setup: Setup) -> None:
    old = await setup.h.session(KEY)
    await setup.h.send(old, "before", "b1")
    await setup.h.wait("b1")

    outcome = await setup.send("/new hello there", "n1")

    fresh = await setup.h.manager.get(key=KEY)
    assert fresh.id != old.id
    assert outcome["text"].startswith(f"Started a new session for {KEY}.")
    # Answered where it was typed, under the key it was sent to (which the old one lost).
    answer = [e for e in setup.h.recorder.events if e.run_id == "n1"]
    assert {(e.session_id, e.session_key) for e in answer} == {(old.id, KEY)}
    archived = await setup.h.store.tree.get_session(old.id)
    assert archived is not None and archived.status == "archived"
    assert (fresh.id, "reset") in setup.h.recorder.changes
    await setup.h.wait_for(
        lambda: any(e.name == "agent.finished" and e.run_id != "n1" for e in setup.h.recorder.of(fresh.id))
    )
    assert await setup.h.texts(fresh.id) == [("user", "hello there"), ("assistant", "echo: hello there")]
    assert [text for _, text in await setup.h.texts(old.id)] == ["before", "echo: before"]


async def test_compact_summarises_the_history_or_says_why_not(
    harnesses: HarnessFactory, tmp_path: Path
) -> None:
    directory = Directory(
        load_config(None, env={"GATEWAY_HOME": str(tmp_path), "GATEWAY_MODEL": "faux/echo"})
    )
    settings = msgspec.structs.replace(FAST, compaction_keep_recent_tokens=1)
    h = await harnesses(directory=directory, settings=settings)  # type: ignore[arg-type]
    setup = Setup(
        h,
        InboundCommands(manager=h.manager, directory=lambda: directory, notify=h.recorder.session_changed),
        directory,
        tmp_path,
    )

    assert (await setup.send("/compact", "c1"))["text"].startswith("Nothing was compacted:")
    session = await h.session(KEY)
    for index in range(2):
        await h.send(session, f"message number {index} with a few words", f"m{index}")
        await h.wait(f"m{index}")

    compacted = await setup.send("/compact", "c2")

    assert re.fullmatch(
        r"Compacted: about [\d,]+ tokens of earlier history are now a summary\.", compacted["text"]
    )
    assert [e.kind for e in await h.transcript(session.id)].count("compaction") == 1


async def test_templates_and_skills_become_the_prompt_and_other_slashes_pass(setup: Setup) -> None:
    prompts = setup.home / "prompts"
    prompts.mkdir(parents=True)
    (prompts / "review.md").write_text("---\ndescription: Review\n---\nReview $1 for $2; all: $@\n")
    skill = setup.workspace / ".agents" / "skills" / "deploy" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\ndescription: Deploy the app\n---\nRun make deploy.\n")

    await setup.send('/review app.py "error handling"', "r1")
    await setup.send("/skill:deploy to staging", "d1")
    await setup.send("/unknown stays as typed", "u1")
    await setup.send("/skill:missing stays too", "u2")

    session = await setup.h.manager.get(key=KEY)
    users = [text for role, text in await setup.h.texts(session.id) if role == "user"]
    assert users[0] == "Review app.py for error handling; all: app.py error handling"
    assert users[1].startswith(f'<skill name="deploy" location="{skill}">')
    assert "Run make deploy.\n</skill>\n\nto staging" in users[1]
    assert users[2:] == ["/unknown stays as typed", "/skill:missing stays too"]


async def test_a_message_with_an_image_is_never_a_command(setup: Setup) -> None:
    message = UserMessage(
        content=[TextContent(text="/status"), ImageContent(data="aGk=", mime_type="image/png")]
    )
    outcome = await setup.send(message, "img")
    assert outcome["text"] == "echo: /status"


class Extensions:
    """An extension host with two commands (the hook `gateway.commands` defines)."""

    @dataclass(frozen=True)
    class Command:
        name: str
        description: str
        accepts_args: bool = True

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def registered_commands(self) -> Iterable[Extensions.Command]:
        return [self.Command("deploy", "Deploy"), self.Command("status", "never wins over /status")]

    async def run_command(
        self, name: str, args: str, *, session_key: str, session_id: str, agent_id: str
    ) -> str:
        self.calls.append((name, args, session_key))
        if args == "explode":
            raise RuntimeError("the deploy target\nis unreachable")
        if args == "refuse":
            raise CommandFailed("/deploy needs a target")
        return f"deployed {args}"


async def test_extension_commands_run_through_the_hook_and_fail_in_one_line(setup: Setup) -> None:
    extensions = Extensions()
    setup.commands.extensions = extensions

    assert (await setup.send("/deploy prod", "e1"))["text"] == "deployed prod"
    failed = await setup.send("/deploy explode", "e2")
    assert failed["text"] == "/deploy failed: the deploy target is unreachable"
    assert (await setup.send("/deploy refuse", "e3"))["text"] == "/deploy needs a target"
    assert (await setup.send("/status", "e4"))["text"].startswith("Session ")
    assert [args for _, args, _ in extensions.calls] == ["prod", "explode", "refuse"]
    assert {key for _, _, key in extensions.calls} == {KEY}


async def test_commands_are_refused_once_closing(setup: Setup) -> None:
    session = await setup.h.session(KEY)
    await setup.commands.aclose()
    with pytest.raises(StoreUnavailable):
        await setup.commands.submit(key=KEY, session=session, message="/status", idempotency_key="late")
    assert await setup.h.store.inputs.get("late") is None
    plain = await setup.commands.submit(key=KEY, session=session, message="hi", idempotency_key="plain")
    assert plain.status == "started"
    await setup.h.wait("plain")


async def test_a_slow_command_is_cancelled_at_close_and_never_answered_twice(setup: Setup) -> None:
    session = await setup.h.session(KEY)
    await setup.h.send(session, "!sleep 10000 hold the lane", "busy")
    await setup.h.wait_for_event(session.id, "agent.started")
    # /compact waits for the session's lane, which the run holds.
    result = await setup.commands.submit(key=KEY, session=session, message="/compact", idempotency_key="c")
    assert result.status == "started" and setup.commands.running == 1

    await setup.commands.aclose(grace_s=0.05)

    assert setup.commands.running == 0
    record = await setup.h.input("c")
    assert record.status == "running"  # left open for recovery to close as interrupted
    await asyncio.sleep(0)
    assert not [e for e in setup.h.recorder.events if e.run_id == "c"]
