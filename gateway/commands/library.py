"""`Library`: the skills and prompt templates an agent has, found on disk and kept fresh.

An agent's skills come from, in this order (the first of a name wins):

1. `<workspace>/.agents/skills/` (the agent's own, next to its work);
2. the directories of `[skills] dirs` in the config;
3. `<home>/skills/` (the gateway's state directory).

Its prompt templates come from `<workspace>/.agents/prompts/`, `[prompts] dirs` and
`<home>/prompts/` the same way.

Directories are scanned again when their result is older than `rescan_s` (a second by default),
so a skill or template added or edited shows in runs and completions that start a moment later,
and a burst of look-ups (a session list, a run) costs one scan. A file that cannot be used is
logged once with the reason and otherwise ignored.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import structlog

from gateway.commands.skills import Skill, scan_skills
from gateway.commands.templates import PromptTemplate, scan_templates

__all__ = ["Library", "WORKSPACE_PROMPTS", "WORKSPACE_SKILLS"]

log = structlog.get_logger("gateway.commands")

WORKSPACE_SKILLS = Path(".agents") / "skills"
WORKSPACE_PROMPTS = Path(".agents") / "prompts"
RESCAN_S = 1.0
MAX_REPORTED = 1024
"""Problems remembered as already logged (older ones may be logged again)."""

T = TypeVar("T")


class Library:
    def __init__(
        self,
        *,
        home: Path,
        skill_dirs: Sequence[Path] = (),
        prompt_dirs: Sequence[Path] = (),
        rescan_s: float = RESCAN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.home = home
        self._skill_dirs = tuple(skill_dirs)
        self._prompt_dirs = tuple(prompt_dirs)
        self._rescan_s = rescan_s
        self._clock = clock
        # Per workspace: when it was scanned and what was found.
        self._skills: dict[Path, tuple[float, list[Skill]]] = {}
        self._templates: dict[Path, tuple[float, list[PromptTemplate]]] = {}
        self._reported: dict[str, None] = {}
        # Per workspace: the skills list the read roots were worked out from, and those roots.
        self._read_roots: dict[Path, tuple[list[Skill], tuple[Path, ...]]] = {}

    # --- where ----------------------------------------------------------------------------------

    def skill_dirs(self, workspace: Path) -> list[Path]:
        """Where the skills of an agent working in `workspace` are looked for, in order."""
        return [workspace / WORKSPACE_SKILLS, *self._skill_dirs, self.home / "skills"]

    def prompt_dirs(self, workspace: Path) -> list[Path]:
        """Where the prompt templates of an agent working in `workspace` are looked for."""
        return [workspace / WORKSPACE_PROMPTS, *self._prompt_dirs, self.home / "prompts"]

    def read_roots(self, workspace: Path) -> tuple[Path, ...]:
        """The skill folders outside `workspace`: the agent's file tools may read them (a skill
        lists its path for the agent to read), never write them. Worked out again whenever the
        skills are scanned again (every run asks; paths are resolved once per scan)."""
        skills = self.skills(workspace)
        known = self._read_roots.get(workspace)
        if known is not None and known[0] is skills:
            return known[1]
        root = workspace.resolve()
        out = []
        for skill in skills:
            folder = skill.folder.resolve()
            if folder != root and root not in folder.parents:
                out.append(folder)
        roots = tuple(out)
        self._read_roots[workspace] = (skills, roots)
        return roots

    # --- what -----------------------------------------------------------------------------------

    def skills(self, workspace: Path) -> list[Skill]:
        """The skills of an agent working in `workspace` (the first of a name wins)."""
        return self._cached(self._skills, workspace, lambda: scan_skills(self.skill_dirs(workspace)))

    def templates(self, workspace: Path) -> list[PromptTemplate]:
        """The prompt templates of an agent working in `workspace`."""
        return self._cached(self._templates, workspace, lambda: scan_templates(self.prompt_dirs(workspace)))

    def skill(self, workspace: Path, name: str) -> Skill | None:
        return next((s for s in self.skills(workspace) if s.name == name), None)

    def template(self, workspace: Path, name: str) -> PromptTemplate | None:
        return next((t for t in self.templates(workspace) if t.name == name), None)

    def _cached(
        self,
        scans: dict[Path, tuple[float, list[T]]],
        workspace: Path,
        scan: Callable[[], tuple[list[T], list[str]]],
    ) -> list[T]:
        now = self._clock()
        known = scans.get(workspace)
        if known is not None and now - known[0] < self._rescan_s:
            return known[1]
        items, problems = scan()
        for problem in problems:
            self._report(problem)
        scans[workspace] = (now, items)
        return items

    def _report(self, problem: str) -> None:
        if problem in self._reported:
            return
        self._reported[problem] = None
        while len(self._reported) > MAX_REPORTED:
            self._reported.pop(next(iter(self._reported)))
        log.warning("ignoring a skill or prompt template file", problem=problem)
