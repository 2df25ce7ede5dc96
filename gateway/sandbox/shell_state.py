"""What the reader of a command line (`shell_syntax`) knows as it walks the line: the context each
command runs in, and the little shell state a static reader can follow (variables given literal
values, the directory a ``cd`` moved to)."""

from __future__ import annotations

import posixpath

import msgspec

from gateway.sandbox.shell_script import Command, Function, Stdin
from gateway.sandbox.shell_words import Word


class ShellContext(msgspec.Struct, frozen=True, dict=True):
    """Where a command runs: its standard input, the pipeline stages before it, and whether it
    runs in a loop, in the background, in a function, in a substitution or in a pipeline."""

    stdin: Stdin = "inherited"
    upstream: tuple[Command, ...] = ()
    in_loop: bool = False
    background: bool = False
    function: Function | None = None
    in_substitution: bool = False
    in_pipeline: bool = False


class ShellState(msgspec.Struct, dict=True):
    """What the shell knows while it runs the line; copied for subshells."""

    variables: dict[str, Word] = msgspec.field(default_factory=dict)
    cwd: str | None = None

    def copy(self) -> ShellState:
        """A copy for a subshell, whose changes do not reach this state."""
        return ShellState(dict(self.variables), self.cwd)


def moved_to(cwd: str | None, target: Word) -> str | None:
    """The directory after ``cd target`` from `cwd`."""
    if target.dynamic:
        return "$" + target.text.lstrip("$")
    path = target.text
    if path.startswith(("/", "~")):
        return posixpath.normpath(path) if path.startswith("/") else path
    if cwd is None:
        normal = posixpath.normpath(path)
        return None if normal == "." else normal
    return posixpath.normpath(posixpath.join(cwd, path))
