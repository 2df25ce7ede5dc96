"""`SlackBinding`: one Slack app in a workspace, over Socket Mode (default) or the Events API.

Start-up calls `auth.test` to learn the bot's own user id (to recognise mentions and its own
messages). In Socket Mode, envelopes are acked by the protocol the moment they arrive and their
event callbacks go through a bounded queue (`EVENT_QUEUE_SIZE`; when full, the shell stops
reading, so nothing is dropped) to one worker that handles them in order. Over the Events API,
the callback is handled inside the request, so the input is recorded before Slack gets its 200.
Both paths deduplicate by the callback's `event_id` first (covering retries and replays), then by
message (`channel` + `ts`) in the pipeline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from functools import partial
from typing import Any, Literal

import httpx
import structlog
from starlette.types import ASGIApp

from agent_core import AgentTool
from bindings.config import SlackAccountConfig
from bindings.errors import BindingConfigError, PlatformRequestError, PlatformUnavailableError
from bindings.host import DEDUPE_TTL_S, BindingHost
from bindings.inbound import InboundPipeline, Outcome, SessionOrigin
from bindings.outbox import RelaySettings, ReplyRelay
from bindings.ratelimit import RateLimiter
from bindings.routing import DEFAULT_ACCOUNT_ID
from bindings.slack.events_api import EventsEndpoint
from bindings.slack.messages import parse_event
from bindings.slack.shell import SocketModeShell
from bindings.slack.socket_mode import Disconnect, Envelope, SocketEvent, SocketModeProtocol
from bindings.slack.transport import SlackTransport
from bindings.slack.web import AuthInfo, SlackWeb
from bindings.state import ConnectionState, StateMachine, StatusReporter
from bindings.tools import FILE_PARAMETERS, channel_tool, file_bytes
from bindings.ws import Connector, SocketSettings, websockets_connector

log = structlog.get_logger("bindings.slack")

EVENT_QUEUE_SIZE = 1000
AUTH_WAIT_S = 2.0
"""How long an Events API request waits for `auth.test` at start-up before answering 503 (Slack
retries it)."""


class SlackBinding:
    """A Slack app. Use `async with SlackBinding(...)` or `start()` / `aclose()`.

    `http` carries every Web API call (its owner closes it); `env` holds the secrets (default:
    the process environment); `connector`, `limiter` and `reconnect_backoff` are seams for
    tests. Raises `BindingConfigError` when a secret the mode needs is missing.
    """

    platform: Literal["slack"] = "slack"

    def __init__(
        self,
        config: SlackAccountConfig,
        host: BindingHost,
        http: httpx.AsyncClient,
        *,
        account_id: str = DEFAULT_ACCOUNT_ID,
        env: Mapping[str, str] | None = None,
        connector: Connector | None = None,
        limiter: RateLimiter | None = None,
        reconnect_backoff: tuple[float, float] = (1.0, 60.0),
    ) -> None:
        self.account_id = account_id
        self.binding_id = f"slack:{account_id}"
        self._config = config
        self._host = host
        self._signing_secret = config.signing_secret(env) if config.mode == "events" else None
        self.web = SlackWeb(
            http,
            base_url=config.api_base_url,
            bot_token=config.bot_token(env),
            app_token=config.app_token(env) if config.mode == "socket" else None,
            limiter=limiter,
        )
        self.transport = SlackTransport(self.web)
        self.relay = ReplyRelay(
            platform="slack",
            account_id=account_id,
            transport=self.transport,
            store=host,
            settings=RelaySettings(chunk_limit=config.chunk_limit, edit_interval_s=config.edit_interval_s),
        )
        self.pipeline = InboundPipeline(
            platform="slack",
            account_id=account_id,
            config=config,
            host=host,
            relay=self.relay,
            transport=self.transport,
        )
        self.protocol = SocketModeProtocol()
        self.machine = self.protocol.machine if config.mode == "socket" else StateMachine()
        self._status = StatusReporter(host, self.binding_id)
        self._state_changed = asyncio.Event()
        self.machine.add_listener(self._on_state)
        self._connector = connector or websockets_connector(
            SocketSettings(ping_interval_s=10.0, ping_timeout_s=10.0)
        )
        self._backoff = reconnect_backoff
        self._events: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=EVENT_QUEUE_SIZE)
        self.auth: AuthInfo | None = None
        self._auth_ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        return self.machine.state

    @property
    def queue_size(self) -> int:
        return self._events.qsize()

    async def start(self) -> None:
        """Start in the background (idempotent); see `wait_for_state`."""
        if self._task is None and not self._closed:
            self._task = asyncio.create_task(self._main(), name=self.binding_id)

    async def aclose(self) -> None:
        """Stop every task, unsubscribe, report `closed` (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.pipeline.close()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
            if not task.cancelled() and task.exception() is not None:
                log.error("slack binding ended with an error", error=repr(task.exception()))
        if self.machine.state is not ConnectionState.CLOSED:
            self.machine.transition(ConnectionState.CLOSED)

    async def stop(self) -> None:
        """Same as `aclose()`."""
        await self.aclose()

    async def __aenter__(self) -> SlackBinding:
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
        log.info("slack state", binding=self.binding_id, old=old.value, new=new.value)
        self._status.state_changed(new)
        self._state_changed.set()

    async def _main(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.relay.run())
            tg.create_task(self._recover())
            if not await self._authenticate():
                return
            if self._config.mode == "socket":
                tg.create_task(self._event_worker())
                tg.create_task(self._run_socket())
            else:
                self.machine.transition(ConnectionState.CONNECTING)
                self.machine.transition(ConnectionState.READY)

    async def _authenticate(self) -> bool:
        delay = self._backoff[0]
        while True:
            try:
                self.auth = await self.web.auth_test()
            except PlatformUnavailableError as exc:
                log.warning("auth.test failed; retrying", error=str(exc), delay=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._backoff[1])
                continue
            except PlatformRequestError as exc:
                log.error("slack refused the bot token", binding=self.binding_id, error=str(exc))
                return False
            self._auth_ready.set()
            return True

    async def _recover(self) -> None:
        try:
            await self.relay.recover()
        except Exception:
            log.exception("outbox recovery failed", binding=self.binding_id)

    async def _run_socket(self) -> None:
        shell = SocketModeShell(
            self.protocol,
            open_url=self.web.open_connection,
            on_event=self._on_socket_event,
            connect=self._connector,
            on_frame=self._status.frame_received,
            backoff_initial_s=self._backoff[0],
            backoff_max_s=self._backoff[1],
        )
        try:
            await shell.run()
        except PlatformRequestError as exc:
            log.error("slack refused the app token", binding=self.binding_id, error=str(exc))
            self.protocol.stop()

    # -- inbound -----------------------------------------------------------------------------

    async def _on_socket_event(self, event: SocketEvent) -> None:
        if isinstance(event, Envelope):
            if event.type == "events_api":
                await self._events.put(event.payload)
            else:
                log.debug("socket mode envelope ignored", type=event.type)
        elif isinstance(event, Disconnect):
            log.info("slack asked to reconnect", reason=event.reason)

    async def _event_worker(self) -> None:
        while True:
            payload = await self._events.get()
            try:
                await self.handle_callback(payload)
            except Exception:  # one bad event must not stop the binding
                log.exception("slack event failed", binding=self.binding_id)

    async def handle_callback(self, payload: dict[str, Any]) -> Outcome | None:
        """Handle one `event_callback` payload (from either ingress). None: not a message for
        the agent."""
        if self.auth is None:
            return None
        event_id = payload.get("event_id")
        if event_id and not await self._host.dedupe(
            "slack", self.account_id, f"event:{event_id}", DEDUPE_TTL_S
        ):
            return "duplicate"
        event = payload.get("event")
        if not isinstance(event, dict):
            return None
        msg = parse_event(
            event,
            account_id=self.account_id,
            bot_user_id=self.auth.user_id,
            bot_id=self.auth.bot_id,
            team_id=payload.get("team_id") or self.auth.team_id,
            allow_bots=self._config.allow_bots,
            reply_in_thread=self._config.reply_in_thread_for,
        )
        if msg is None:
            return None
        return await self.pipeline.handle(msg)

    def events_app(self) -> ASGIApp:
        """The signed Events API endpoint (mode `events`), to mount on the daemon."""
        if self._signing_secret is None:
            raise BindingConfigError('the Events API endpoint needs mode = "events"')
        return EventsEndpoint(self._signing_secret, self._on_http_event)

    async def _on_http_event(self, payload: dict[str, Any]) -> None:
        self._status.frame_received()
        if self.auth is None:
            async with asyncio.timeout(AUTH_WAIT_S):
                await self._auth_ready.wait()
        await self.handle_callback(payload)

    # -- channel tools -----------------------------------------------------------------------

    def tools_for(self, session_key: str) -> list[AgentTool]:
        """`slack_add_reaction` and `slack_send_file` for a session that came from this
        binding; no tools for any other session."""
        if self.pipeline.origin(session_key) is None:
            return []
        origin = partial(self.pipeline.origin, session_key)
        return [
            channel_tool(
                name="slack_add_reaction",
                label="Add reaction",
                description=(
                    "Add an emoji reaction to a message in the Slack conversation this session "
                    "came from (by default the latest message you received)."
                ),
                parameters={
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "description": "Emoji name, e.g. thumbsup."},
                        "message_ts": {"type": "string", "description": "Message to react to (optional)."},
                    },
                    "required": ["name"],
                    "additionalProperties": False,
                },
                origin=origin,
                action=self._react,
                platform="slack",
            ),
            channel_tool(
                name="slack_send_file",
                label="Send file",
                description="Share a file in the Slack conversation (and thread) this session came from.",
                parameters=FILE_PARAMETERS,
                origin=origin,
                action=self._send_file,
                platform="slack",
            ),
        ]

    async def _react(self, origin: SessionOrigin, params: dict[str, Any], tool_call_id: str) -> str:
        ts = str(params.get("message_ts") or origin.last_message_id)
        name = str(params["name"]).strip(":")
        await self.web.add_reaction(origin.route.channel_id, ts, name)
        return f"Reacted with :{name}: to message {ts}."

    async def _send_file(self, origin: SessionOrigin, params: dict[str, Any], tool_call_id: str) -> str:
        data = file_bytes(params)
        file_id = await self.web.upload_file(
            origin.route.channel_id,
            str(params["filename"]),
            data,
            thread_ts=origin.route.thread_id,
            comment=params.get("comment") or None,
        )
        return f"Shared {params['filename']} ({len(data)} bytes) as file {file_id}."
