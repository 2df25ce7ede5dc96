"""`InboundCommands`: what a message that starts with `/` becomes before it reaches the agent.

Every surface that sends messages (`chat.send`, `sessions.send`, `agent`, the chat bindings)
submits through `submit`, which looks at a message whose text (no images) starts with `/name`:

1. a chat command of the gateway (`gateway.commands.chat_commands`) or of an extension
   (`gateway.commands.extension_commands`) is answered by the gateway: the input is recorded
   (`SessionManager.accept_answer`) and the sender answered `started` as for any message; the
   command then runs in the background and its reply is published as the run of that input in
   the session the key named when it arrived, under that key (`SessionManager.answer`), so it
   shows where a model's reply would;
2. `/skill:<name> args` becomes the skill's body and the arguments (`skills.skill_message`);
3. `/<template> args` becomes the expanded prompt template (`templates`);
4. anything else, an unknown `/name` included, goes to the agent as it is.

Command tasks belong to this object: their failures are logged, and `aclose` waits for them a
moment, then cancels what is left (a command cut off that way is closed by recovery as
interrupted at the next start, never run twice).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import msgspec
import structlog

from agent_core import ImageContent, TextContent, UserMessage
from gateway.background import Background
from gateway.commands.chat_commands import (
    CHAT_COMMANDS,
    ChatCommand,
    CommandCall,
    CommandContext,
    FollowUp,
    Reply,
    Slash,
    parse_slash,
)
from gateway.commands.extension_commands import CommandFailed, ExtensionCommand, ExtensionCommands
from gateway.commands.library import Library
from gateway.commands.registry import Scope, command_entries
from gateway.commands.skills import SkillError, skill_message
from sessions import (
    AgentDirectory,
    SessionManager,
    SessionRecord,
    SessionsError,
    StoreUnavailable,
    SubmitResult,
)
from sessions.ids import new_id

__all__ = ["CLOSE_GRACE_S", "InboundCommands"]

log = structlog.get_logger("gateway.commands")

CLOSE_GRACE_S = 5.0
"""How long `aclose` lets running commands finish before it cancels them."""

Message = str | UserMessage


class LibraryDirectory(AgentDirectory, Protocol):
    """An agent directory that also knows the agents' skills and templates
    (`gateway.directory.Directory`)."""

    library: Library


class _Run(msgspec.Struct, frozen=True):
    """One accepted command, on its way to its reply."""

    name: str
    call: CommandCall
    idempotency_key: str
    source: dict[str, Any] | None
    started: float


class InboundCommands:
    def __init__(
        self,
        *,
        manager: SessionManager,
        directory: Callable[[], LibraryDirectory],
        notify: Callable[[str, str], None],
        extensions: ExtensionCommands | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._manager = manager
        self._directory = directory
        self._context = CommandContext(manager=manager, directory=directory, notify=notify)
        self._clock = clock
        self._tasks = Background("commands")
        self._closing = False
        self.extensions = extensions
        """Where extensions' commands come from (none: only the gateway's own)."""

    @property
    def running(self) -> int:
        """Commands accepted whose reply is not out yet."""
        return len(self._tasks)

    async def submit(
        self,
        *,
        key: str,
        session: SessionRecord,
        message: Message,
        idempotency_key: str,
        queue_mode: str | None = None,
        source: dict[str, Any] | None = None,
    ) -> SubmitResult:
        """Submit one message sent to session key `key` (which names `session`): a command is
        accepted and answered here, anything else goes to the session manager, templates and
        skills expanded. Raises what `SessionManager.submit` raises."""
        slash = _slash_of(message)
        if slash is not None:
            if self._command(slash) is not None or self._extension(slash) is not None:
                call = CommandCall(key=key, session=session, args=slash.args)
                return await self._accept(slash.name, call, message, idempotency_key, source)
            expanded = self.expand(slash, session.agent_id)
            if expanded is not None:
                message = _with_text(message, expanded)
        return await self._manager.submit(
            session=session,
            message=message,
            idempotency_key=idempotency_key,
            queue_mode=queue_mode,
            source=source,
        )

    def expand(self, slash: Slash, agent_id: str) -> str | None:
        """The prompt a `/skill:<name>` or `/<template>` message stands for; None when it names
        neither (or the skill file cannot be read any more: logged)."""
        directory = self._directory()
        workspace = Path(directory.profile(agent_id).workspace or "")
        library = directory.library
        skill_name = slash.skill
        if skill_name is not None:
            skill = library.skill(workspace, skill_name)
            if skill is None:
                return None
            try:
                return skill_message(skill, slash.args)
            except SkillError as exc:
                log.warning("a skill could not be loaded", skill=skill_name, problem=str(exc))
                return None
        template = library.template(workspace, slash.name)
        return template.expand(slash.args) if template is not None else None

    def entries(
        self, agent_id: str, *, scope: Scope | None = None, include_args: bool = False
    ) -> list[dict[str, Any]]:
        """The `commands.list` answer's commands for `agent_id` (`gateway.commands.registry`).
        Raises SessionsError (NotFound) for an unknown agent."""
        directory = self._directory()
        workspace = Path(directory.profile(agent_id).workspace or "")
        return command_entries(
            skills=directory.library.skills(workspace),
            templates=directory.library.templates(workspace),
            extensions=self._extension_commands(),
            scope=scope,
            include_args=include_args,
        )

    async def aclose(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """Refuse new commands, let running ones finish for up to `grace_s`, then cancel the
        rest. Idempotent."""
        self._closing = True
        if len(self._tasks):
            try:
                await asyncio.wait_for(self._tasks.join(), timeout=grace_s)
            except TimeoutError:
                log.warning("commands still running at shutdown were cut off", count=len(self._tasks))
        await self._tasks.aclose()

    # --- commands -----------------------------------------------------------------------------

    def _command(self, slash: Slash) -> ChatCommand | None:
        return CHAT_COMMANDS.get(slash.name.lower())

    def _extension(self, slash: Slash) -> str | None:
        if slash.skill is not None:
            return None
        names = {command.name for command in self._extension_commands()}
        return slash.name if slash.name in names else None

    def _extension_commands(self) -> list[ExtensionCommand]:
        if self.extensions is None:
            return []
        try:
            return list(self.extensions.registered_commands())
        except Exception:
            log.exception("the extensions' commands could not be listed")
            return []

    async def _accept(
        self,
        name: str,
        call: CommandCall,
        message: Message,
        idempotency_key: str,
        source: dict[str, Any] | None,
    ) -> SubmitResult:
        if self._closing:
            raise StoreUnavailable("the gateway is stopping", retry_after_ms=2000)
        result = await self._manager.accept_answer(
            session=call.session, message=message, idempotency_key=idempotency_key, source=source
        )
        if result.status == "started":
            run = _Run(
                name=name,
                call=call,
                idempotency_key=idempotency_key,
                source=source,
                started=self._clock(),
            )
            self._tasks.spawn(self._run(run), name=f"command-{idempotency_key}")
        return result

    async def _run(self, run: _Run) -> None:
        try:
            reply = await self._reply(run)
        except CommandFailed as exc:
            reply = Reply(_one_line(exc), run.call.session.id)
        except Exception as exc:
            log.exception("a chat command failed", command=run.name, key=run.call.key)
            reply = Reply(f"/{run.name} failed: {_one_line(exc)}", run.call.session.id)
        duration_ms = int((self._clock() - run.started) * 1000)
        try:
            await self._manager.answer(
                run.idempotency_key,
                session_id=reply.session_id,
                text=reply.text,
                session_key=run.call.key,
                duration_ms=duration_ms,
            )
        except SessionsError:
            # The run stays open; the next start closes it as interrupted.
            log.exception("a chat command's reply could not be recorded", command=run.name)
            return
        if reply.then_send is not None:
            await self._send_after(run, reply.then_send)

    async def _reply(self, run: _Run) -> Reply:
        command = CHAT_COMMANDS.get(run.name.lower())
        if command is not None:
            return await command.run(run.call, self._context)
        extensions = self.extensions
        if extensions is None:
            raise RuntimeError("the extension that had this command is gone")
        session = run.call.session
        text = await extensions.run_command(
            run.name,
            run.call.args,
            session_key=run.call.key,
            session_id=session.id,
            agent_id=session.agent_id,
        )
        return Reply(text, session.id)

    async def _send_after(self, run: _Run, follow_up: FollowUp) -> None:
        """The text after `/new`: the first message of the new session (as if sent there)."""
        session = await self._manager.store.tree.get_session(follow_up.session_id)
        if session is None:
            return
        await self.submit(
            key=run.call.key,
            session=session,
            message=follow_up.text,
            idempotency_key=f"{run.idempotency_key[:150]}:{new_id()[-12:]}",
            source=run.source,
        )


def _slash_of(message: Message) -> Slash | None:
    if isinstance(message, str):
        return parse_slash(message)
    content = message.content
    if isinstance(content, str):
        return parse_slash(content)
    if any(isinstance(block, ImageContent) for block in content):
        return None
    return parse_slash("".join(block.text for block in content if isinstance(block, TextContent)))


def _with_text(message: Message, text: str) -> Message:
    if isinstance(message, str):
        return text
    return UserMessage(content=[TextContent(text=text)], timestamp=message.timestamp)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:299] + "…"
