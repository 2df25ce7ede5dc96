"""How the reply relay posts to Discord (`MessageTransport`).

A route with a `thread_id` different from its `channel_id` asks for the reply in a thread started
on the message `thread_id` of channel `channel_id`; the thread is started on first use (Discord
gives it the message's id) and remembered for the life of the transport (bounded).
"""

from __future__ import annotations

from collections import OrderedDict

from bindings.discord.rest import DiscordRest
from bindings.host import ReplyRoute

_MAX_THREADS = 4096


class DiscordTransport:
    def __init__(self, rest: DiscordRest) -> None:
        self._rest = rest
        self._threads: OrderedDict[str, None] = OrderedDict()
        self._thread_names: OrderedDict[str, str] = OrderedDict()

    def name_thread(self, thread_id: str, name: str) -> None:
        """The name to give the thread `thread_id` if it has to be started."""
        self._thread_names[thread_id] = name
        while len(self._thread_names) > _MAX_THREADS:
            self._thread_names.popitem(last=False)

    def started(self, thread_id: str) -> bool:
        """Whether this transport started the thread `thread_id` for a reply."""
        return thread_id in self._threads

    async def target_channel(self, route: ReplyRoute) -> str:
        """The channel replies to `route` are posted in (starting its thread if needed)."""
        thread = route.thread_id
        if thread is None or thread == route.channel_id:
            return route.channel_id
        if thread not in self._threads:
            name = self._thread_names.get(thread, "reply")
            await self._rest.start_thread(route.channel_id, thread, name)
            self._threads[thread] = None
            while len(self._threads) > _MAX_THREADS:
                self._threads.popitem(last=False)
        return thread

    async def post_message(self, route: ReplyRoute, text: str, *, key: str, maybe_sent: bool = False) -> str:
        """Post with `key` as the message's enforced nonce, so Discord itself answers a second
        post with the first message instead of making another. `maybe_sent`: that message may
        hold an older text; it is edited to `text` then."""
        target = await self.target_channel(route)
        reply_to = route.reply_to if target == route.channel_id else None
        message = await self._rest.create_message(target, text, nonce=key, reply_to=reply_to)
        if maybe_sent and message.get("content") != text:
            await self._rest.edit_message(target, str(message["id"]), text)
        return str(message["id"])

    async def edit_message(self, route: ReplyRoute, message_id: str, text: str) -> None:
        target = await self.target_channel(route)
        await self._rest.edit_message(target, message_id, text)
