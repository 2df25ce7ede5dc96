"""The gateway's own chat commands, answered without the model.

A message whose whole text is one of these commands runs it (`parse_slash` reads `/name args`;
an optional `:` may follow the name, as in `/think: high`):

- `/stop`: abort the session's run (and its sub-agents' runs);
- `/new`, `/reset`: point the session key at a new, empty session (the old one is archived and
  stays in the tree, and gets the reply); text after the command is sent to the new session as
  its first message;
- `/compact`: summarise the older history now;
- `/model [provider/model]`: show, or set, the session's model;
- `/think [level]`: show, or set, the session's thinking level;
- `/status`: a short status of the session.

A handler gets the call (`CommandCall`: the session key, the session it named when the command
arrived, the arguments) and the gateway (`CommandContext`), does what the command says, and
returns the reply (`Reply`: its text, the session it belongs in, and a message to send after).
A refused argument (an unknown model or level) is answered with what is wrong; nothing changes.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Literal, get_args

import msgspec

from agent_core import ThinkingLevel
from sessions import AgentDirectory, CompactionError, SessionManager, SessionRecord, SessionsError

__all__ = [
    "CHAT_COMMANDS",
    "THINKING_LEVELS",
    "ChatCommand",
    "CommandArg",
    "CommandCall",
    "CommandContext",
    "FollowUp",
    "Reply",
    "Slash",
    "parse_slash",
]

THINKING_LEVELS: tuple[str, ...] = get_args(ThinkingLevel)
Category = Literal["session", "options", "status"]

_SLASH = re.compile(r"^/(?P<token>[^\s/][^\s]*)(?:\s+(?P<rest>.*))?$", re.DOTALL)
_NAME = re.compile(r"^[A-Za-z][\w.-]*$")


class Slash(msgspec.Struct, frozen=True):
    """A message that starts with `/name`: the name as typed (`skill:<name>` for a skill) and
    the rest of the text."""

    name: str
    args: str

    @property
    def skill(self) -> str | None:
        """The skill a `/skill:<name>` message names."""
        prefix, colon, rest = self.name.partition(":")
        return rest if colon and prefix.lower() == "skill" and rest else None


def parse_slash(text: str) -> Slash | None:
    """`/name args` (also `/name: args` and `/name:args`), or None when `text` does not start
    with a command name."""
    match = _SLASH.match(text.strip())
    if match is None:
        return None
    token, rest = match["token"], (match["rest"] or "").strip()
    if token.lower().startswith("skill:"):
        return Slash(token, rest)
    name, colon, inline = token.partition(":")
    if not _NAME.match(name):
        return None
    if colon:
        rest = f"{inline} {rest}".strip()
    return Slash(name, rest)


class CommandCall(msgspec.Struct, frozen=True):
    key: str
    """The session key the message was sent to."""
    session: SessionRecord
    """The session the key named when the command arrived."""
    args: str


class FollowUp(msgspec.Struct, frozen=True):
    """A message to send once the reply is out: `/new <text>` sends `text` to the new session."""

    session_id: str
    text: str


class Reply(msgspec.Struct, frozen=True):
    text: str
    session_id: str
    """The session the reply belongs in: the one the key named when the command arrived."""
    then_send: FollowUp | None = None


class CommandContext(msgspec.Struct, frozen=True):
    """What commands use of the running gateway."""

    manager: SessionManager
    directory: Callable[[], AgentDirectory]
    """The current agent directory (a config reload replaces it)."""
    notify: Callable[[str, str], None]
    """`(session_id, reason)`: a session's row changed (`sessions.changed`)."""


Handler = Callable[[CommandCall, CommandContext], Awaitable[Reply]]


class CommandArg(msgspec.Struct, frozen=True):
    name: str
    description: str
    required: bool = False
    choices: tuple[str, ...] = ()


class ChatCommand(msgspec.Struct, frozen=True):
    name: str
    description: str
    category: Category
    run: Handler
    args: tuple[CommandArg, ...] = ()

    @property
    def accepts_args(self) -> bool:
        return bool(self.args)


# --- the commands --------------------------------------------------------------------------------


async def _stop(call: CommandCall, ctx: CommandContext) -> Reply:
    stopped = await ctx.manager.abort(call.session.id)
    text = "Stopped the run." if stopped else "Nothing is running."
    return Reply(text, call.session.id)


async def _new(call: CommandCall, ctx: CommandContext) -> Reply:
    manager = ctx.manager
    old = call.session
    await manager.abort(old.id)

    async def rotate() -> SessionRecord:
        return await manager.store.tree.reset(call.key)

    fresh = await manager.on_lane(old.id, rotate)
    manager.forget(old.id)
    ctx.notify(fresh.id, "reset")
    text = f"Started a new session for {call.key}. This one stays in the session tree."
    # Answered here, where it was typed; what follows the command opens the new session.
    return Reply(text, old.id, then_send=FollowUp(fresh.id, call.args) if call.args else None)


async def _compact(call: CommandCall, ctx: CommandContext) -> Reply:
    try:
        result = await ctx.manager.compact(call.session.id)
    except CompactionError as exc:
        return Reply(f"Nothing was compacted: {exc}", call.session.id)
    text = f"Compacted: about {result.tokens_before:,} tokens of earlier history are now a summary."
    return Reply(text, call.session.id)


async def _model(call: CommandCall, ctx: CommandContext) -> Reply:
    session = await _fresh(call, ctx)
    directory = ctx.directory()
    if not call.args:
        own = session.model is not None
        current = session.model or directory.profile(session.agent_id).model or "none"
        where = "set for this session" if own else "the agent's default"
        return Reply(f"Model: {current} ({where}). Change it with /model <provider/model>.", session.id)
    ref = call.args.split()[0]
    try:
        model = directory.resolve_model(ref)
    except Exception as exc:
        reason = str(exc).split(". Known models:", 1)[0].rstrip(".")
        return Reply(f"The model stays as it was: {reason}.", session.id)
    chosen = f"{model.provider}/{model.id}"
    await ctx.manager.store.tree.update_session(session.id, model=chosen)
    ctx.notify(session.id, "patch")
    return Reply(f"Model set to {chosen}.", session.id)


async def _think(call: CommandCall, ctx: CommandContext) -> Reply:
    session = await _fresh(call, ctx)
    if not call.args:
        level = session.thinking_level or ctx.directory().profile(session.agent_id).thinking_level
        return Reply(
            f"Thinking level: {level}. Change it with /think <{'|'.join(THINKING_LEVELS)}>.", session.id
        )
    level = call.args.split()[0].lower()
    if level not in THINKING_LEVELS:
        levels = ", ".join(THINKING_LEVELS)
        return Reply(
            f"Unknown thinking level {level!r}; the level stays as it was. Levels: {levels}.", session.id
        )
    await ctx.manager.store.tree.update_session(session.id, thinking_level=level)
    ctx.notify(session.id, "patch")
    text = "Thinking is off." if level == "off" else f"Thinking level set to {level}."
    return Reply(text, session.id)


async def _status(call: CommandCall, ctx: CommandContext) -> Reply:
    session = await _fresh(call, ctx)
    profile = ctx.directory().profile(session.agent_id)
    running = bool(ctx.manager.active_run_ids(session.id))
    model = session.model or profile.model or "none"
    thinking = session.thinking_level or profile.thinking_level
    queue = session.queue_mode or profile.queue_mode
    lines = [
        f"Session {call.key} ({session.id}): {'a run is in progress' if running else session.status}",
        f"Agent {session.agent_id} · model {model} · thinking {thinking} · queue {queue}",
        f"Tokens: {session.input_tokens:,} in · {session.output_tokens:,} out · "
        f"{session.total_tokens:,} total · cost ${session.cost:.4f}",
    ]
    return Reply("\n".join(lines), session.id)


async def _fresh(call: CommandCall, ctx: CommandContext) -> SessionRecord:
    record = await ctx.manager.store.tree.get_session(call.session.id)
    if record is None:
        raise SessionsError(f"the session {call.session.id} no longer exists")
    return record


_LEVEL_ARG = CommandArg("level", "How much the model thinks before it answers", choices=THINKING_LEVELS)

CHAT_COMMANDS: Mapping[str, ChatCommand] = {
    command.name: command
    for command in (
        ChatCommand("stop", "Stop the run in progress", "session", _stop),
        ChatCommand(
            "new",
            "Start a new session for this conversation (text after it is its first message)",
            "session",
            _new,
            (CommandArg("message", "The new session's first message"),),
        ),
        ChatCommand(
            "reset",
            "Start this conversation over in a new session (same as /new)",
            "session",
            _new,
            (CommandArg("message", "The new session's first message"),),
        ),
        ChatCommand("compact", "Summarise the older history to free context", "session", _compact),
        ChatCommand(
            "model",
            "Show or set this session's model",
            "options",
            _model,
            (CommandArg("model", "provider/model, e.g. anthropic/claude-sonnet-4-5"),),
        ),
        ChatCommand("think", "Show or set this session's thinking level", "options", _think, (_LEVEL_ARG,)),
        ChatCommand("status", "Show this session's status: model, settings, tokens", "status", _status),
    )
}
"""The built-in chat commands by name (names are matched without regard to case)."""
