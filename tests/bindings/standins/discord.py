"""A local stand-in for Discord: REST (`/api/v10/...`) plus the Gateway (`discord_gateway.py`).

It behaves like Discord where the bindings depend on it:

- REST checks the bot token, answers `GET /gateway/bot` with its own gateway URL, stores channels
  and messages, honours `nonce` + `enforce_nonce` (a repeated nonce within `nonce_ttl_s` returns
  the original message), refuses content over 2000 characters, and rate-limits for real: the
  create and edit routes have buckets of `bucket_limit` requests per `bucket_window_s` per
  channel, reported in `X-RateLimit-*` headers; a request over the limit gets a 429 with
  `retry_after` (and is counted in `violations`). Tests can also force 429s (`force_429`) and
  delay an answer after the work is done (`delay_next_create`), to make a client time out.
- `gateway` is the Gateway stand-in; `dispatch_message(...)` stores a user's message and
  dispatches it (MESSAGE_CREATE) to the current gateway session.
- Message components: a message keeps the `components` it was posted or edited with (an edit
  with `components: []` removes them). `click(...)` is a user pressing a button of a bot message:
  like Discord, only a button the message shows can be pressed; the click is dispatched as
  `INTERACTION_CREATE` (a `MESSAGE_COMPONENT` interaction) with a fresh id and token, and the
  answer must come to `POST /interactions/{id}/{token}/callback` (no bot token needed; an
  interaction is answered once). `UPDATE_MESSAGE` answers edit the message; ephemeral
  `CHANNEL_MESSAGE_WITH_SOURCE` answers are kept in `ephemerals`, visible to the clicker alone.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.bindings.helpers import wait_until
from tests.bindings.standins.discord_gateway import GatewayStandIn
from tests.bindings.standins.forms import parse_multipart
from tests.bindings.standins.server import StandInServers


@dataclass
class Channel:
    id: str
    type: int = 0
    guild_id: str | None = None
    parent_id: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "type": self.type}
        if self.guild_id:
            data["guild_id"] = self.guild_id
        if self.parent_id:
            data["parent_id"] = self.parent_id
        return data


@dataclass
class Edit:
    channel_id: str
    message_id: str
    content: str
    at: float


@dataclass
class _Window:
    start: float = 0.0
    count: int = 0


class DiscordStandIn(StandInServers):
    def __init__(
        self,
        *,
        token: str = "discord-test-token",
        bot_user_id: str = "1000",
        application_id: str = "2000",
        heartbeat_interval_ms: int = 200,
        bucket_limit: int = 5,
        bucket_window_s: float = 0.3,
        nonce_ttl_s: float = 300.0,
    ) -> None:
        self.token = token
        self.bot_user_id = bot_user_id
        self.application_id = application_id
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.bucket_limit = bucket_limit
        self.bucket_window_s = bucket_window_s
        self.nonce_ttl_s = nonce_ttl_s
        self._ids = itertools.count(1_200_000_000_000_000_000)
        self.channels: dict[str, Channel] = {}
        self.messages: dict[str, dict[str, Any]] = {}
        self.posts: list[dict[str, Any]] = []
        self.edits: list[Edit] = []
        self.reactions: list[tuple[str, str, str]] = []
        self.files: list[tuple[str, str, str, bytes]] = []
        self.threads_started: list[tuple[str, str, str]] = []
        self.interactions: dict[str, dict[str, Any]] = {}
        """Interactions dispatched by `click`, by id, with their `response` once answered."""
        self.ephemerals: list[tuple[str, str, str]] = []
        """`(channel id, user id, content)` of ephemeral interaction responses."""
        self.requests: list[tuple[str, str, int, float]] = []
        self.violations = 0
        self.create_attempts = 0
        self.forced_sent = 0
        self._forced: dict[str, list[tuple[float, bool]]] = {}
        self._delay_next_create: float | None = None
        self._nonces: dict[tuple[str, str], tuple[dict[str, Any], float]] = {}
        self._windows: dict[tuple[str, str], _Window] = {}
        self.gateway = GatewayStandIn(
            token=token,
            bot_user_id=bot_user_id,
            application_id=application_id,
            heartbeat_interval_ms=heartbeat_interval_ms,
        )
        self.http_port = 0
        super().__init__()

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> DiscordStandIn:
        self.http_port = await self._serve_http(self._app())
        await self._stack.enter_async_context(self.gateway)
        return self

    @property
    def api_base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/api/v10"

    @property
    def gateway_url(self) -> str:
        return self.gateway.url

    # -- test scripting ----------------------------------------------------------------------

    def add_channel(
        self, channel_id: str, *, guild_id: str | None = None, type: int = 0, parent_id: str | None = None
    ) -> Channel:
        channel = Channel(id=channel_id, type=type, guild_id=guild_id, parent_id=parent_id)
        self.channels[channel_id] = channel
        return channel

    def new_id(self) -> str:
        return str(next(self._ids))

    def force_429(
        self, kind: str, times: int = 1, retry_after: float = 0.2, *, is_global: bool = False
    ) -> None:
        """The next `times` requests of `kind` (`create`, `edit`) get a 429."""
        self._forced.setdefault(kind, []).extend([(retry_after, is_global)] * times)

    def delay_next_create(self, seconds: float) -> None:
        """Store the next created message, then wait `seconds` before answering."""
        self._delay_next_create = seconds

    def user_message(
        self,
        channel_id: str,
        content: str,
        *,
        author_id: str = "42",
        author_name: str = "alice",
        mention_bot: bool = False,
        bot: bool = False,
        roles: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """Store a message written by a user (without dispatching it)."""
        channel = self.channels.get(channel_id) or self.add_channel(channel_id)
        message_id = self.new_id()
        author: dict[str, Any] = {"id": author_id, "username": author_name}
        if bot:
            author["bot"] = True
        message: dict[str, Any] = {
            "id": message_id,
            "channel_id": channel_id,
            "author": author,
            "content": f"<@{self.bot_user_id}> {content}" if mention_bot else content,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            "type": 0,
            "mentions": [{"id": self.bot_user_id, "username": "bot", "bot": True}] if mention_bot else [],
        }
        if channel.guild_id:
            message["guild_id"] = channel.guild_id
            message["member"] = {"roles": list(roles), "nick": None}
        channel.messages.append(message)
        self.messages[message_id] = message
        return message

    async def dispatch_message(self, channel_id: str, content: str, **kwargs: Any) -> dict[str, Any]:
        """A user writes in `channel_id`: the message is stored and dispatched (MESSAGE_CREATE)
        to the current gateway session."""
        message = self.user_message(channel_id, content, **kwargs)
        await self.gateway.dispatch("MESSAGE_CREATE", message)
        return message

    async def wait_for(self, predicate: Callable[[], object], timeout: float = 5.0) -> None:
        await wait_until(predicate, timeout)

    def component_interaction(
        self, message_id: str, custom_id: str, *, user_id: str = "42", user_name: str = "alice"
    ) -> dict[str, Any]:
        """The `MESSAGE_COMPONENT` interaction of a user pressing the button `custom_id` of a bot
        message (kept in `interactions`). Raises AssertionError when the message shows no such
        button."""
        message = self.messages[message_id]
        buttons = [c for row in message.get("components") or [] for c in row.get("components") or []]
        assert any(b.get("custom_id") == custom_id for b in buttons), (
            f"no button {custom_id!r} on {message_id}"
        )
        channel = self.channels[message["channel_id"]]
        interaction: dict[str, Any] = {
            "id": self.new_id(),
            "application_id": self.application_id,
            "type": 3,
            "token": uuid.uuid4().hex,
            "version": 1,
            "channel_id": channel.id,
            "message": dict(message),
            "data": {"custom_id": custom_id, "component_type": 2},
        }
        user = {"id": user_id, "username": user_name}
        if channel.guild_id:
            interaction["guild_id"] = channel.guild_id
            interaction["member"] = {"user": user, "roles": [], "nick": None}
        else:
            interaction["user"] = user
        self.interactions[interaction["id"]] = {"interaction": interaction, "response": None}
        return interaction

    async def click(self, message_id: str, custom_id: str, **user: str) -> str:
        """A user presses a button: the interaction goes out over the Gateway; returns its id."""
        interaction = self.component_interaction(message_id, custom_id, **user)
        await self.gateway.dispatch("INTERACTION_CREATE", interaction)
        return str(interaction["id"])

    def apply_interaction_response(self, interaction_id: str, response: dict[str, Any]) -> int:
        """Carry out an interaction response as Discord does; returns the HTTP status."""
        entry = self.interactions.get(interaction_id)
        if entry is None:
            return 404
        if entry["response"] is not None:
            return 400  # "Interaction has already been acknowledged."
        kind, data = response.get("type"), response.get("data") or {}
        interaction = entry["interaction"]
        if kind == 4:
            user = (interaction.get("member") or {}).get("user") or interaction.get("user") or {}
            if int(data.get("flags") or 0) & 64:
                self.ephemerals.append(
                    (interaction["channel_id"], str(user.get("id")), str(data.get("content")))
                )
            else:
                self.user_message(
                    interaction["channel_id"], str(data.get("content")), author_id=self.bot_user_id
                )
        elif kind == 7:
            message = self.messages[interaction["message"]["id"]]
            if "content" in data:
                message["content"] = str(data["content"])
            if "components" in data:
                message["components"] = data["components"]
            self.edits.append(
                Edit(message["channel_id"], message["id"], message["content"], time.monotonic())
            )
        elif kind != 6:
            return 400
        entry["response"] = response
        return 204

    def response_to(self, interaction_id: str) -> dict[str, Any] | None:
        return self.interactions[interaction_id]["response"]

    def channel_texts(self, channel_id: str) -> list[str]:
        """The current content of the bot's messages in a channel, oldest first."""
        channel = self.channels.get(channel_id)
        if channel is None:
            return []
        return [m["content"] for m in channel.messages if m["author"]["id"] == self.bot_user_id]

    # -- REST --------------------------------------------------------------------------------

    def _app(self) -> Starlette:
        base = "/api/v10"
        return Starlette(
            routes=[
                Route(base + "/gateway/bot", self._gateway_bot, methods=["GET"]),
                Route(base + "/channels/{cid}", self._get_channel, methods=["GET"]),
                Route(base + "/channels/{cid}/messages", self._messages, methods=["GET", "POST"]),
                Route(base + "/channels/{cid}/messages/{mid}", self._edit, methods=["PATCH"]),
                Route(
                    base + "/channels/{cid}/messages/{mid}/reactions/{emoji}/@me",
                    self._react,
                    methods=["PUT"],
                ),
                Route(base + "/channels/{cid}/messages/{mid}/threads", self._thread, methods=["POST"]),
                Route(base + "/interactions/{iid}/{token}/callback", self._callback, methods=["POST"]),
            ]
        )

    def _authorized(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bot {self.token}"

    def _record(self, request: Request, status: int) -> None:
        self.requests.append((request.method, request.url.path, status, time.monotonic()))

    async def _guarded(self, request: Request, kind: str | None, work: Callable[[], Any]) -> Response:
        if not self._authorized(request):
            self._record(request, 401)
            return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
        headers: dict[str, str] = {}
        if kind is not None:
            limited = self._rate_limit(kind, request.path_params["cid"], headers)
            if limited is not None:
                self._record(request, 429)
                return limited
        response: Response = await work()
        response.headers.update(headers)
        self._record(request, response.status_code)
        return response

    def _rate_limit(self, kind: str, channel_id: str, headers: dict[str, str]) -> Response | None:
        now = time.monotonic()
        forced = self._forced.get(kind)
        if forced:
            retry_after, is_global = forced.pop(0)
            self.forced_sent += 1
            return self._too_many(kind, retry_after, is_global=is_global)
        window = self._windows.setdefault((kind, channel_id), _Window(start=now))
        if now - window.start >= self.bucket_window_s:
            window.start, window.count = now, 0
        reset_after = self.bucket_window_s - (now - window.start)
        if window.count >= self.bucket_limit:
            self.violations += 1
            return self._too_many(kind, reset_after, is_global=False)
        window.count += 1
        headers.update(
            {
                "x-ratelimit-limit": str(self.bucket_limit),
                "x-ratelimit-remaining": str(self.bucket_limit - window.count),
                "x-ratelimit-reset": f"{time.time() + reset_after:.3f}",
                "x-ratelimit-reset-after": f"{reset_after:.3f}",
                "x-ratelimit-bucket": f"bucket-{kind}",
            }
        )
        return None

    def _too_many(self, kind: str, retry_after: float, *, is_global: bool) -> Response:
        headers = {
            "retry-after": str(max(1, round(retry_after))),
            "x-ratelimit-scope": "global" if is_global else "user",
        }
        if is_global:
            headers["x-ratelimit-global"] = "true"
        else:
            headers.update(
                {
                    "x-ratelimit-limit": str(self.bucket_limit),
                    "x-ratelimit-remaining": "0",
                    "x-ratelimit-reset-after": f"{retry_after:.3f}",
                    "x-ratelimit-bucket": f"bucket-{kind}",
                }
            )
        body = {
            "message": "You are being rate limited.",
            "retry_after": round(retry_after, 3),
            "global": is_global,
        }
        return JSONResponse(body, status_code=429, headers=headers)

    async def _gateway_bot(self, request: Request) -> Response:
        async def work() -> Response:
            return JSONResponse(
                {
                    "url": self.gateway_url,
                    "shards": 1,
                    "session_start_limit": {
                        "total": 1000,
                        "remaining": 999,
                        "reset_after": 0,
                        "max_concurrency": 1,
                    },
                }
            )

        return await self._guarded(request, None, work)

    async def _get_channel(self, request: Request) -> Response:
        async def work() -> Response:
            channel = self.channels.get(request.path_params["cid"])
            if channel is None:
                return JSONResponse({"message": "Unknown Channel", "code": 10003}, status_code=404)
            return JSONResponse(channel.as_json())

        return await self._guarded(request, None, work)

    async def _messages(self, request: Request) -> Response:
        if request.method == "GET":
            return await self._guarded(request, None, lambda: self._list(request))
        return await self._guarded(request, "create", lambda: self._create(request))

    async def _list(self, request: Request) -> Response:
        channel = self.channels.get(request.path_params["cid"])
        if channel is None:
            return JSONResponse({"message": "Unknown Channel", "code": 10003}, status_code=404)
        after = int(request.query_params.get("after", "0"))
        limit = min(int(request.query_params.get("limit", "50")), 100)
        newer = [m for m in channel.messages if int(m["id"]) > after]
        page = newer[:limit]
        return JSONResponse(list(reversed(page)))  # Discord lists newest first

    async def _create(self, request: Request) -> Response:
        self.create_attempts += 1
        channel_id = request.path_params["cid"]
        content_type = request.headers.get("content-type", "")
        body = await request.body()
        upload: tuple[str, bytes] | None = None
        if content_type.startswith("multipart/form-data"):
            parts = {p.name: p for p in parse_multipart(content_type, body)}
            payload = json.loads(parts["payload_json"].data)
            file_part = parts.get("files[0]")
            if file_part is not None:
                upload = (file_part.filename or "file", file_part.data)
        else:
            payload = json.loads(body)
        content = str(payload.get("content") or "")
        if len(content) > 2000:
            return JSONResponse({"message": "Invalid Form Body", "code": 50035}, status_code=400)
        if not content.strip() and upload is None:
            return JSONResponse({"message": "Cannot send an empty message", "code": 50006}, status_code=400)
        nonce = payload.get("nonce")
        now = time.monotonic()
        if nonce is not None and payload.get("enforce_nonce"):
            seen = self._nonces.get((channel_id, str(nonce)))
            if seen is not None and now - seen[1] < self.nonce_ttl_s:
                return JSONResponse(seen[0])
        channel = self.channels.get(channel_id) or self.add_channel(channel_id)
        message = {
            "id": self.new_id(),
            "channel_id": channel_id,
            "author": {"id": self.bot_user_id, "username": "bot", "bot": True},
            "content": content,
            "type": 19 if payload.get("message_reference") else 0,
            "nonce": nonce,
            "mentions": [],
            "attachments": [{"filename": upload[0], "size": len(upload[1])}] if upload else [],
        }
        if payload.get("message_reference"):
            message["message_reference"] = payload["message_reference"]
        if payload.get("components"):
            message["components"] = payload["components"]
        channel.messages.append(message)
        self.messages[message["id"]] = message
        self.posts.append({**message, "at": now})
        if upload is not None:
            self.files.append((channel_id, message["id"], upload[0], upload[1]))
        if nonce is not None and payload.get("enforce_nonce"):
            self._nonces[(channel_id, str(nonce))] = (message, now)
        if self._delay_next_create is not None:
            delay, self._delay_next_create = self._delay_next_create, None
            await asyncio.sleep(delay)
        return JSONResponse(message)

    async def _edit(self, request: Request) -> Response:
        async def work() -> Response:
            message = self.messages.get(request.path_params["mid"])
            if message is None or message["channel_id"] != request.path_params["cid"]:
                return JSONResponse({"message": "Unknown Message", "code": 10008}, status_code=404)
            if message["author"]["id"] != self.bot_user_id:
                return JSONResponse(
                    {"message": "Cannot edit a message authored by another user", "code": 50005}, 403
                )
            payload = await request.json()
            content = str(payload.get("content") or "")
            if len(content) > 2000:
                return JSONResponse({"message": "Invalid Form Body", "code": 50035}, status_code=400)
            message["content"] = content
            if "components" in payload:
                message["components"] = payload["components"]
            self.edits.append(Edit(message["channel_id"], message["id"], content, time.monotonic()))
            return JSONResponse(message)

        return await self._guarded(request, "edit", work)

    async def _callback(self, request: Request) -> Response:
        iid, token = request.path_params["iid"], request.path_params["token"]
        entry = self.interactions.get(iid)
        if entry is None or entry["interaction"]["token"] != token:
            self._record(request, 404)
            return JSONResponse({"message": "Unknown interaction", "code": 10062}, status_code=404)
        status = self.apply_interaction_response(iid, await request.json())
        self._record(request, status)
        if status == 400:
            return JSONResponse(
                {"message": "Interaction has already been acknowledged.", "code": 40060}, status_code=400
            )
        return Response(status_code=204)

    async def _react(self, request: Request) -> Response:
        async def work() -> Response:
            if request.path_params["mid"] not in self.messages:
                return JSONResponse({"message": "Unknown Message", "code": 10008}, status_code=404)
            p = request.path_params
            self.reactions.append((p["cid"], p["mid"], p["emoji"]))
            return Response(status_code=204)

        return await self._guarded(request, None, work)

    async def _thread(self, request: Request) -> Response:
        async def work() -> Response:
            cid, mid = request.path_params["cid"], request.path_params["mid"]
            if mid in self.channels:
                return JSONResponse(
                    {"message": "A thread has already been created for this message", "code": 160004}, 400
                )
            payload = await request.json()
            parent = self.channels.get(cid)
            thread = self.add_channel(
                mid, type=11, parent_id=cid, guild_id=parent.guild_id if parent else None
            )
            self.threads_started.append((cid, mid, str(payload.get("name"))))
            return JSONResponse(thread.as_json(), status_code=201)

        return await self._guarded(request, None, work)
