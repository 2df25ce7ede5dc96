"""The public API of Python extensions: what an extension's `register` function receives.

An extension is a module (or package) with a function ``register(ext: Extension) -> None``. It is
found through the entry-point group ``agent_gateway.extensions`` (the entry point names the module
or the function) or as ``<home>/extensions/<name>.py`` / ``<home>/extensions/<name>/__init__.py``.
It is imported only once an operator has enabled it (``gatewayctl extensions enable NAME``).
In `register` it declares what it adds; the gateway applies that while the extension is enabled
and withdraws it when the extension is disabled::

    from typing import Any

    from gateway.extensions.extension_api import Extension, ToolCallStart, ToolContext

    def register(ext: Extension) -> None:
        @ext.tool(
            "shout",
            "Repeat the text in capitals.",
            {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        )
        async def shout(args: dict[str, Any], ctx: ToolContext) -> str:
            return args["text"].upper()

        @ext.before_tool_call
        async def no_rm(call: ToolCallStart) -> Block | None:
            if call.tool_name == "bash" and "rm " in str(call.args.get("command")):
                return Block("this gateway does not delete files")
            return None

What an extension can add:

- tools (`tool`): the model sees them by the given name and calls them like the built-in tools,
  through the same pipeline (the agent's allow and deny lists, hooks, abort). A handler returns
  text or an `AgentToolResult`; raising makes the call an error result with the message.
- hooks: `on_run_start`, `on_run_end`, `on_message_start`, `on_message_end` are told about every
  session's runs and messages once the gateway has recorded them (in order, one at a time, after
  the fact: they cannot change what happened). `before_tool_call` may block a call;
  `after_tool_call` may replace a call's result. Hooks may be plain or async functions.
- slash commands (`command`): `/name args` typed in a session; the reply is text.
- model providers (`provider`): a stream function for a new `api`; models using it are added
  with `[[models]]` in the configuration (`api = "<the api>"`).

Failures are contained: an exception in `register` leaves the extension unloaded (logged, shown by
`gatewayctl extensions list`); an exception in a hook is logged and the hook skipped; an exception
in a tool is the call's error result. Extension code runs in the daemon's process with its rights
(that is why it must be enabled by an operator): a hook that blocks the event loop stalls the
gateway, so do blocking work in a thread (`asyncio.to_thread`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar

import structlog

from agent_core import AbortSignal, AgentToolResult, ImageContent, Model, StreamFn, TextContent
from gateway.extensions.command_registry import (
    COMMAND_NAME,
    COMMAND_NAME_RULE,
    CommandContext,
    CommandHandler,
)
from gateway.extensions.errors import ExtensionApiError

__all__ = [
    "AgentToolResult",
    "Block",
    "CommandContext",
    "CommandHandler",
    "Extension",
    "ImageContent",
    "MessageEnd",
    "MessageStart",
    "RunEnd",
    "RunStart",
    "TextContent",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolContext",
    "ToolHandler",
]

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
TOOL_NAME_RULE = "1-64 letters, digits, '_' or '-'"


# --- tools ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """One call of an extension's tool."""

    session_id: str
    agent_id: str
    tool_call_id: str
    signal: AbortSignal | None
    """Aborted when the run is aborted: stop work and return or raise."""
    update: Callable[[str], None]
    """Show progress text while the tool runs (a tool update event; the dashboard shows it)."""


ToolHandler: TypeAlias = Callable[[dict[str, Any], ToolContext], Awaitable[str | AgentToolResult]]
"""An extension's tool: validated arguments in, text or a result out; raise to fail the call."""


@dataclass(frozen=True, kw_only=True)
class ExtensionTool:
    name: str
    description: str
    parameters: dict[str, Any]
    handler: ToolHandler


# --- hooks ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RunStart:
    session_id: str
    session_key: str | None
    run_id: str | None


@dataclass(frozen=True, kw_only=True)
class RunEnd:
    session_id: str
    session_key: str | None
    run_id: str | None
    termination_reason: str
    """`no_tool_calls` (a normal end), `aborted`, `error`, `max_duration`, ..."""
    error_message: str | None


@dataclass(frozen=True, kw_only=True)
class MessageStart:
    session_id: str
    session_key: str | None
    run_id: str | None
    message_id: str
    role: str


@dataclass(frozen=True, kw_only=True)
class MessageEnd:
    session_id: str
    session_key: str | None
    run_id: str | None
    message_id: str
    message: Mapping[str, Any]
    """The whole message as the transcript stores it (`role`, `content`, ...); read-only."""


@dataclass(frozen=True, kw_only=True)
class ToolCallStart:
    session_id: str
    agent_id: str
    tool_call_id: str
    tool_name: str
    args: Mapping[str, Any]
    """The validated arguments; read-only."""


@dataclass(frozen=True, kw_only=True)
class ToolCallEnd:
    session_id: str
    agent_id: str
    tool_call_id: str
    tool_name: str
    args: Mapping[str, Any]
    result: AgentToolResult
    is_error: bool


@dataclass(frozen=True)
class Block:
    """What a `before_tool_call` hook returns to refuse a call; the model reads `reason`."""

    reason: str


E = TypeVar("E")
Hook: TypeAlias = Callable[[E], Awaitable[None] | None]
BeforeToolHook: TypeAlias = Callable[[ToolCallStart], Awaitable[Block | None] | Block | None]
AfterToolHook: TypeAlias = Callable[[ToolCallEnd], Awaitable[AgentToolResult | None] | AgentToolResult | None]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, kw_only=True)
class ExtensionCommandSpec:
    name: str
    description: str
    handler: CommandHandler


@dataclass(frozen=True, kw_only=True)
class ProviderSpec:
    api: str
    stream: StreamFn
    stream_simple: StreamFn | None
    models: tuple[Model, ...]


@dataclass(kw_only=True)
class Registrations:
    """Everything one extension's `register` declared (read by the gateway, not by extensions)."""

    tools: list[ExtensionTool] = field(default_factory=list)
    run_start: list[Hook[RunStart]] = field(default_factory=list)
    run_end: list[Hook[RunEnd]] = field(default_factory=list)
    message_start: list[Hook[MessageStart]] = field(default_factory=list)
    message_end: list[Hook[MessageEnd]] = field(default_factory=list)
    before_tool: list[BeforeToolHook] = field(default_factory=list)
    after_tool: list[AfterToolHook] = field(default_factory=list)
    commands: list[ExtensionCommandSpec] = field(default_factory=list)
    providers: list[ProviderSpec] = field(default_factory=list)

    @property
    def has_lifecycle_hooks(self) -> bool:
        return bool(self.run_start or self.run_end or self.message_start or self.message_end)


# --- the object `register` receives -------------------------------------------------------------


class Extension:
    """Handed to an extension's `register(ext)`; every method raises ExtensionApiError when used
    wrongly (the extension then fails to load, with that message)."""

    def __init__(self, name: str) -> None:
        self.name = name
        """The extension's name (its entry point's or file's name)."""
        self.log = structlog.get_logger(f"gateway.extensions.{name}")
        """A logger whose lines name the extension."""
        self._registered = Registrations()
        self._sealed = False

    def tool(
        self, name: str, description: str, parameters: Mapping[str, Any] | None = None
    ) -> Callable[[ToolHandler], ToolHandler]:
        """Decorator: add a tool `name` whose arguments follow the JSON Schema `parameters`
        (an object schema; default: no arguments)."""
        self._check_open()
        if not TOOL_NAME.match(name):
            raise ExtensionApiError(f"tool name {name!r}: a tool name is {TOOL_NAME_RULE}")
        if any(tool.name == name for tool in self._registered.tools):
            raise ExtensionApiError(f"tool {name!r} is registered twice")
        schema = dict(parameters) if parameters is not None else {"type": "object", "properties": {}}
        if schema.get("type") != "object":
            raise ExtensionApiError(f'tool {name!r}: parameters must be a JSON Schema with "type": "object"')

        def decorate(handler: ToolHandler) -> ToolHandler:
            self._registered.tools.append(
                ExtensionTool(name=name, description=description, parameters=schema, handler=handler)
            )
            return handler

        return decorate

    def on_run_start(self, hook: F) -> F:
        """Decorator: `hook(RunStart)` after a run of any session has started."""
        self._check_open()
        self._registered.run_start.append(hook)
        return hook

    def on_run_end(self, hook: F) -> F:
        """Decorator: `hook(RunEnd)` after a run has ended (however it ended)."""
        self._check_open()
        self._registered.run_end.append(hook)
        return hook

    def on_message_start(self, hook: F) -> F:
        """Decorator: `hook(MessageStart)` when a message (user, assistant, tool result) starts."""
        self._check_open()
        self._registered.message_start.append(hook)
        return hook

    def on_message_end(self, hook: F) -> F:
        """Decorator: `hook(MessageEnd)` once a message is complete and recorded."""
        self._check_open()
        self._registered.message_end.append(hook)
        return hook

    def before_tool_call(self, hook: F) -> F:
        """Decorator: `hook(ToolCallStart) -> Block | None` before any tool runs; a `Block`
        refuses the call (the model reads its reason)."""
        self._check_open()
        self._registered.before_tool.append(hook)
        return hook

    def after_tool_call(self, hook: F) -> F:
        """Decorator: `hook(ToolCallEnd) -> AgentToolResult | None` after any tool ran; a result
        replaces the call's result."""
        self._check_open()
        self._registered.after_tool.append(hook)
        return hook

    def command(self, name: str, description: str) -> Callable[[CommandHandler], CommandHandler]:
        """Decorator: a slash command `/name`; the handler gets a `CommandContext` and returns
        the reply text."""
        self._check_open()
        if not COMMAND_NAME.match(name):
            raise ExtensionApiError(f"command name {name!r}: a command name is {COMMAND_NAME_RULE}")

        def decorate(handler: CommandHandler) -> CommandHandler:
            self._registered.commands.append(
                ExtensionCommandSpec(name=name, description=description, handler=handler)
            )
            return handler

        return decorate

    def provider(
        self,
        api: str,
        stream: StreamFn,
        *,
        stream_simple: StreamFn | None = None,
        models: Sequence[Model] = (),
    ) -> None:
        """A model provider: `stream` answers every model whose `api` is `api` (see
        `agent_core.providers`: it returns an `AssistantMessageEventStream` and never raises).
        `models` are added to the model catalogue; more can come from `[[models]]`."""
        self._check_open()
        if not api or any(spec.api == api for spec in self._registered.providers):
            raise ExtensionApiError(f"provider api {api!r} is empty or registered twice")
        self._registered.providers.append(
            ProviderSpec(api=api, stream=stream, stream_simple=stream_simple, models=tuple(models))
        )

    # --- for the gateway ---------------------------------------------------------------------------

    def seal(self) -> Registrations:
        """End registration (after `register` returned) and hand over what was declared."""
        self._sealed = True
        return self._registered

    def _check_open(self) -> None:
        if self._sealed:
            raise ExtensionApiError(
                f"extension {self.name}: register tools, hooks, commands and providers inside register()"
            )
