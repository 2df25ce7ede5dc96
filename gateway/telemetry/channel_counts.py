"""Chat messages in and out, counted where a binding meets the daemon: its host.

`CountedChannelHost` is the `ChannelHost` of a binding that also tells `MessageTally` of each
message the binding submits (`in`) and each reply message it puts in the outbox to post (`out`,
one per platform message: a reply split in chunks counts each chunk; edits count nothing).
Imported by `gateway.channels` only, which the daemon loads when `[bindings]` configures one.
"""

from __future__ import annotations

from collections.abc import Callable

from bindings import InboundMessage, OutboxRecord, SubmitResult
from gateway.channel_host import ChannelHost, StateReport
from gateway.channel_inputs import ChannelInputs
from gateway.channel_replies import ReplyFeed
from gateway.channel_store import ChannelStore

MessageObserver = Callable[[str, str], None]
"""`(channel, direction)`: `discord` or `slack`, `in` or `out`."""


class MessageTally:
    """Where the hosts report messages; `observer` is set once metrics are running."""

    def __init__(self) -> None:
        self.observer: MessageObserver | None = None

    def count(self, channel: str, direction: str) -> None:
        if self.observer is not None:
            self.observer(channel, direction)


class CountedChannelHost(ChannelHost):
    """A binding's host that counts its messages in `tally`."""

    def __init__(
        self,
        binding_id: str,
        *,
        tally: MessageTally,
        inputs: ChannelInputs,
        feed: ReplyFeed,
        store: ChannelStore,
        report_state: StateReport,
    ) -> None:
        super().__init__(binding_id, inputs=inputs, feed=feed, store=store, report_state=report_state)
        self._channel = binding_id.partition(":")[0]
        self._tally = tally

    async def submit(self, inbound: InboundMessage) -> SubmitResult:
        result = await super().submit(inbound)
        self._tally.count(self._channel, "in")
        return result

    async def outbox_put(self, record: OutboxRecord) -> None:
        await super().outbox_put(record)
        self._tally.count(self._channel, "out")
