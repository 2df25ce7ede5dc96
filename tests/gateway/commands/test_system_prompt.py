"""Skills in the agent's system prompt (`gateway.directory.Directory.profile`) and the agent's
file tools reading a listed skill where it is (`read_roots` of the sandbox layer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_core.messages import TextContent
from agent_core.tools import create_coding_tools
from gateway.commands.library import Library
from gateway.config import load_config
from gateway.directory import Directory
from gateway.sandbox import PathOutsideWorkspaceError, SandboxMachine, SandboxSettings, sandbox_layer


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_prompt_ends_with_the_agents_current_skills(tmp_path: Path) -> None:
    home = tmp_path / "home"
    directory = Directory(load_config(None, env={"GATEWAY_HOME": str(home), "GATEWAY_MODEL": "faux/echo"}))
    clock = Clock()
    directory.library = Library(home=home, clock=clock)
    plain = directory.profile("main").system_prompt
    assert "<available_skills>" not in plain

    skill = write(home / "skills" / "deploy" / "SKILL.md", "---\ndescription: Deploy the app\n---\nsteps\n")
    clock.now += 5
    prompt = directory.profile("main").system_prompt

    assert prompt.startswith(plain.rstrip())
    assert "<name>deploy</name>" in prompt and "<description>Deploy the app</description>" in prompt
    assert f"<location>{skill}</location>" in prompt
    assert directory.profile("main") is directory.profile("main")  # unchanged skills: same profile

    skill.unlink()
    clock.now += 5
    assert directory.profile("main").system_prompt == plain


async def test_reading_tools_may_read_a_skill_outside_the_workspace_and_nothing_else(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    skill = write(tmp_path / "skills" / "deploy" / "SKILL.md", "---\ndescription: d\n---\nsteps\n")
    secret = write(tmp_path / "skills" / "secret.txt", "not a skill folder")
    settings = SandboxSettings(workspace=workspace, read_roots=(skill.parent,))
    machine = SandboxMachine(home=tmp_path / "state", uid_count=0)
    wrapped = sandbox_layer(create_coding_tools(workspace), settings, lambda record: None, machine=machine)
    tools = {t.name: t for t in wrapped}

    async def run(name: str, params: dict[str, str]) -> str:
        result = await tools[name].execute("c1", params, None, None)
        return "".join(b.text for b in result.content if isinstance(b, TextContent))

    assert "steps" in await run("read", {"path": str(skill)})
    assert "SKILL.md" in await run("ls", {"path": str(skill.parent)})
    with pytest.raises(PathOutsideWorkspaceError):
        await run("read", {"path": str(secret)})
    with pytest.raises(PathOutsideWorkspaceError):
        await run("write", {"path": str(skill), "content": "changed"})
    with pytest.raises(PathOutsideWorkspaceError):
        await run("read", {"path": "../skills/deploy/SKILL.md"})  # relative paths are the workspace's
    assert skill.read_text().endswith("steps\n")
