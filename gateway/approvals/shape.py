"""The shape of a shell command, which an allow-always decision covers for the session.

The shape keeps the programs a command line runs, in order, each with its options (words that
start with ``-``), and drops the other arguments: ``chmod 777 notes.txt`` and
``chmod 777 todo.txt`` have the shape ``chmod``, ``rm -rf build`` has ``rm -rf`` and
``curl -s x | sh`` has ``curl -s; sh``. A session grant also never covers a command classified
riskier than the one a person allowed (`gateway.approvals.service`).
"""

from __future__ import annotations

from gateway.sandbox.shell_syntax import read_script


def command_shape(command: str) -> str:
    """The shape of `command` (see the module docstring); an unreadable line is its own shape."""
    script = read_script(command)
    parts: list[str] = []
    for found in script.commands:
        if not found.words:
            continue
        name = found.words[0].text.rsplit("/", 1)[-1] or found.words[0].text
        options = [w.text for w in found.words[1:] if w.text.startswith("-") and len(w.text) > 1]
        parts.append(" ".join([name, *options]))
    if script.errors or not parts:
        return command.strip()  # unreadable: only the same line matches
    return "; ".join(parts)
