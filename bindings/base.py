"""`ChatBinding`: what the Discord and Slack bindings have in common.

A binding owns one main task (started by `start()`, ended by `aclose()`) that runs the reply
relay, the outbox recovery and, in a socket mode, the event worker and the socket shell. Socket
events reach the worker through a bounded queue of `EVENT_QUEUE_SIZE`; when it is full the shell
stops reading, which is the backpressure point: nothing is dropped. In a webhook mode there is no
socket: the binding is ready at once and the webhook app feeds the pipeline.

A platform subclass builds its client, transport and socket protocol, then calls
`ChatBinding.__init__`, and supplies `_streaming` (socket mode or not), `_run_socket_shell`,
`_handle_event`, and the channel tools' `tool_text` and actions (`_react`, `_send_file`).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, Generic, Self, TypeVar

import structlog

from agent_core import AgentTool
from bindings.access import PAIRING_APPROVED_TEXT
from bindings.approvals import (
    NOT_AN_APPROVER,
    ApprovalDecider,
    ApprovalMessage,
    ClickReply,
    answer_click,
    parse_action_id,
)
from bindings.config import AccountConfig
from bindings.host import BindingHost, PairingRequest, Platform, ReplyRoute, outbox_key
from bindings.inbound import InboundPipeline, SessionOrigin
from bindings.outbox import MessageTransport, RelaySettings, ReplyRelay
from bindings.state import ConnectionState, StateMachine, StatusReporter
from bindings.tools import FILE_PARAMETERS, Action, channel_tool
from bindings.ws import Connector

EVENT_QUEUE_SIZE = 1000


@dataclass(frozen=True)
class ChannelToolText:
    """What a platform's channel tools tell the model: the reaction tool's description, its emoji
    parameter (name, description) and the name of its optional message parameter, and the file
    tool's description."""

    react_description: str
    emoji_field: tuple[str, str]
    message_field: str
    file_description: str


ConfigT = TypeVar("ConfigT", bound=AccountConfig)
EventT = TypeVar("EventT")


class ChatBinding(ABC, Generic[ConfigT, EventT]):
    """The lifecycle, event queue and channel tools of one chat platform account.

    `chunk_limit` is the platform's reply chunk size (from the account config); `machine` is the
    socket protocol's state machine (or a fresh one in a webhook mode); `connector` opens the
    socket.
    """

    platform: Platform
    tool_text: ClassVar[ChannelToolText]

    def __init__(
        self,
        config: ConfigT,
        host: BindingHost,
        *,
        account_id: str,
        transport: MessageTransport,
        chunk_limit: int,
        machine: StateMachine,
        connector: Connector,
    ) -> None:
        self.account_id = account_id
        self.binding_id = f"{self.platform}:{account_id}"
        self._log = structlog.get_logger(f"bindings.{self.platform}")
        self._config = config
        self._host = host
        self._transport = transport
        self.relay = ReplyRelay(
            platform=self.platform,
            account_id=account_id,
            transport=transport,
            store=host,
            settings=RelaySettings(chunk_limit=chunk_limit, edit_interval_s=config.edit_interval_s),
        )
        self.pipeline = InboundPipeline(
            platform=self.platform,
            account_id=account_id,
            config=config,
            host=host,
            relay=self.relay,
            transport=transport,
        )
        self.machine = machine
        self._status = StatusReporter(host, self.binding_id)
        self._state_changed = asyncio.Event()
        self.machine.add_listener(self._on_state)
        self._connector = connector
        self._events: asyncio.Queue[EventT] = asyncio.Queue(maxsize=EVENT_QUEUE_SIZE)
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._decider: ApprovalDecider | None = None

    # -- what a platform supplies ------------------------------------------------------------

    @property
    @abstractmethod
    def _streaming(self) -> bool:
        """True in the socket mode (events come through the queue), False in the webhook mode."""

    async def _prepare(self) -> bool:
        """Run before the binding connects; False stops it (the relay keeps running)."""
        return True

    @abstractmethod
    async def _run_socket_shell(self) -> None:
        """Run the socket shell until it ends for good."""

    @abstractmethod
    async def _handle_event(self, event: EventT) -> None:
        """Handle one event from the queue."""

    @abstractmethod
    async def _react(self, origin: SessionOrigin, params: dict[str, Any], tool_call_id: str) -> str:
        """The `<platform>_add_reaction` tool."""

    @abstractmethod
    async def _send_file(self, origin: SessionOrigin, params: dict[str, Any], tool_call_id: str) -> str:
        """The `<platform>_send_file` tool."""

    @abstractmethod
    async def post_approval(self, route: ReplyRoute, approval: dict[str, Any]) -> ApprovalMessage:
        """Post the message with Approve and Deny buttons for a waiting request (its snapshot)
        into the conversation of `route`. Posting twice for one request makes one message.
        Raises what the platform raises."""

    @abstractmethod
    async def show_approval(self, message: ApprovalMessage, approval: dict[str, Any]) -> None:
        """Edit an approval message to show how its request ended (the buttons go). Raises what
        the platform raises."""

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        return self.machine.state

    @property
    def queue_size(self) -> int:
        return self._events.qsize()

    async def start(self) -> None:
        """Start connecting in the background (idempotent). Returns at once; see
        `wait_for_state`."""
        if self._task is None and not self._closed:
            self._task = asyncio.create_task(self._main(), name=self.binding_id)

    async def aclose(self) -> None:
        """Stop every task, unsubscribe from the host, report `closed` (idempotent). Replies in
        flight stay in the outbox and are finished on the next start."""
        if self._closed:
            return
        self._closed = True
        self.pipeline.close()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
            if not task.cancelled() and task.exception() is not None:
                self._log.error(f"{self.platform} binding ended with an error", error=repr(task.exception()))
        if self.machine.state is not ConnectionState.CLOSED:
            self.machine.transition(ConnectionState.CLOSED)

    async def stop(self) -> None:
        """Same as `aclose()`."""
        await self.aclose()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def wait_for_state(self, state: ConnectionState) -> None:
        """Return once the binding is in `state` (bound it with `asyncio.timeout`)."""
        while self.machine.state is not state:
            self._state_changed.clear()
            await self._state_changed.wait()

    def _on_state(self, old: ConnectionState, new: ConnectionState) -> None:
        self._log.info(f"{self.platform} state", binding=self.binding_id, old=old.value, new=new.value)
        self._status.state_changed(new)
        self._state_changed.set()

    async def _main(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._relay())
            if not await self._prepare():
                return
            if self._streaming:
                tg.create_task(self._event_worker())
                tg.create_task(self._run_socket_shell())
            else:
                self.machine.transition(ConnectionState.CONNECTING)
                self.machine.transition(ConnectionState.READY)

    async def _relay(self) -> None:
        """Finish the replies the outbox holds first (their runs are not streamed a second time
        from what the relay gathered before it started), then relay."""
        await self._recover()
        await self.relay.run()

    async def _recover(self) -> None:
        try:
            settled = await self.relay.recover()
        except Exception:
            self._log.exception("outbox recovery failed", binding=self.binding_id)
            return
        if settled:
            self._log.info("outbox recovered", binding=self.binding_id, settled=settled)

    async def _event_worker(self) -> None:
        while True:
            event = await self._events.get()
            try:
                await self._handle_event(event)
            except Exception:  # one bad event must not stop the binding
                self._log.exception(f"{self.platform} event failed", binding=self.binding_id)

    def reconfigure(self, config: ConfigT) -> None:
        """Take on new settings without reconnecting: access, routing, queueing and thread
        settings apply from the next message. The caller checks that none of the account's
        `RESTART_KEYS` changed (`AccountConfig.restart_changes`); those stay as they were."""
        self._config = config
        self.pipeline.reconfigure(config)

    async def announce_approval(self, request: PairingRequest) -> bool:
        """Tell a sender whose pairing an operator approved, where they wrote from, that they
        may talk now. False when the request does not say where that was. Raises what the
        platform raises."""
        if request.reply_route is None:
            return False
        key = outbox_key(self.platform, self.account_id, f"paired:{request.code}", 0)
        await self._transport.post_message(request.reply_route, PAIRING_APPROVED_TEXT, key=key)
        return True

    # -- approvals ---------------------------------------------------------------------------

    @property
    def approvers(self) -> frozenset[str]:
        """Platform user ids that may decide approval requests from this account's buttons."""
        return frozenset(self._config.approvers)

    def session_origin(self, session_key: str) -> SessionOrigin | None:
        """Where the conversation of `session_key` lives, when this binding relayed a message of
        it since it started."""
        return self.pipeline.origin(session_key)

    def attach_approvals(self, decider: ApprovalDecider) -> None:
        """Take button clicks to `decider` (until then every click is refused privately)."""
        self._decider = decider

    async def _click(self, sender_id: str, button_id: str) -> ClickReply | None:
        """The reply to a click of button `button_id` by `sender_id`; None when it is not an
        approval button."""
        parsed = parse_action_id(button_id)
        if parsed is None:
            return None
        if self._decider is None or sender_id not in self._config.approvers:
            self._log.info("approval click refused", binding=self.binding_id, sender=sender_id)
            return ClickReply(private=NOT_AN_APPROVER)
        decision, approval_id = parsed
        answer = await self._decider.decide_approval(
            self.binding_id, approval_id, decision, sender_id=sender_id
        )
        return answer_click(answer)

    # -- channel tools -----------------------------------------------------------------------

    def tools_for(
        self, session_key: str, restore: Callable[[], Awaitable[SessionOrigin | None]] | None = None
    ) -> list[AgentTool]:
        """`<platform>_add_reaction` and `<platform>_send_file` for a session that came from this
        binding; no tools for any other session. A session this binding has not seen a message
        of since it started gets them only with `restore`, which finds its conversation (from
        the daemon's records) when a tool first runs."""
        text = self.tool_text
        if self.pipeline.origin(session_key) is None and restore is None:
            return []
        emoji, emoji_description = text.emoji_field
        react_parameters: dict[str, Any] = {
            "type": "object",
            "properties": {
                emoji: {"type": "string", "description": emoji_description},
                text.message_field: {"type": "string", "description": "Message to react to (optional)."},
            },
            "required": [emoji],
            "additionalProperties": False,
        }
        tools: list[tuple[str, str, str, dict[str, Any], Action]] = [
            ("add_reaction", "Add reaction", text.react_description, react_parameters, self._react),
            ("send_file", "Send file", text.file_description, FILE_PARAMETERS, self._send_file),
        ]
        origin = partial(self._origin, session_key, restore)
        return [
            channel_tool(
                name=f"{self.platform}_{name}",
                label=label,
                description=description,
                parameters=parameters,
                origin=origin,
                action=action,
                platform=self.platform,
            )
            for name, label, description, parameters, action in tools
        ]

    async def _origin(
        self, session_key: str, restore: Callable[[], Awaitable[SessionOrigin | None]] | None
    ) -> SessionOrigin | None:
        known = self.pipeline.origin(session_key)
        if known is not None or restore is None:
            return known
        found = await restore()
        if found is not None:
            self.pipeline.remember_origin(session_key, found)
        return found
