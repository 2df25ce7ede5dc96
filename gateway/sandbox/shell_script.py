"""What the static reading of a shell command line found (`shell_syntax.read_script`): the
simple commands with their words and context, the functions defined, and what the reader could
not see through. The mediation rules (`exec_mediation`, `exec_rules`) judge these."""

from __future__ import annotations

from typing import Literal

import msgspec

from gateway.sandbox.shell_words import Word

__all__ = ["Command", "Function", "Redirect", "Script", "Stdin"]

Stdin = Literal["inherited", "pipe", "heredoc", "herestring", "file"]
"""Where a command's standard input comes from."""


class Redirect(msgspec.Struct, frozen=True, dict=True):
    operator: str
    """``>``, ``>>``, ``<``, ``>&``, ``&>``, ``<<``, ``<<<`` ..."""
    target: Word | None
    body: str | None = None
    """The text a here-document or here-string feeds to standard input."""


class Command(msgspec.Struct, dict=True):
    """One simple command with its context. `words` start with the command's name."""

    words: list[Word]
    assignments: list[tuple[str, Word]] = msgspec.field(default_factory=list)
    redirects: list[Redirect] = msgspec.field(default_factory=list)
    cwd: str | None = None
    """Where a preceding ``cd`` moved (absolute, ``~...``, relative, or ``$...`` when unknown);
    ``None`` when still in the directory the line started in."""
    stdin: Stdin = "inherited"
    upstream: list[Command] = msgspec.field(default_factory=list)
    """The commands of the pipeline stages before this one (they feed its standard input)."""
    in_loop: bool = False
    background: bool = False
    in_function: bool = False
    in_substitution: bool = False
    indirect_name: bool = False
    """The name is (part of) an expansion or substitution: ``$c``, ``${x}y``, ``$(echo rm)``."""
    substitutions: list[Command] = msgspec.field(default_factory=list)
    """The commands of the substitutions in its words, whose output it consumes."""

    @property
    def name(self) -> str:
        """The command's name without directories (``/bin/rm`` is ``rm``); empty when none."""
        if not self.words:
            return ""
        text = self.words[0].text
        return text.rsplit("/", 1)[-1] if "/" in text and not text.endswith("/") else text

    @property
    def args(self) -> list[str]:
        return [word.text for word in self.words[1:]]

    def stdin_text(self) -> str | None:
        """What a here-document or here-string feeds this command, if anything."""
        for redirect in self.redirects:
            if redirect.body is not None:
                return redirect.body
        return None


class Function(msgspec.Struct, dict=True):
    name: str
    calls_itself: bool = False
    spawns_itself: bool = False
    """A call to itself runs in the background or in a pipeline: every call starts more."""


class Script(msgspec.Struct, dict=True):
    commands: list[Command] = msgspec.field(default_factory=list)
    functions: list[Function] = msgspec.field(default_factory=list)
    spawning_loops: list[str] = msgspec.field(default_factory=list)
    """Loops whose body starts background jobs, as written."""
    errors: list[str] = msgspec.field(default_factory=list)
    """Parts of the line the grammar could not parse, as written."""
