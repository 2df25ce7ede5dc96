"""Extensions' slash commands: the registry the chat-command layer reads."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.extensions import CommandContext, ExtensionCommand, registered_commands
from gateway.extensions.command_registry import add_command, remove_commands
from gateway.extensions.errors import ExtensionApiError, ExtensionCommandError


@pytest.fixture(autouse=True)
def empty() -> Iterator[None]:
    yield
    for command in registered_commands():
        remove_commands(command.extension)


async def _echo(ctx: CommandContext) -> str:
    return f"echo {ctx.args}"


async def _broken(ctx: CommandContext) -> str:
    raise KeyError("oops")


def test_commands_are_listed_by_name_and_withdrawn_with_their_extension() -> None:
    add_command(ExtensionCommand(name="zeta", description="z", extension="a", handler=_echo))
    add_command(ExtensionCommand(name="alpha", description="a", extension="b", handler=_echo))
    assert [command.name for command in registered_commands()] == ["alpha", "zeta"]
    with pytest.raises(ExtensionApiError, match="already registered by extension a"):
        add_command(ExtensionCommand(name="zeta", description="z", extension="b", handler=_echo))
    remove_commands("a")
    assert [command.name for command in registered_commands()] == ["alpha"]


async def test_running_a_command_contains_its_failure() -> None:
    ok = ExtensionCommand(name="echo", description="", extension="demo", handler=_echo)
    assert await ok.run(CommandContext(args="hi")) == "echo hi"
    broken = ExtensionCommand(name="broken", description="", extension="demo", handler=_broken)
    with pytest.raises(ExtensionCommandError, match=r"^/broken failed in extension demo: KeyError: 'oops'$"):
        await broken.run(CommandContext(args=""))
