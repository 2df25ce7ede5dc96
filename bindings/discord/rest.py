"""Discord's REST API over httpx, with rate-limit buckets and idempotent sends.

Every call goes to `base_url` (a setting: `https://discord.com/api/v10` in production, a stand-in
in tests). Rate limits: each call holds its route (method + path template + major parameter) in
the limiter for its attempts; a 429 pauses the bucket (or every bucket, for the global limit) for
`retry_after` and the same request is sent again, however many times it takes. Transport errors
and 5xx answers are retried `max_attempts` times with backoff; that is safe because message
creation carries `nonce` + `enforce_nonce` (Discord returns the original message for a nonce it
saw in the last few minutes, so a POST whose answer was lost is not posted twice), and the other
calls are idempotent (PATCH to the same content, PUT of a reaction).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from bindings.errors import PlatformRequestError, PlatformUnavailableError
from bindings.ratelimit import RateLimiter, parse_discord_rate_limit

USER_AGENT = "DiscordBot (https://github.com/agent-gateway/agent-gateway, 0.1.0)"
THREAD_ALREADY_EXISTS = 160004
MAX_FILE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class GatewayBot:
    url: str
    shards: int
    session_start_remaining: int | None
    session_start_reset_after_s: float


def snowflake_key(message_id: str) -> int:
    """Discord ids grow with time; compare them as integers."""
    try:
        return int(message_id)
    except ValueError:
        return 0


class DiscordRest:
    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        base_url: str,
        token: str,
        limiter: RateLimiter | None = None,
        max_attempts: int = 4,
        backoff_s: float = 0.5,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._http = http
        self._base = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bot {token}", "User-Agent": USER_AGENT}
        self.limiter = limiter or RateLimiter()
        self._max_attempts = max_attempts
        self._backoff_s = backoff_s
        self._sleep = sleep

    async def request(
        self,
        method: str,
        route: str,
        major: str,
        path: str,
        **kwargs: Any,
    ) -> httpx.Response:
        """Send one API request (`route` is the path template naming the rate-limit route,
        `major` its major parameter). Raises `PlatformRequestError` for 4xx other than 429,
        `PlatformUnavailableError` when the attempts are used up."""
        url = self._base + path
        failures = 0
        async with self.limiter.route(f"{method} {route}", major) as gate:
            while True:
                await gate.wait()
                try:
                    response = await self._http.request(method, url, headers=self._headers, **kwargs)
                except httpx.TransportError as exc:
                    failures += 1
                    if failures >= self._max_attempts:
                        raise PlatformUnavailableError(f"{method} {route}: {exc!r}") from exc
                    await self._sleep(self._backoff_s * 2 ** (failures - 1))
                    continue
                body = _json(response)
                gate.observe(parse_discord_rate_limit(response.status_code, response.headers, body))
                if response.status_code == 429:
                    continue
                if response.status_code >= 500:
                    failures += 1
                    if failures >= self._max_attempts:
                        raise PlatformUnavailableError(f"{method} {route}: HTTP {response.status_code}")
                    await self._sleep(self._backoff_s * 2 ** (failures - 1))
                    continue
                if response.status_code >= 400:
                    message = body.get("message", "") if isinstance(body, dict) else response.text[:200]
                    code = body.get("code") if isinstance(body, dict) else None
                    raise PlatformRequestError(
                        f"{method} {route}: HTTP {response.status_code} {message}",
                        status=response.status_code,
                        code=code,
                    )
                return response

    async def get_gateway_bot(self) -> GatewayBot:
        data = (await self.request("GET", "/gateway/bot", "", "/gateway/bot")).json()
        limit = data.get("session_start_limit") or {}
        return GatewayBot(
            url=str(data["url"]),
            shards=int(data.get("shards", 1)),
            session_start_remaining=limit.get("remaining"),
            session_start_reset_after_s=float(limit.get("reset_after", 0)) / 1000.0,
        )

    async def create_message(
        self,
        channel_id: str,
        content: str,
        *,
        nonce: str,
        reply_to: str | None = None,
        components: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Post a message (with message `components`, such as buttons, when given); `nonce`
        (at most 25 characters) makes it idempotent."""
        payload: dict[str, Any] = {
            "content": content,
            "nonce": nonce,
            "enforce_nonce": True,
            "allowed_mentions": {"parse": []},
        }
        if components is not None:
            payload["components"] = components
        if reply_to is not None:
            payload["message_reference"] = {"message_id": reply_to, "fail_if_not_exists": False}
        route = "/channels/{channel_id}/messages"
        response = await self.request(
            "POST", route, channel_id, f"/channels/{channel_id}/messages", json=payload
        )
        return dict(response.json())

    async def edit_message(
        self,
        channel_id: str,
        message_id: str,
        content: str,
        *,
        components: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Replace a message's content (and its components when given: `[]` removes them)."""
        route = "/channels/{channel_id}/messages/{message_id}"
        path = f"/channels/{channel_id}/messages/{message_id}"
        payload: dict[str, Any] = {"content": content, "allowed_mentions": {"parse": []}}
        if components is not None:
            payload["components"] = components
        response = await self.request("PATCH", route, channel_id, path, json=payload)
        return dict(response.json())

    async def add_reaction(self, channel_id: str, message_id: str, emoji: str) -> None:
        """React with a Unicode emoji or a custom one written `name:id`."""
        route = "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me"
        path = f"/channels/{channel_id}/messages/{message_id}/reactions/{quote(emoji, safe='')}/@me"
        await self.request("PUT", route, channel_id, path)

    async def send_file(
        self,
        channel_id: str,
        filename: str,
        data: bytes,
        *,
        nonce: str,
        content: str | None = None,
        content_type: str = "application/octet-stream",
    ) -> dict[str, Any]:
        """Upload one file as a new message (multipart: `payload_json` + `files[0]`)."""
        if len(data) > MAX_FILE_BYTES:
            raise PlatformRequestError(f"file too large: {len(data)} bytes", status=413)
        payload: dict[str, Any] = {
            "nonce": nonce,
            "enforce_nonce": True,
            "allowed_mentions": {"parse": []},
            "attachments": [{"id": 0, "filename": filename}],
        }
        if content:
            payload["content"] = content
        response = await self.request(
            "POST",
            "/channels/{channel_id}/messages",
            channel_id,
            f"/channels/{channel_id}/messages",
            data={"payload_json": json.dumps(payload)},
            files={"files[0]": (filename, data, content_type)},
        )
        return dict(response.json())

    async def messages_after(self, channel_id: str, after: str, limit: int = 100) -> list[dict[str, Any]]:
        """Messages of `channel_id` newer than `after`, oldest first (one page, at most 100)."""
        response = await self.request(
            "GET",
            "/channels/{channel_id}/messages",
            channel_id,
            f"/channels/{channel_id}/messages",
            params={"after": after, "limit": min(max(limit, 1), 100)},
        )
        messages = [dict(m) for m in response.json()]
        return sorted(messages, key=lambda m: snowflake_key(str(m.get("id", ""))))

    async def interaction_callback(self, interaction_id: str, token: str, response: dict[str, Any]) -> None:
        """Answer an interaction received over the Gateway (`POST
        /interactions/{id}/{token}/callback`); Discord waits three seconds for it."""
        route = "/interactions/{interaction_id}/{interaction_token}/callback"
        path = f"/interactions/{interaction_id}/{token}/callback"
        await self.request("POST", route, interaction_id, path, json=response)

    async def get_channel(self, channel_id: str) -> dict[str, Any]:
        response = await self.request("GET", "/channels/{channel_id}", channel_id, f"/channels/{channel_id}")
        return dict(response.json())

    async def start_thread(self, channel_id: str, message_id: str, name: str) -> str:
        """Start a thread on a message and return the thread's channel id (a thread started from
        a message has the message's id). An existing thread on that message is not an error."""
        route = "/channels/{channel_id}/messages/{message_id}/threads"
        path = f"/channels/{channel_id}/messages/{message_id}/threads"
        try:
            response = await self.request(
                "POST",
                route,
                channel_id,
                path,
                json={"name": name[:100] or "reply", "auto_archive_duration": 1440},
            )
        except PlatformRequestError as exc:
            if exc.code == THREAD_ALREADY_EXISTS:
                return message_id
            raise
        return str(response.json().get("id", message_id))


def _json(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return None
