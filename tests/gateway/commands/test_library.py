"""`gateway.commands.library`: where an agent's skills and templates are found, kept fresh."""

from __future__ import annotations

from pathlib import Path

from gateway.commands.library import Library
from gateway.config import load_config
from gateway.directory import Directory


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def skill(root: Path, name: str, description: str) -> Path:
    path = root / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\ndescription: {description}\n---\nbody of {name}\n")
    return path


def test_workspace_then_configured_then_home(tmp_path: Path) -> None:
    home, workspace, team = tmp_path / "home", tmp_path / "ws", tmp_path / "team"
    library = Library(home=home, skill_dirs=[team], prompt_dirs=[team / "prompts"])
    skill(workspace / ".agents" / "skills", "deploy", "the workspace's")
    skill(team, "deploy", "the team's")
    skill(team, "audit", "the team's audit")
    skill(home / "skills", "audit", "home's audit")
    skill(home / "skills", "notes", "home's notes")
    for directory, text in ((home / "prompts", "home"), (team / "prompts", "team")):
        directory.mkdir(parents=True)
        (directory / "fix.md").write_text(f"fix from {text}")

    found = {s.name: s.description for s in library.skills(workspace)}

    assert found == {"deploy": "the workspace's", "audit": "the team's audit", "notes": "home's notes"}
    assert library.prompt_dirs(workspace) == [
        workspace / ".agents" / "prompts",
        team / "prompts",
        home / "prompts",
    ]
    fix = library.template(workspace, "fix")
    assert fix is not None and fix.body == "fix from team"
    assert library.skill(workspace, "nope") is None and library.template(workspace, "nope") is None


def test_changes_are_seen_once_the_last_scan_is_older_than_rescan_s(tmp_path: Path) -> None:
    clock = Clock()
    library = Library(home=tmp_path / "home", rescan_s=1.0, clock=clock)
    workspace = tmp_path / "ws"
    assert library.skills(workspace) == []

    path = skill(tmp_path / "home" / "skills", "deploy", "first")
    clock.now += 0.5
    assert library.skills(workspace) == []  # one scan serves a burst of look-ups
    clock.now += 0.6
    assert [s.description for s in library.skills(workspace)] == ["first"]

    path.write_text("---\ndescription: edited\n---\n")
    clock.now += 1.1
    assert [s.description for s in library.skills(workspace)] == ["edited"]


def test_read_roots_are_the_skill_folders_outside_the_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    library = Library(home=tmp_path / "home")
    skill(workspace / ".agents" / "skills", "inside", "d")
    skill(tmp_path / "home" / "skills", "outside", "d")

    assert library.read_roots(workspace) == ((tmp_path / "home" / "skills" / "outside").resolve(),)


def test_read_roots_follow_the_skills_rescan(tmp_path: Path) -> None:
    clock = Clock()
    workspace = tmp_path / "ws"
    library = Library(home=tmp_path / "home", rescan_s=1.0, clock=clock)
    skill(tmp_path / "home" / "skills", "first", "d")
    first = (tmp_path / "home" / "skills" / "first").resolve()
    assert library.read_roots(workspace) == (first,)

    skill(tmp_path / "home" / "skills", "second", "d")
    assert library.read_roots(workspace) == (first,)  # the skills were not scanned again yet
    clock.now += 1.1
    second = (tmp_path / "home" / "skills" / "second").resolve()
    assert sorted(library.read_roots(workspace)) == sorted([first, second])


def test_configured_dirs_are_relative_to_the_config_file(tmp_path: Path) -> None:
    config_file = tmp_path / "etc" / "gateway.toml"
    config_file.parent.mkdir()
    config_file.write_text('[skills]\ndirs = ["team/skills"]\n[prompts]\ndirs = ["~/prompts"]\n')
    config = load_config(
        config_file, env={"HOME": str(tmp_path / "me"), "GATEWAY_HOME": str(tmp_path / "state")}
    )

    assert config.skills.dirs == [tmp_path / "etc" / "team" / "skills"]
    assert config.prompts.dirs == [tmp_path / "me" / "prompts"]
    skill(tmp_path / "etc" / "team" / "skills", "triage", "from the team")
    library = Directory(config).library
    assert [s.description for s in library.skills(tmp_path / "ws")] == ["from the team"]
