"""Slash commands of extensions, as the gateway's message handling runs them.

`ExtensionCommands` is the seam: what `InboundCommands` needs of whatever provides extension
commands. `RegisteredExtensionCommands` provides it from the extensions' command registry
(`gateway.extensions.registered_commands()`), so a command an enabled extension registered is
listed by `commands.list` (source `plugin`), completed by the dashboard, and run when a message
is `/name args`, its reply going where a model reply would. The gateway's own chat commands win
a name both have.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import msgspec

from gateway.extensions import CommandContext, registered_commands
from gateway.extensions.errors import ExtensionCommandError

__all__ = ["CommandFailed", "ExtensionCommand", "ExtensionCommands", "RegisteredExtensionCommands"]


class CommandFailed(Exception):
    """A command failed; its message is the one line the user sees."""


class ExtensionCommand(Protocol):
    """One command as the gateway lists it."""

    @property
    def name(self) -> str:
        """What follows the slash."""
        ...

    @property
    def description(self) -> str: ...

    @property
    def accepts_args(self) -> bool: ...


class ExtensionCommands(Protocol):
    def registered_commands(self) -> Iterable[ExtensionCommand]:
        """The commands there are now."""
        ...

    async def run_command(
        self, name: str, args: str, *, session_key: str, session_id: str, agent_id: str
    ) -> str:
        """Run `name` for the session `session_key` names; the reply's text. Raises
        CommandFailed (one line for the user); anything else is reported as a failure."""
        ...


class _Listed(msgspec.Struct, frozen=True):
    name: str
    description: str
    accepts_args: bool = True
    """An extension's handler gets whatever text follows its name."""


class RegisteredExtensionCommands:
    """`ExtensionCommands` over the commands enabled extensions registered."""

    def registered_commands(self) -> list[_Listed]:
        return [_Listed(command.name, command.description) for command in registered_commands()]

    async def run_command(
        self, name: str, args: str, *, session_key: str, session_id: str, agent_id: str
    ) -> str:
        command = next((c for c in registered_commands() if c.name == name), None)
        if command is None:
            raise CommandFailed(f"/{name} is no longer available (its extension was disabled)")
        context = CommandContext(args=args, session_key=session_key, session_id=session_id, agent_id=agent_id)
        try:
            return await command.run(context)
        except ExtensionCommandError as exc:
            raise CommandFailed(str(exc)) from exc
