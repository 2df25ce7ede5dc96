"""When a run's OpenClaw text deltas may go out: at most one every `interval_s`, and no more often
than `stretch` of the time the message has been streaming.

OpenClaw's `agent` assistant deltas and `chat` deltas each carry the whole reply so far, so a reply
sent one word at a time costs bytes quadratic in its length (about 90 MB for 4,000 words). OpenClaw
itself paces chat deltas at 75 ms or more and coalesces what arrives meanwhile; we do the same for
both shapes, once per run for every connection (the frames are rendered once and shared). A held
delta goes out when its turn comes, carrying all the text that arrived meanwhile: with the next
delta of the run, before any other OpenClaw frame of the run, or by the caller's timer at
`deadline` when the stream pauses.

The stretch keeps the bytes linear in the reply: after `interval_s / stretch` of streaming (7.5 s
with the defaults), the spacing grows with the message's age (0.8 s after 80 s), so the deltas of
one message carry about `1 / stretch` times its text in all (plus the first 7.5 s worth), however
fast or slow the model streams. The final frame always carries the whole text.

Sans-I/O: the caller passes the time (`time.monotonic()` seconds) and runs the timer.
"""

from __future__ import annotations

import msgspec

DEFAULT_INTERVAL_S = 0.075
"""OpenClaw's own pacing of chat deltas (`LIVE_TEXT_PACING_MS`)."""
DEFAULT_STRETCH = 0.01
"""Spacing as a fraction of the time the message has streamed, once that is the longer one."""


class DeltaPacing(msgspec.Struct, frozen=True):
    """The pacing rule. `interval_s` 0 sends every delta as it comes."""

    interval_s: float = DEFAULT_INTERVAL_S
    stretch: float = DEFAULT_STRETCH

    def next_at(self, clock: DeltaClock) -> float:
        """When the next delta of a message may go out (`clock.sent_at` is not None)."""
        sent_at, first = clock.sent_at, clock.first_sent_at
        assert sent_at is not None
        streamed = sent_at - first if first is not None else 0.0
        return sent_at + max(self.interval_s, self.stretch * streamed)

    def allows(self, clock: DeltaClock, now: float) -> bool:
        """Whether a delta may go out at `now`."""
        return self.interval_s <= 0 or clock.sent_at is None or now >= self.next_at(clock)


class DeltaClock:
    """When one run's current message last sent a delta (reset when a new message starts)."""

    __slots__ = ("first_sent_at", "sent_at")

    def __init__(self) -> None:
        self.first_sent_at: float | None = None
        self.sent_at: float | None = None

    def sent(self, now: float) -> None:
        if self.first_sent_at is None:
            self.first_sent_at = now
        self.sent_at = now

    def restart(self) -> None:
        """A new message: its age starts again (the run's spacing still holds)."""
        self.first_sent_at = None
