"""What `commands.list` answers: every slash command a message to an agent may start with.

Entries have OpenClaw's `CommandEntry` shape (`name`, `description`, `source`, `scope`,
`acceptsArgs`, and `textAliases`, `category`, `args` where they apply):

- the gateway's chat commands: source `native`;
- skills, as `skill:<name>`: source `skill` (`skillModelVisible` says whether the system prompt
  lists them);
- prompt templates: source `skill` as well (like a skill command, a template becomes a prompt
  for the model), `skillModelVisible: false`;
- extensions' commands: source `plugin`.

A name taken by an earlier kind is not listed again (the gateway's commands first, then
extensions, then templates), as a message with that name runs the earlier one. Every command is
typed as text (`scope` `text`); the bindings register no platform-native commands.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

from gateway.commands.chat_commands import CHAT_COMMANDS, ChatCommand
from gateway.commands.extension_commands import ExtensionCommand
from gateway.commands.skills import Skill
from gateway.commands.templates import PromptTemplate

__all__ = ["MAX_ENTRIES", "command_entries"]

MAX_ENTRIES = 500
"""The most entries an answer holds (OpenClaw's limit)."""
MAX_DESCRIPTION = 2000

Scope = Literal["text", "native", "both"]


def command_entries(
    *,
    skills: Sequence[Skill],
    templates: Sequence[PromptTemplate],
    extensions: Iterable[ExtensionCommand] = (),
    scope: Scope | None = None,
    include_args: bool = False,
) -> list[dict[str, Any]]:
    """The `commands` of a `commands.list` answer. `scope` `native` lists nothing (no command is
    native to a platform); `include_args` adds each command's `args`."""
    if scope == "native":
        return []
    entries: list[dict[str, Any]] = []
    taken: set[str] = set()
    for command in CHAT_COMMANDS.values():
        entries.append(_chat_entry(command, include_args))
        taken.add(command.name)
    for extension in extensions:
        if extension.name in taken:
            continue
        taken.add(extension.name)
        entries.append(_entry(extension.name, extension.description, "plugin", extension.accepts_args))
    for template in templates:
        if template.name in taken or template.name.lower() in CHAT_COMMANDS:
            continue
        taken.add(template.name)
        entry = _entry(template.name, template.description, "skill", True)
        entry["skillModelVisible"] = False
        if include_args:
            entry["args"] = [{"name": "arguments", "description": "Fill $1, $2, … and $@", "type": "string"}]
        entries.append(entry)
    for skill in skills:
        entry = _entry(f"skill:{skill.name}", skill.description, "skill", True)
        entry["skillDisplayName"] = skill.name
        entry["skillModelVisible"] = skill.model_visible
        if include_args:
            entry["args"] = [{"name": "input", "description": "What to do with the skill", "type": "string"}]
        entries.append(entry)
    return entries[:MAX_ENTRIES]


def _entry(name: str, description: str, source: str, accepts_args: bool) -> dict[str, Any]:
    return {
        "name": name,
        "textAliases": [f"/{name}"],
        "description": description[:MAX_DESCRIPTION],
        "source": source,
        "scope": "text",
        "acceptsArgs": accepts_args,
    }


def _chat_entry(command: ChatCommand, include_args: bool) -> dict[str, Any]:
    entry = _entry(command.name, command.description, "native", command.accepts_args)
    entry["category"] = command.category
    if include_args and command.args:
        args: list[dict[str, Any]] = []
        for arg in command.args:
            spec: dict[str, Any] = {
                "name": arg.name,
                "description": arg.description,
                "type": "string",
                "required": arg.required,
            }
            if arg.choices:
                spec["choices"] = [{"value": choice, "label": choice} for choice in arg.choices]
            args.append(spec)
        entry["args"] = args
    return entry
