"""How the reply relay posts to Slack (`MessageTransport`): `chat.postMessage` into the route's
channel (and thread), `chat.update` for edits. A Slack message id is its `ts`."""

from __future__ import annotations

from bindings.host import ReplyRoute
from bindings.slack.web import SlackWeb


class SlackTransport:
    def __init__(self, web: SlackWeb) -> None:
        self._web = web

    async def post_message(self, route: ReplyRoute, text: str, *, key: str, maybe_sent: bool = False) -> str:
        return await self._web.post_message(
            route.channel_id, text, key=key, thread_ts=route.thread_id, maybe_sent=maybe_sent
        )

    async def edit_message(self, route: ReplyRoute, message_id: str, text: str) -> None:
        await self._web.update_message(route.channel_id, message_id, text)
