"""`gateway.commands.extension_commands`: extensions' registered commands as the gateway lists
and runs them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.commands import CommandFailed, RegisteredExtensionCommands
from gateway.extensions.command_registry import (
    CommandContext,
    ExtensionCommand,
    add_command,
    remove_commands,
)


@pytest.fixture
def registered() -> Iterator[list[CommandContext]]:
    seen: list[CommandContext] = []

    async def deploy(context: CommandContext) -> str:
        seen.append(context)
        if context.args == "boom":
            raise ValueError("no target")
        return f"deploying {context.args}"

    add_command(ExtensionCommand(name="deploy", description="Deploy it", extension="ops", handler=deploy))
    try:
        yield seen
    finally:
        remove_commands("ops")


async def test_listed_and_run_with_the_session_they_were_typed_in(registered: list[CommandContext]) -> None:
    commands = RegisteredExtensionCommands()
    [listed] = [c for c in commands.registered_commands() if c.name == "deploy"]
    assert (listed.description, listed.accepts_args) == ("Deploy it", True)

    reply = await commands.run_command("deploy", "prod", session_key="k", session_id="s", agent_id="main")

    assert reply == "deploying prod"
    assert registered == [CommandContext(args="prod", session_key="k", session_id="s", agent_id="main")]


async def test_a_failure_or_a_vanished_command_is_one_line(registered: list[CommandContext]) -> None:
    commands = RegisteredExtensionCommands()
    with pytest.raises(CommandFailed, match=r"^/deploy failed in extension ops: ValueError: no target$"):
        await commands.run_command("deploy", "boom", session_key="k", session_id="s", agent_id="main")
    remove_commands("ops")
    with pytest.raises(CommandFailed, match="no longer available"):
        await commands.run_command("deploy", "x", session_key="k", session_id="s", agent_id="main")
