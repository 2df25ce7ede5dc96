"""Skills: folders of instructions the agent loads when a task calls for them.

A skill is a folder holding `SKILL.md`, whose front matter names it (`name`, else the folder's
name: lower-case letters, digits and single hyphens, at most 64 characters) and says when to use
it (`description`, required). The system prompt lists every skill's name, description and file
path (`skills_prompt`); the agent reads a file with its `read` tool when a task matches. A
skill whose front matter says `disable-model-invocation: true` is left out of that list and
runs only when asked for by name.

`/skill:<name> [args]` at the start of a message loads a skill explicitly: the message the model
receives is the skill's body in a `<skill>` block, then the arguments (`skill_message`).

Skill folders are found in directories (`scan_skills`): each directory's subfolders that hold a
`SKILL.md`, in name order. The first directory that has a skill of a name wins.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import msgspec

from gateway.commands.front_matter import split_front_matter

__all__ = [
    "MAX_SKILL_FILE_BYTES",
    "SKILL_FILE",
    "Skill",
    "SkillError",
    "load_skill",
    "scan_skills",
    "skill_message",
    "skills_prompt",
]

SKILL_FILE = "SKILL.md"
MAX_SKILL_FILE_BYTES = 1024 * 1024
"""A larger `SKILL.md` is refused (it would not fit a model's context anyway)."""
MAX_NAME = 64
MAX_DESCRIPTION = 1024

_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


class SkillError(Exception):
    """A skill file that cannot be used; the message names the file and the problem."""


class Skill(msgspec.Struct, frozen=True):
    name: str
    description: str
    path: Path
    """The absolute path of its `SKILL.md`."""
    model_visible: bool = True
    """Listed in the system prompt (false: `disable-model-invocation: true`)."""

    @property
    def folder(self) -> Path:
        return self.path.parent

    def body(self) -> str:
        """The file's text after its front matter, read now. Raises SkillError."""
        return split_front_matter(_read(self.path)).body


def load_skill(path: Path) -> Skill:
    """The skill whose `SKILL.md` is `path`. Raises SkillError (unreadable, too large, no
    description, an invalid name)."""
    matter = split_front_matter(_read(path))
    name = matter.get("name") or path.parent.name
    if len(name) > MAX_NAME or not _NAME.match(name):
        raise SkillError(
            f"{path}: skill name {name!r} must be at most {MAX_NAME} lower-case letters, digits "
            "and single hyphens"
        )
    description = " ".join((matter.get("description") or "").split())
    if not description:
        raise SkillError(f"{path}: the front matter has no description (say when to use the skill)")
    if len(description) > MAX_DESCRIPTION:
        description = description[: MAX_DESCRIPTION - 1] + "…"
    return Skill(
        name=name,
        description=description,
        path=path.absolute(),
        model_visible=not matter.flag("disable-model-invocation"),
    )


def skill_files(directory: Path) -> Iterator[Path]:
    """The `SKILL.md` files of `directory`'s skill folders, in folder-name order (hidden folders
    skipped; nothing when it is not a directory)."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            if not entry.is_dir():
                continue
        except OSError:
            continue
        candidate = Path(entry.path) / SKILL_FILE
        if candidate.is_file():
            yield candidate


def scan_skills(directories: Sequence[Path]) -> tuple[list[Skill], list[str]]:
    """Every skill of `directories` (the first of a name wins) and the problems of the files
    that could not be used, one line each."""
    skills: dict[str, Skill] = {}
    problems: list[str] = []
    for directory in directories:
        for path in skill_files(directory):
            try:
                skill = load_skill(path)
            except SkillError as exc:
                problems.append(str(exc))
                continue
            skills.setdefault(skill.name, skill)
    return list(skills.values()), problems


def skills_prompt(skills: Sequence[Skill]) -> str:
    """The system prompt's section on skills ("" when no skill is visible to the model)."""
    visible = [skill for skill in skills if skill.model_visible]
    if not visible:
        return ""
    lines = [
        "# Skills",
        "",
        "Skills are instructions for particular kinds of task, kept in files. When a request matches",
        "a skill's description, read the skill's file with the read tool before you start and follow",
        "it. Relative paths in a skill file are relative to the folder that holds the file.",
        "",
        "<available_skills>",
    ]
    for skill in visible:
        lines += [
            "  <skill>",
            f"    <name>{escape(skill.name)}</name>",
            f"    <description>{escape(skill.description)}</description>",
            f"    <location>{escape(str(skill.path))}</location>",
            "  </skill>",
        ]
    lines.append("</available_skills>")
    return "\n".join(lines)


def skill_message(skill: Skill, args: str) -> str:
    """What the model receives for `/skill:<name> args`: the skill's body, then the arguments.
    Raises SkillError when the file cannot be read any more."""
    block = (
        f"<skill name={quoteattr(skill.name)} location={quoteattr(str(skill.path))}>\n"
        f"Relative paths in this skill are relative to {skill.folder}.\n\n"
        f"{skill.body()}\n"
        "</skill>"
    )
    args = args.strip()
    return f"{block}\n\n{args}" if args else block


def _read(path: Path) -> str:
    try:
        size = path.stat().st_size
        if size > MAX_SKILL_FILE_BYTES:
            raise SkillError(
                f"{path}: {size} bytes, more than the {MAX_SKILL_FILE_BYTES} a skill file may have"
            )
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SkillError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise SkillError(f"{path}: not UTF-8 text") from None
