"""`SlackBinding`: one Slack app in a workspace, over Socket Mode (default) or the Events API.

Start-up calls `auth.test` to learn the bot's own user id (to recognise mentions and its own
messages). Slack gets its acknowledgement only once the input is recorded:

- In Socket Mode, event envelopes go through a bounded queue (`EVENT_QUEUE_SIZE`; when full, the
  shell stops reading, so nothing is dropped) to one worker that handles them in order and acks
  each envelope once it is handled. An envelope the daemon could not record (the host answered
  `rejected`, for example while the gateway drains, or the handler failed) is left unacked, and
  Slack delivers it again, to this connection or, after a restart, to the next one. Envelopes of
  other types are acked at once.
- Over the Events API, the callback is handled inside the request: 200 when it is recorded, 503
  when it could not be (Slack retries the request).

Approval button clicks (`block_actions`) come in `interactive` envelopes, acknowledged at once, or
to the interactivity URL (`interactivity_app`); see `bindings.slack.approval_buttons`.

Both paths deduplicate by the callback's `event_id` (covering retries and replays), then by
message (`channel` + `ts`) in the pipeline; an id is remembered only once handled
(`bindings.dedupe`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Literal

import httpx
import structlog
from starlette.types import ASGIApp

from bindings.approvals import ApprovalMessage
from bindings.base import ChannelToolText, ChatBinding
from bindings.config import SlackAccountConfig
from bindings.dedupe import EventOnce
from bindings.errors import BindingConfigError, PlatformError, PlatformRequestError, PlatformUnavailableError
from bindings.host import BindingHost, ReplyRoute, outbox_key
from bindings.inbound import Outcome, SessionOrigin, handled
from bindings.ratelimit import RateLimiter
from bindings.routing import DEFAULT_ACCOUNT_ID
from bindings.slack import approval_buttons
from bindings.slack.events_api import EventsEndpoint
from bindings.slack.interactivity import InteractivityEndpoint
from bindings.slack.messages import parse_event
from bindings.slack.shell import SocketModeShell
from bindings.slack.socket_mode import Disconnect, Envelope, SocketEvent, SocketModeProtocol
from bindings.slack.transport import SlackTransport
from bindings.slack.web import AuthInfo, SlackWeb
from bindings.state import StateMachine
from bindings.tools import file_bytes
from bindings.ws import Connector, SocketSettings, websockets_connector

log = structlog.get_logger("bindings.slack")

AUTH_WAIT_S = 2.0
"""How long an Events API request waits for `auth.test` at start-up before answering 503 (Slack
retries it)."""


class SlackBinding(ChatBinding[SlackAccountConfig, Envelope]):
    """A Slack app. Use `async with SlackBinding(...)` or `start()` / `aclose()`.

    `http` carries every Web API call (its owner closes it); `env` holds the secrets (default:
    the process environment); `connector`, `limiter` and `reconnect_backoff` are seams for
    tests. Raises `BindingConfigError` when a secret the mode needs is missing.
    """

    platform: Literal["slack"] = "slack"
    tool_text = ChannelToolText(
        react_description=(
            "Add an emoji reaction to a message in the Slack conversation this session "
            "came from (by default the latest message you received)."
        ),
        emoji_field=("name", "Emoji name, e.g. thumbsup."),
        message_field="message_ts",
        file_description="Share a file in the Slack conversation (and thread) this session came from.",
    )

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
        self._signing_secret = config.signing_secret(env) if config.mode == "events" else None
        self.web = SlackWeb(
            http,
            base_url=config.api_base_url,
            bot_token=config.bot_token(env),
            app_token=config.app_token(env) if config.mode == "socket" else None,
            limiter=limiter,
        )
        self.transport = SlackTransport(self.web)
        self.protocol = SocketModeProtocol()
        super().__init__(
            config,
            host,
            account_id=account_id,
            transport=self.transport,
            chunk_limit=config.chunk_limit,
            machine=self.protocol.machine if config.mode == "socket" else StateMachine(),
            connector=connector
            or websockets_connector(SocketSettings(ping_interval_s=10.0, ping_timeout_s=10.0)),
        )
        self._backoff = reconnect_backoff
        self.auth: AuthInfo | None = None
        self._auth_ready = asyncio.Event()
        self._shell: SocketModeShell | None = None
        self._once = EventOnce(host, "slack", account_id)

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def _streaming(self) -> bool:
        return self._config.mode == "socket"

    async def _prepare(self) -> bool:
        return await self._authenticate()

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

    async def _run_socket_shell(self) -> None:
        shell = self._shell = SocketModeShell(
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
            if event.type in ("events_api", "interactive"):
                await self._events.put(event)
            else:
                log.debug("socket mode envelope ignored", type=event.type)
                await self._ack(event)
        elif isinstance(event, Disconnect):
            log.info("slack asked to reconnect", reason=event.reason)

    async def _handle_event(self, event: Envelope) -> None:
        if event.type == "interactive":
            # A click is acknowledged at once (Slack waits three seconds); a redelivered click
            # would find its request already decided.
            await self._ack(event)
            await self.handle_interactive(event.payload)
            return
        try:
            outcome = await self.handle_callback(event.payload)
        except Exception:
            log.exception("slack event failed; left for redelivery", envelope_id=event.envelope_id)
            return
        if handled(outcome):
            await self._ack(event)
        else:
            log.warning("slack event not recorded; left for redelivery", envelope_id=event.envelope_id)

    async def _ack(self, envelope: Envelope) -> None:
        if self._shell is not None and not await self._shell.ack(envelope.envelope_id):
            log.info("slack envelope not acked: its connection ended", envelope_id=envelope.envelope_id)

    async def handle_callback(self, payload: dict[str, Any]) -> Outcome | None:
        """Handle one `event_callback` payload (from either ingress). None: not a message for
        the agent; `rejected`: the host could not record it (the caller leaves Slack
        unacknowledged)."""
        if self.auth is None:
            return "rejected"
        event_id = payload.get("event_id")
        if not event_id:
            return await self._handle_callback(payload)
        outcome = await self._once.run(
            f"event:{event_id}", lambda: self._handle_callback(payload), done=handled
        )
        return outcome or "duplicate"

    async def _handle_callback(self, payload: dict[str, Any]) -> Outcome | None:
        assert self.auth is not None
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

    async def _on_http_event(self, payload: dict[str, Any]) -> bool:
        self._status.frame_received()
        if self.auth is None:
            try:
                async with asyncio.timeout(AUTH_WAIT_S):
                    await self._auth_ready.wait()
            except TimeoutError:
                return False
        return handled(await self.handle_callback(payload))

    async def handle_interactive(self, payload: dict[str, Any]) -> None:
        """Handle one interactive payload (from either ingress): approval button clicks are
        decided and answered; anything else is ignored. Failures are logged, never raised."""
        found = approval_buttons.clicks_of(payload)
        if found is None:
            return
        user, actions, clicked = found
        for action in actions:
            try:
                reply = await self._click(user, action)
                if reply is not None:
                    await approval_buttons.answer(self.web, user, clicked, reply)
            except PlatformError as exc:
                log.warning("could not answer a button click", binding=self.binding_id, error=str(exc))

    def interactivity_app(self) -> ASGIApp:
        """The signed interactivity endpoint (mode `events`), to mount on the daemon."""
        if self._signing_secret is None:
            raise BindingConfigError('the interactivity endpoint needs mode = "events"')
        return InteractivityEndpoint(self._signing_secret, self._on_http_interactive)

    async def _on_http_interactive(self, payload: dict[str, Any]) -> None:
        self._status.frame_received()
        await self.handle_interactive(payload)

    # -- approvals ---------------------------------------------------------------------------

    async def post_approval(self, route: ReplyRoute, approval: dict[str, Any]) -> ApprovalMessage:
        key = outbox_key("slack", self.account_id, f"approval:{approval['id']}", 0)
        return await approval_buttons.post(
            self.web, route.channel_id, approval, key=key, thread_ts=route.thread_id
        )

    async def show_approval(self, message: ApprovalMessage, approval: dict[str, Any]) -> None:
        await approval_buttons.show(self.web, message, approval)

    # -- channel tools -----------------------------------------------------------------------

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
