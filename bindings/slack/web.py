"""Slack's Web API over httpx.

Every method is `POST {base_url}{method}` (the base URL is a setting: `https://slack.com/api/` in
production, a stand-in in tests) with the bot token, or the app-level token for
`apps.connections.open`. Slack answers refusals with HTTP 200 and `{"ok": false, "error": ...}`
(raised as `PlatformRequestError` with that error as `code`) and throttling with HTTP 429 and
`Retry-After`: the method's bucket pauses for that long and the same request is sent again.

Idempotency. Reads, `chat.update` and `reactions.add` are safe to resend. `chat.postMessage` has
no idempotency key, so it is only resent blindly when the request cannot have reached Slack
(connection refused, pool timeout) or was throttled. When the outcome is unknown (a read timeout
after the request was written, a dropped connection, a 5xx), we look for the message in the
conversation first: every post carries our outbox key in its `metadata`, and only when no
message with that key is found is it posted again. A post that a previous process may have made
(`maybe_sent`, the outbox's `pending` records after a restart) is looked for the same way first.
The search reads at most `history_pages` pages of `history_limit` messages: the newest of the
channel, or the thread from its start.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from bindings.errors import PlatformRequestError, PlatformUnavailableError
from bindings.ratelimit import RateLimiter, parse_slack_rate_limit

METADATA_EVENT_TYPE = "agent_gateway_reply"
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True, kw_only=True)
class AuthInfo:
    user_id: str
    team_id: str
    bot_id: str | None


class _OutcomeUnknown(Exception):
    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class SlackWeb:
    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        base_url: str,
        bot_token: str,
        app_token: str | None = None,
        limiter: RateLimiter | None = None,
        max_attempts: int = 4,
        backoff_s: float = 0.5,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        history_limit: int = 100,
        history_pages: int = 5,
    ) -> None:
        self._http = http
        self._base = base_url if base_url.endswith("/") else base_url + "/"
        self._bot_token = bot_token
        self._app_token = app_token
        self.limiter = limiter or RateLimiter()
        self._max_attempts = max_attempts
        self._backoff_s = backoff_s
        self._sleep = sleep
        self._history_limit = history_limit
        self._history_pages = history_pages
        self.reconciled = 0
        """Posts whose unknown outcome was settled by finding the message (observable)."""

    async def call(
        self,
        method: str,
        *,
        json_body: dict[str, Any] | None = None,
        form: dict[str, Any] | None = None,
        major: str = "",
        token: Literal["bot", "app"] = "bot",
        idempotent: bool = True,
    ) -> dict[str, Any]:
        """Call a Web API method and return its JSON answer (with `ok: true`)."""
        try:
            return await self._call(method, json_body, form, major, token, idempotent=idempotent)
        except _OutcomeUnknown as exc:
            raise PlatformUnavailableError(f"{method}: {exc.detail}") from exc

    async def _call(
        self,
        method: str,
        json_body: dict[str, Any] | None,
        form: dict[str, Any] | None,
        major: str,
        token: Literal["bot", "app"],
        *,
        idempotent: bool,
    ) -> dict[str, Any]:
        secret = self._bot_token if token == "bot" else self._app_token
        if not secret:
            raise PlatformRequestError(f"{method}: no {token} token configured", status=0, code="no_token")
        headers = {"Authorization": f"Bearer {secret}"}
        failures = 0
        async with self.limiter.route(method, major) as gate:
            while True:
                await gate.wait()
                try:
                    response = await self._http.post(
                        self._base + method, headers=headers, json=json_body, data=form
                    )
                except httpx.TransportError as exc:
                    if not idempotent and not isinstance(exc, _NOT_SENT):
                        raise _OutcomeUnknown(repr(exc)) from exc
                    failures += 1
                    if failures >= self._max_attempts:
                        raise PlatformUnavailableError(f"{method}: {exc!r}") from exc
                    await self._sleep(self._backoff_s * 2 ** (failures - 1))
                    continue
                gate.observe(parse_slack_rate_limit(response.status_code, response.headers))
                if response.status_code == 429:
                    continue
                if response.status_code >= 500:
                    if not idempotent:
                        raise _OutcomeUnknown(f"HTTP {response.status_code}")
                    failures += 1
                    if failures >= self._max_attempts:
                        raise PlatformUnavailableError(f"{method}: HTTP {response.status_code}")
                    await self._sleep(self._backoff_s * 2 ** (failures - 1))
                    continue
                return _checked(method, response)

    async def auth_test(self) -> AuthInfo:
        data = await self.call("auth.test")
        return AuthInfo(
            user_id=str(data["user_id"]), team_id=str(data.get("team_id", "")), bot_id=data.get("bot_id")
        )

    async def open_connection(self) -> str:
        """`apps.connections.open`: a fresh single-use Socket Mode URL."""
        data = await self.call("apps.connections.open", token="app")
        return str(data["url"])

    async def post_message(
        self,
        channel: str,
        text: str,
        *,
        key: str,
        thread_ts: str | None = None,
        maybe_sent: bool = False,
        blocks: list[dict[str, Any]] | None = None,
    ) -> str:
        """Post `text` (shown through Block Kit `blocks` when given; `text` is then the
        notification's fallback) and return its `ts`; never posts twice for one `key` (see the
        module docstring). `maybe_sent`: an earlier attempt may have reached Slack, look for it
        first (and, when found, make it show `text`)."""
        if maybe_sent:
            earlier = await self._find(channel, key, thread_ts)
            if earlier is not None:
                self.reconciled += 1
                ts = str(earlier["ts"])
                if earlier.get("text") != text:
                    await self.update_message(channel, ts, text)
                return ts
        body: dict[str, Any] = {
            "channel": channel,
            "text": text,
            "unfurl_links": False,
            "unfurl_media": False,
            "metadata": {"event_type": METADATA_EVENT_TYPE, "event_payload": {"key": key}},
        }
        if thread_ts is not None:
            body["thread_ts"] = thread_ts
        if blocks is not None:
            body["blocks"] = blocks
        unknown = 0
        while True:
            try:
                data = await self._call("chat.postMessage", body, None, channel, "bot", idempotent=False)
                return str(data["ts"])
            except _OutcomeUnknown as exc:
                unknown += 1
                await self._sleep(self._backoff_s * 2 ** (unknown - 1))
                found = await self.find_by_key(channel, key, thread_ts=thread_ts)
                if found is not None:
                    self.reconciled += 1
                    return found
                if unknown >= self._max_attempts:
                    raise PlatformUnavailableError(f"chat.postMessage: {exc.detail}") from exc

    async def find_by_key(self, channel: str, key: str, *, thread_ts: str | None = None) -> str | None:
        """The `ts` of our message carrying `key` among the conversation's latest messages."""
        found = await self._find(channel, key, thread_ts)
        return None if found is None else str(found["ts"])

    async def _find(self, channel: str, key: str, thread_ts: str | None) -> dict[str, Any] | None:
        form: dict[str, Any] = {
            "channel": channel,
            "include_all_metadata": "true",
            "limit": str(self._history_limit),
        }
        method = "conversations.history"
        if thread_ts is not None:
            method, form["ts"] = "conversations.replies", thread_ts
        for _ in range(self._history_pages):
            data = await self.call(method, form=form, major=channel)
            for message in data.get("messages") or []:
                metadata = message.get("metadata") or {}
                if (
                    metadata.get("event_type") == METADATA_EVENT_TYPE
                    and (metadata.get("event_payload") or {}).get("key") == key
                ):
                    return dict(message)
            cursor = (data.get("response_metadata") or {}).get("next_cursor")
            if not data.get("has_more") or not cursor:
                return None
            form["cursor"] = cursor
        return None

    async def update_message(
        self, channel: str, ts: str, text: str, *, blocks: list[dict[str, Any]] | None = None
    ) -> None:
        """Replace a message's text (and its blocks when given: `[]` removes them)."""
        body: dict[str, Any] = {"channel": channel, "ts": ts, "text": text}
        if blocks is not None:
            body["blocks"] = blocks
        await self.call("chat.update", json_body=body, major=channel)

    async def post_ephemeral(
        self, channel: str, user: str, text: str, *, thread_ts: str | None = None
    ) -> None:
        """`chat.postEphemeral`: a message in `channel` that only `user` sees."""
        body: dict[str, Any] = {"channel": channel, "user": user, "text": text}
        if thread_ts is not None:
            body["thread_ts"] = thread_ts
        await self.call("chat.postEphemeral", json_body=body, major=channel)

    async def add_reaction(self, channel: str, ts: str, name: str) -> None:
        """React with the emoji `name` (with or without colons); reacting twice is not an error."""
        body = {"channel": channel, "timestamp": ts, "name": name.strip(":")}
        try:
            await self.call("reactions.add", json_body=body, major=channel)
        except PlatformRequestError as exc:
            if exc.code != "already_reacted":
                raise

    async def upload_file(
        self,
        channel: str,
        filename: str,
        data: bytes,
        *,
        thread_ts: str | None = None,
        comment: str | None = None,
    ) -> str:
        """Share a file in `channel` (`files.getUploadURLExternal`, upload, then
        `files.completeUploadExternal`); returns the file id."""
        ticket = await self.call(
            "files.getUploadURLExternal", form={"filename": filename, "length": str(len(data))}
        )
        upload_url, file_id = str(ticket["upload_url"]), str(ticket["file_id"])
        try:
            response = await self._http.post(
                upload_url, content=data, headers={"Content-Type": "application/octet-stream"}
            )
        except httpx.TransportError as exc:
            raise PlatformUnavailableError(f"file upload: {exc!r}") from exc
        if response.status_code != 200:
            raise PlatformRequestError(
                f"file upload: HTTP {response.status_code}", status=response.status_code
            )
        form: dict[str, Any] = {
            "files": json.dumps([{"id": file_id, "title": filename}]),
            "channel_id": channel,
        }
        if thread_ts is not None:
            form["thread_ts"] = thread_ts
        if comment:
            form["initial_comment"] = comment
        await self.call("files.completeUploadExternal", form=form, major=channel)
        return file_id


def _checked(method: str, response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError as exc:
        raise PlatformRequestError(
            f"{method}: HTTP {response.status_code}, not JSON", status=response.status_code
        ) from exc
    if not isinstance(data, dict):
        raise PlatformRequestError(f"{method}: unexpected answer", status=response.status_code)
    if response.status_code >= 400 or not data.get("ok"):
        error = str(data.get("error") or f"http_{response.status_code}")
        raise PlatformRequestError(f"{method}: {error}", status=response.status_code, code=error)
    return data
