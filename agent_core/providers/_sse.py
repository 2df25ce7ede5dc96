"""Server-sent events, sans I/O: bytes in, `ServerSentEvent`s out.

The decoder follows the rules LLM providers rely on: lines end with ``\\r``, ``\\n`` or
``\\r\\n`` (also when the pair is split across two network reads), lines starting with ``:``
are comments, several ``data`` lines of one event are joined with ``\\n``, one space after the
colon is dropped, and an empty line dispatches the event. Like pi's decoder, an event is
dispatched when it has an ``event`` name or any ``data`` line, and whatever is pending when the
body ends is still dispatched by `close()`.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    event: str | None
    data: str
    id: str | None = None
    raw: tuple[str, ...] = field(default=(), compare=False)
    """The field lines the event was built from (for error messages)."""


class SSEDecoder:
    """Incremental SSE decoder. Feed body bytes with `feed`; call `close` at end of body.

    State (a partial line and the fields of the event being built) lives until `close`.
    """

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._skip_lf = False
        self._started = False
        self._event: str | None = None
        self._id: str | None = None
        self._data: list[str] = []
        self._raw: list[str] = []

    def feed(self, chunk: bytes | str) -> list[ServerSentEvent]:
        """Decode one piece of the body; returns the events it completed."""
        text = chunk if isinstance(chunk, str) else self._text.decode(chunk)
        return self._consume(text, final=False)

    def close(self) -> list[ServerSentEvent]:
        """End of body: the last unterminated line and any pending event are dispatched."""
        events = self._consume(self._text.decode(b"", final=True), final=True)
        if self._buffer:
            event = self._line(self._buffer)
            self._buffer = ""
            if event is not None:
                events.append(event)
        trailing = self._flush()
        if trailing is not None:
            events.append(trailing)
        return events

    def _consume(self, text: str, *, final: bool) -> list[ServerSentEvent]:
        if not text:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if text.startswith("\n"):
                text = text[1:]
        if not self._started and text:
            self._started = True
            if text.startswith("\ufeff"):
                text = text[1:]
        buffer = self._buffer + text
        events: list[ServerSentEvent] = []
        start = 0
        length = len(buffer)
        while start < length:
            cr = buffer.find("\r", start)
            lf = buffer.find("\n", start)
            if cr == -1 and lf == -1:
                break
            end = lf if cr == -1 else cr if lf == -1 else min(cr, lf)
            line = buffer[start:end]
            if buffer[end] == "\r":
                if end + 1 < length:
                    start = end + 2 if buffer[end + 1] == "\n" else end + 1
                else:
                    # "\r" is the last character read: a "\n" may follow in the next read.
                    start = end + 1
                    self._skip_lf = not final
            else:
                start = end + 1
            event = self._line(line)
            if event is not None:
                events.append(event)
        self._buffer = buffer[start:]
        return events

    def _line(self, line: str) -> ServerSentEvent | None:
        if line == "":
            return self._flush()
        self._raw.append(line)
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _flush(self) -> ServerSentEvent | None:
        if self._event is None and not self._data:
            self._raw.clear()
            return None
        event = ServerSentEvent(self._event, "\n".join(self._data), self._id, tuple(self._raw))
        self._event = None
        self._data = []
        self._raw = []
        return event
