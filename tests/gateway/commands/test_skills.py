"""`gateway.commands.skills`: skill folders, the system prompt's list, `/skill:<name>`."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.commands.skills import (
    MAX_SKILL_FILE_BYTES,
    SkillError,
    load_skill,
    scan_skills,
    skill_message,
    skills_prompt,
)


def write_skill(root: Path, folder: str, front: str, body: str = "Do the thing.") -> Path:
    path = root / folder / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\n{front}\n---\n\n{body}\n")
    return path


def test_a_skill_is_named_by_its_front_matter_or_its_folder(tmp_path: Path) -> None:
    named = load_skill(write_skill(tmp_path, "a", "name: release-notes\ndescription: Write release notes"))
    assert (named.name, named.description) == ("release-notes", "Write release notes")
    assert named.path == tmp_path / "a" / "SKILL.md" and named.model_visible
    by_folder = load_skill(write_skill(tmp_path, "lint-fix", "description: >\n  Fix lint\n  errors"))
    assert (by_folder.name, by_folder.description) == ("lint-fix", "Fix lint errors")


@pytest.mark.parametrize(
    ("front", "problem"),
    [
        ("name: ok", "has no description"),
        ("name: Bad_Name\ndescription: d", "must be at most 64 lower-case"),
        ("name: a--b\ndescription: d", "must be at most 64 lower-case"),
        (f"name: {'a' * 65}\ndescription: d", "must be at most 64 lower-case"),
    ],
)
def test_an_unusable_skill_says_why(tmp_path: Path, front: str, problem: str) -> None:
    path = write_skill(tmp_path, "s", front)
    with pytest.raises(SkillError, match=problem) as refused:
        load_skill(path)
    assert str(path) in str(refused.value)


def test_a_huge_skill_file_is_refused(tmp_path: Path) -> None:
    path = write_skill(tmp_path, "big", "description: d", "x" * (MAX_SKILL_FILE_BYTES + 1))
    with pytest.raises(SkillError, match="more than"):
        load_skill(path)


def test_the_first_directory_with_a_name_wins_and_problems_are_reported(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write_skill(first, "deploy", "description: from the first")
    write_skill(second, "deploy", "description: from the second")
    write_skill(second, "audit", "description: only in the second")
    write_skill(second, "broken", "name: broken")
    write_skill(second, ".hidden", "description: never seen")
    (second / "loose.md").write_text("not a skill folder")

    skills, problems = scan_skills([tmp_path / "missing", first, second])

    assert [(s.name, s.description) for s in skills] == [
        ("deploy", "from the first"),
        ("audit", "only in the second"),
    ]
    assert len(problems) == 1 and "broken" in problems[0]


def test_the_prompt_lists_name_description_and_path_of_visible_skills(tmp_path: Path) -> None:
    shown = load_skill(write_skill(tmp_path, "deploy", "description: Ship <fast> & safe"))
    hidden = load_skill(write_skill(tmp_path, "secret", "description: d\ndisable-model-invocation: true"))

    prompt = skills_prompt([shown, hidden])

    assert "<name>deploy</name>" in prompt
    assert "<description>Ship &lt;fast&gt; &amp; safe</description>" in prompt
    assert f"<location>{shown.path}</location>" in prompt
    assert "secret" not in prompt
    assert "read tool" in prompt
    assert skills_prompt([hidden]) == ""


def test_a_skill_message_carries_the_body_then_the_arguments(tmp_path: Path) -> None:
    skill = load_skill(write_skill(tmp_path, "deploy", "description: d", "Step 1.\nStep 2."))
    message = skill_message(skill, "  to staging ")
    assert message.startswith(f'<skill name="deploy" location="{skill.path}">\n')
    assert "Step 1.\nStep 2.\n</skill>" in message
    assert f"relative to {tmp_path / 'deploy'}" in message
    assert message.endswith("</skill>\n\nto staging")
    assert skill_message(skill, "").endswith("</skill>")
    skill.path.unlink()
    with pytest.raises(SkillError, match="cannot read"):
        skill_message(skill, "")
