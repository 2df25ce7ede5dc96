"""Slash commands registered by enabled Python extensions, for the chat-command layer to read.

The registry lives for the process. The extension host adds an extension's commands when it
loads the extension and removes them when the extension is disabled; `registered_commands()` is
what `commands.list` and the chat-command dispatcher read (a snapshot, sorted by name).
A command's handler is the extension's code: run it with `ExtensionCommand.run`, which contains
its failures.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TypeAlias

import msgspec
import structlog

from gateway.extensions.errors import ExtensionApiError, ExtensionCommandError

log = structlog.get_logger("gateway.extensions")

COMMAND_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
COMMAND_NAME_RULE = "1-32 characters of a-z, 0-9, '_' or '-', starting with a letter or digit"


class CommandContext(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    """One use of a slash command: `/name args...` in a session."""

    args: str
    """The text after the command's name, stripped."""
    session_key: str | None = None
    session_id: str | None = None
    agent_id: str | None = None


CommandHandler: TypeAlias = Callable[[CommandContext], Awaitable[str]]
"""What an extension's command does: the reply text for the user."""


class ExtensionCommand(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    """A slash command an extension registered."""

    name: str
    """Without the leading `/`."""
    description: str
    extension: str
    """The extension that registered it."""
    handler: CommandHandler

    async def run(self, context: CommandContext) -> str:
        """The command's reply. Raises ExtensionCommandError (one line) when the extension's
        handler raises or returns something that is not text; the traceback is logged."""
        try:
            reply = await self.handler(context)
        except Exception as exc:
            log.exception("extension command failed", extension=self.extension, command=self.name)
            raise ExtensionCommandError(
                f"/{self.name} failed in extension {self.extension}: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(reply, str):
            raise ExtensionCommandError(
                f"/{self.name} of extension {self.extension} answered {type(reply).__name__}, not text"
            )
        return reply


_COMMANDS: dict[str, ExtensionCommand] = {}


def registered_commands() -> tuple[ExtensionCommand, ...]:
    """The slash commands of the enabled extensions, sorted by name."""
    return tuple(_COMMANDS[name] for name in sorted(_COMMANDS))


def add_command(command: ExtensionCommand) -> None:
    """Register `command`. Raises ExtensionApiError for a bad name or one already taken."""
    if not COMMAND_NAME.match(command.name):
        raise ExtensionApiError(f"command name {command.name!r}: a command name is {COMMAND_NAME_RULE}")
    taken = _COMMANDS.get(command.name)
    if taken is not None:
        raise ExtensionApiError(
            f"command /{command.name} is already registered by extension {taken.extension}"
        )
    _COMMANDS[command.name] = command


def remove_commands(extension: str) -> None:
    """Forget every command of `extension` (disabled, or its loading failed half-way)."""
    for name in [name for name, command in _COMMANDS.items() if command.extension == extension]:
        del _COMMANDS[name]
