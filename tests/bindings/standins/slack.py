"""A local stand-in for Slack: the Web API (`/api/<method>`) and Socket Mode.

Like Slack, where the bindings depend on it:

- Web API methods check their token type (bot `xoxb-` for most, app-level `xapp-` for
  `apps.connections.open`), answer refusals as HTTP 200 `{"ok": false, "error": ...}`, throttle
  with HTTP 429 + `Retry-After` (scripted with `force_429`), keep messages per conversation with
  their `metadata` (returned by `conversations.history`/`replies` only with
  `include_all_metadata`; `conversations.replies` pages with `limit` and `cursor`), and refuse
  `text` over 40,000 characters. `delay_next_post` stores a post and answers late, so a client
  times out without knowing whether it worked; `hold_posts_after(n)` stores every later post and
  answers it only at `release_posts()` (a client killed meanwhile cannot know it worked).
- `apps.connections.open` returns a fresh `ws://` URL each call; each URL works once.
- The Socket Mode socket says `hello`, sends envelopes (`send_event`, with `retry_attempt` for
  redeliveries), records the acks it gets back, and can ask the client to reconnect
  (`disconnect(reason)`). Like Slack, an event whose envelope was not acked is delivered again
  in a fresh envelope (`retry_attempt` + 1, `retry_reason` "timeout"): on the next connection
  when its own connection ended, or on the current one when `redeliver_unacked()` is called
  (Slack does that after its 3-second ack window).
- Block Kit: a message keeps the `blocks` it was posted or updated with (`chat.update` with
  `blocks: []` removes them). `click(...)` is a user pressing a button of a bot message: like
  Slack, only a button the message shows can be pressed, and the `block_actions` payload goes
  out in an `interactive` envelope (or, for the Events API, is built by `block_actions(...)` for
  the interactivity URL). `chat.postEphemeral` messages are kept in `ephemerals`, visible to
  their user alone.
"""

from __future__ import annotations

import asyncio
import http
import itertools
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import websockets
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request as WsRequest
from websockets.http11 import Response as WsResponse

from tests.bindings.helpers import wait_until
from tests.bindings.standins.forms import parse_urlencoded
from tests.bindings.standins.server import StandInServers

APP_TOKEN_METHODS = frozenset({"apps.connections.open"})


@dataclass
class SocketConnection:
    ws: ServerConnection
    ticket: str
    acks: list[str] = field(default_factory=list)
    closed: bool = False


@dataclass
class Update:
    channel: str
    ts: str
    text: str
    at: float


class SlackStandIn(StandInServers):
    def __init__(
        self,
        *,
        bot_token: str = "xoxb-test",
        app_token: str = "xapp-test",
        user_id: str = "UBOT",
        bot_id: str = "BBOT",
        team_id: str = "T1",
    ) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.user_id = user_id
        self.bot_id = bot_id
        self.team_id = team_id
        self._ts = itertools.count(1)
        self.messages: dict[str, list[dict[str, Any]]] = {}
        self.posts: list[dict[str, Any]] = []
        self.post_attempts = 0
        self.updates: list[Update] = []
        self.reactions: list[tuple[str, str, str]] = []
        self.ephemerals: list[dict[str, Any]] = []
        self.files: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, int, float]] = []
        self.opened_urls: list[str] = []
        self._tickets: dict[str, bool] = {}
        self.rejected_tickets = 0
        self.sockets: list[SocketConnection] = []
        self.current: SocketConnection | None = None
        self.envelopes: dict[str, dict[str, Any]] = {}
        self._forced: dict[str, list[int]] = {}
        self._delay_next_post: float | None = None
        self._hold_posts_after: int | None = None
        self._posts_released = asyncio.Event()
        self.http_port = 0
        self.ws_port = 0
        super().__init__()

    async def __aenter__(self) -> SlackStandIn:
        self.http_port = await self._serve_http(self._app())
        self.ws_port = await self._serve_ws(self._socket, process_request=self._check_ticket)
        return self

    @property
    def api_base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/api/"

    # -- scripting ---------------------------------------------------------------------------

    def next_ts(self) -> str:
        n = next(self._ts)
        return f"{1_700_000_000 + n}.{n:06d}"

    def force_429(self, method: str, times: int = 1, retry_after: int = 1) -> None:
        self._forced.setdefault(method, []).extend([retry_after] * times)

    def delay_next_post(self, seconds: float) -> None:
        self._delay_next_post = seconds

    def hold_posts_after(self, n: int) -> None:
        """Store every post after the first `n` but do not answer it until `release_posts()`."""
        self._hold_posts_after = n
        self._posts_released.clear()

    def release_posts(self) -> None:
        """Answer the held posts (to whoever is still waiting) and hold no more."""
        self._hold_posts_after = None
        self._posts_released.set()

    def message_event(
        self,
        channel: str,
        text: str,
        *,
        user: str = "U1",
        channel_type: str = "channel",
        thread_ts: str | None = None,
        mention: bool = False,
        kind: str = "message",
        bot_id: str | None = None,
    ) -> dict[str, Any]:
        """A user's message, stored in the conversation; returns its event."""
        ts = self.next_ts()
        event: dict[str, Any] = {
            "type": kind,
            "channel": channel,
            "user": user,
            "text": f"<@{self.user_id}> {text}" if mention else text,
            "ts": ts,
            "event_ts": ts,
            "channel_type": channel_type,
            "team": self.team_id,
        }
        if kind == "app_mention":
            event.pop("channel_type")
        if thread_ts is not None:
            event["thread_ts"] = thread_ts
        if bot_id is not None:
            event["bot_id"] = bot_id
        self.messages.setdefault(channel, []).append({k: v for k, v in event.items() if k != "channel_type"})
        return event

    def callback(self, event: dict[str, Any], event_id: str | None = None) -> dict[str, Any]:
        """The `event_callback` payload Slack wraps an event in."""
        return {
            "token": "verification-token",
            "team_id": self.team_id,
            "api_app_id": "A1",
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
            "event_time": int(time.time()),
        }

    async def send_event(
        self, event: dict[str, Any], *, event_id: str | None = None, retry_attempt: int = 0
    ) -> dict[str, Any]:
        """Deliver an event over the current socket in a fresh envelope; returns the payload."""
        payload = self.callback(event, event_id)
        await self._deliver(self._live(), payload, retry_attempt)
        return payload

    def block_actions(self, channel: str, ts: str, action_id: str, *, user: str = "U1") -> dict[str, Any]:
        """The `block_actions` payload of `user` pressing the button `action_id` of the bot
        message `ts`. Raises AssertionError when the message shows no such button."""
        message = self._find(channel, ts)
        assert message is not None, f"no message {ts} in {channel}"
        buttons = [
            element
            for block in message.get("blocks") or []
            if block.get("type") == "actions"
            for element in block.get("elements") or []
        ]
        pressed = next((b for b in buttons if b.get("action_id") == action_id), None)
        assert pressed is not None, f"no button {action_id!r} on {ts}"
        container = {"type": "message", "message_ts": ts, "channel_id": channel, "is_ephemeral": False}
        return {
            "type": "block_actions",
            "user": {"id": user, "username": user.lower(), "team_id": self.team_id},
            "api_app_id": "A1",
            "token": "verification-token",
            "container": container,
            "trigger_id": uuid.uuid4().hex,
            "team": {"id": self.team_id, "domain": "test"},
            "channel": {"id": channel, "name": channel.lower()},
            "message": dict(message),
            "response_url": f"http://127.0.0.1:{self.http_port}/actions/{uuid.uuid4().hex}",
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": pressed.get("block_id") or "approval",
                    "text": pressed.get("text"),
                    "value": pressed.get("value"),
                    "type": "button",
                    "action_ts": f"{time.time():.6f}",
                }
            ],
        }

    async def click(self, channel: str, ts: str, action_id: str, *, user: str = "U1") -> str:
        """A user presses a button: its `block_actions` payload goes out in an `interactive`
        envelope on the current socket; returns the envelope id."""
        payload = self.block_actions(channel, ts, action_id, user=user)
        return await self._deliver(self._live(), payload, 0, kind="interactive")

    async def _deliver(
        self, conn: SocketConnection, payload: dict[str, Any], retry_attempt: int, *, kind: str = "events_api"
    ) -> str:
        envelope_id = str(uuid.uuid4())
        self.envelopes[envelope_id] = {
            "sent_at": time.monotonic(),
            "acked_at": None,
            "payload": payload,
            "retry_attempt": retry_attempt,
            "conn": conn,
            "redelivered": False,
            "type": kind,
        }
        envelope = {
            "envelope_id": envelope_id,
            "type": kind,
            "accepts_response_payload": False,
            "retry_attempt": retry_attempt,
            "retry_reason": "timeout" if retry_attempt else "",
            "payload": payload,
        }
        await conn.ws.send(json.dumps(envelope))
        return envelope_id

    async def redeliver_unacked(self, *, only_closed: bool = False) -> int:
        """Deliver each event whose latest envelope is unacked again, on the current socket, in
        a fresh envelope; `only_closed`: only those whose connection has ended. Returns how many."""
        conn = self._live()
        due = [
            (eid, e)
            for eid, e in self.envelopes.items()
            if e["acked_at"] is None and not e["redelivered"] and (e["conn"].closed or not only_closed)
        ]
        for _, entry in due:
            entry["redelivered"] = True
            await self._deliver(conn, entry["payload"], entry["retry_attempt"] + 1, kind=entry["type"])
        return len(due)

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask the client to reconnect; close the socket ourselves if it has not after 1 s."""
        conn = self._live()
        await conn.ws.send(
            json.dumps({"type": "disconnect", "reason": reason, "debug_info": {"host": "standin"}})
        )
        try:
            await asyncio.wait_for(conn.ws.wait_closed(), 1.0)
        except TimeoutError:
            await conn.ws.close()

    def unacked(self) -> list[str]:
        """Envelopes not acked and not delivered again since."""
        return [eid for eid, e in self.envelopes.items() if e["acked_at"] is None and not e["redelivered"]]

    def acked_event_ids(self) -> list[str]:
        return [
            e["payload"]["event_id"]
            for e in self.envelopes.values()
            if e["acked_at"] is not None and e["type"] == "events_api"
        ]

    def bot_texts(self, channel: str, thread_ts: str | None = None) -> list[str]:
        return [
            m["text"]
            for m in self.messages.get(channel, [])
            if m.get("bot_id") == self.bot_id and m.get("thread_ts") == thread_ts
        ]

    async def wait_for(self, predicate: Callable[[], object], timeout: float = 5.0) -> None:
        await wait_until(predicate, timeout)

    def _live(self) -> SocketConnection:
        assert self.current is not None and not self.current.closed, "no live socket"
        return self.current

    # -- Socket Mode -------------------------------------------------------------------------

    def _check_ticket(self, connection: ServerConnection, request: WsRequest) -> WsResponse | None:
        ticket = request.path.partition("ticket=")[2]
        if self._tickets.get(ticket) is not False:
            self.rejected_tickets += 1
            return connection.respond(http.HTTPStatus.FORBIDDEN, "unknown or used ticket\n")
        self._tickets[ticket] = True
        return None

    async def _socket(self, ws: ServerConnection) -> None:
        ticket = ws.request.path.partition("ticket=")[2] if ws.request is not None else ""
        conn = SocketConnection(ws=ws, ticket=ticket)
        self.sockets.append(conn)
        self.current = conn
        await ws.send(
            json.dumps(
                {
                    "type": "hello",
                    "num_connections": 1,
                    "debug_info": {"host": "standin", "approximate_connection_time": 18060},
                    "connection_info": {"app_id": "A1"},
                }
            )
        )
        try:
            await self.redeliver_unacked(only_closed=True)
            async for raw in ws:
                data = json.loads(raw)
                envelope_id = data.get("envelope_id")
                if envelope_id in self.envelopes:
                    self.envelopes[envelope_id]["acked_at"] = time.monotonic()
                    conn.acks.append(envelope_id)
        except websockets.ConnectionClosed:
            pass
        finally:
            conn.closed = True
            if self.current is conn:
                self.current = None

    # -- Web API -----------------------------------------------------------------------------

    def _app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/api/{method}", self._api, methods=["POST"]),
                Route("/upload/{file_id}", self._upload, methods=["POST"]),
            ]
        )

    async def _api(self, request: Request) -> Response:
        method = request.path_params["method"]
        body = await request.body()
        if request.headers.get("content-type", "").startswith("application/json"):
            args: dict[str, Any] = json.loads(body or b"{}")
        else:
            args = dict(parse_urlencoded(body))
        response = await self._dispatch(method, request.headers.get("authorization", ""), args)
        self.calls.append((method, response.status_code, time.monotonic()))
        return response

    async def _dispatch(self, method: str, authorization: str, args: dict[str, Any]) -> Response:
        forced = self._forced.get(method)
        if forced:
            retry_after = forced.pop(0)
            return JSONResponse(
                {"ok": False, "error": "ratelimited"},
                status_code=429,
                headers={"Retry-After": str(retry_after)},
            )
        token = authorization.removeprefix("Bearer ").strip()
        wanted = self.app_token if method in APP_TOKEN_METHODS else self.bot_token
        if token != wanted:
            error = "not_allowed_token_type" if token in (self.app_token, self.bot_token) else "invalid_auth"
            return _error(error)
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            return _error("unknown_method")
        result: Response = await handler(args)
        return result

    async def _m_auth_test(self, args: dict[str, Any]) -> Response:
        return _ok(user_id=self.user_id, bot_id=self.bot_id, team_id=self.team_id, user="bot", team="Test")

    async def _m_apps_connections_open(self, args: dict[str, Any]) -> Response:
        ticket = uuid.uuid4().hex
        self._tickets[ticket] = False
        url = f"ws://127.0.0.1:{self.ws_port}/link/?ticket={ticket}"
        self.opened_urls.append(url)
        return _ok(url=url)

    async def _m_chat_postMessage(self, args: dict[str, Any]) -> Response:
        self.post_attempts += 1
        channel, text = args.get("channel"), args.get("text")
        if not channel:
            return _error("channel_not_found")
        if not text:
            return _error("no_text")
        if len(str(text)) > 40_000:
            return _error("msg_too_long")
        message: dict[str, Any] = {
            "type": "message",
            "user": self.user_id,
            "bot_id": self.bot_id,
            "text": text,
            "ts": self.next_ts(),
        }
        if args.get("thread_ts"):
            message["thread_ts"] = args["thread_ts"]
        if args.get("metadata"):
            message["metadata"] = args["metadata"]
        if args.get("blocks"):
            message["blocks"] = _blocks(args["blocks"])
        self.messages.setdefault(str(channel), []).append(message)
        self.posts.append({**message, "channel": channel, "at": time.monotonic()})
        if self._hold_posts_after is not None and len(self.posts) > self._hold_posts_after:
            await self._posts_released.wait()
        if self._delay_next_post is not None:
            delay, self._delay_next_post = self._delay_next_post, None
            await asyncio.sleep(delay)
        return _ok(channel=channel, ts=message["ts"], message=_visible(message, False))

    async def _m_chat_update(self, args: dict[str, Any]) -> Response:
        message = self._find(str(args.get("channel")), str(args.get("ts")))
        if message is None:
            return _error("message_not_found")
        if message.get("bot_id") != self.bot_id:
            return _error("cant_update_message")
        if len(str(args.get("text", ""))) > 40_000:
            return _error("msg_too_long")
        message["text"] = args.get("text", "")
        if "blocks" in args:
            message["blocks"] = _blocks(args["blocks"])
        self.updates.append(
            Update(str(args["channel"]), str(args["ts"]), str(message["text"]), time.monotonic())
        )
        return _ok(channel=args["channel"], ts=args["ts"], text=message["text"])

    async def _m_chat_postEphemeral(self, args: dict[str, Any]) -> Response:
        channel, user, text = args.get("channel"), args.get("user"), args.get("text")
        if not channel or channel not in self.messages:
            return _error("channel_not_found")
        if not user:
            return _error("user_not_in_channel")
        if not text and not args.get("blocks"):
            return _error("no_text")
        entry = {"channel": str(channel), "user": str(user), "text": text, "thread_ts": args.get("thread_ts")}
        self.ephemerals.append(entry)
        return _ok(message_ts=self.next_ts())

    async def _m_reactions_add(self, args: dict[str, Any]) -> Response:
        channel, ts, name = str(args.get("channel")), str(args.get("timestamp")), str(args.get("name"))
        if self._find(channel, ts) is None:
            return _error("message_not_found")
        if (channel, ts, name) in self.reactions:
            return _error("already_reacted")
        self.reactions.append((channel, ts, name))
        return _ok()

    async def _m_conversations_history(self, args: dict[str, Any]) -> Response:
        channel = str(args.get("channel"))
        with_metadata = str(args.get("include_all_metadata")) == "true"
        limit = int(args.get("limit") or 100)
        latest = list(reversed(self.messages.get(channel, [])))[:limit]
        return _ok(messages=[_visible(m, with_metadata) for m in latest], has_more=False)

    async def _m_conversations_replies(self, args: dict[str, Any]) -> Response:
        channel, ts = str(args.get("channel")), str(args.get("ts"))
        with_metadata = str(args.get("include_all_metadata")) == "true"
        thread = [m for m in self.messages.get(channel, []) if m["ts"] == ts or m.get("thread_ts") == ts]
        limit = int(args.get("limit") or 1000)
        start = int(args.get("cursor") or 0)
        page = thread[start : start + limit]
        more = start + limit < len(thread)
        return _ok(
            messages=[_visible(m, with_metadata) for m in page],
            has_more=more,
            response_metadata={"next_cursor": str(start + limit) if more else ""},
        )

    async def _m_files_getUploadURLExternal(self, args: dict[str, Any]) -> Response:
        if not args.get("filename") or not str(args.get("length", "")).isdigit():
            return _error("invalid_arguments")
        file_id = "F" + uuid.uuid4().hex[:10].upper()
        self.files[file_id] = {"filename": args["filename"], "length": int(args["length"]), "data": None}
        return _ok(upload_url=f"http://127.0.0.1:{self.http_port}/upload/{file_id}", file_id=file_id)

    async def _upload(self, request: Request) -> Response:
        entry = self.files.get(request.path_params["file_id"])
        if entry is None:
            return Response("unknown file", status_code=404)
        entry["data"] = await request.body()
        return Response("OK - " + str(len(entry["data"])))

    async def _m_files_completeUploadExternal(self, args: dict[str, Any]) -> Response:
        shared = []
        for item in json.loads(args.get("files") or "[]"):
            entry = self.files.get(item["id"])
            if entry is None or entry["data"] is None or len(entry["data"]) != entry["length"]:
                return _error("file_not_found")
            entry.update(
                channel=args.get("channel_id"),
                thread_ts=args.get("thread_ts"),
                comment=args.get("initial_comment"),
                title=item.get("title"),
            )
            shared.append({"id": item["id"], "title": item.get("title")})
        return _ok(files=shared)

    def _find(self, channel: str, ts: str) -> dict[str, Any] | None:
        for message in self.messages.get(channel, []):
            if message["ts"] == ts:
                return message
        return None


def _blocks(value: Any) -> list[dict[str, Any]]:
    """`blocks` as a JSON body carries them, or as the JSON string a form carries."""
    blocks = json.loads(value) if isinstance(value, str) else value
    assert isinstance(blocks, list), "blocks must be a list"
    return blocks


def _visible(message: dict[str, Any], with_metadata: bool) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k != "metadata" or with_metadata}


def _ok(**fields: Any) -> Response:
    return JSONResponse({"ok": True, **fields})


def _error(error: str) -> Response:
    return JSONResponse({"ok": False, "error": error})
