"""Slash commands: the gateway's chat commands, skills and prompt templates.

- `chat_commands`: `/stop`, `/new`, `/reset`, `/compact`, `/model`, `/think`, `/status`;
- `skills`: skill folders (`SKILL.md`), the system prompt's list of them, `/skill:<name>`;
- `templates`: prompt templates (`<name>.md`) and their `$1`, `$@` arguments;
- `library`: where an agent's skills and templates are found, kept fresh;
- `inbound`: what a message starting with `/` becomes on its way to the agent;
- `registry`: the `commands.list` answer;
- `extension_commands`: extensions' commands (the registry of `gateway.extensions`);
- `front_matter`: the `---` block at the top of skill and template files.
"""

from gateway.commands.chat_commands import CHAT_COMMANDS, THINKING_LEVELS, parse_slash
from gateway.commands.extension_commands import (
    CommandFailed,
    ExtensionCommand,
    ExtensionCommands,
    RegisteredExtensionCommands,
)
from gateway.commands.inbound import InboundCommands
from gateway.commands.library import Library
from gateway.commands.registry import command_entries
from gateway.commands.skills import Skill, skills_prompt
from gateway.commands.templates import PromptTemplate

__all__ = [
    "CHAT_COMMANDS",
    "THINKING_LEVELS",
    "CommandFailed",
    "ExtensionCommand",
    "ExtensionCommands",
    "InboundCommands",
    "Library",
    "PromptTemplate",
    "RegisteredExtensionCommands",
    "Skill",
    "command_entries",
    "parse_slash",
    "skills_prompt",
]
