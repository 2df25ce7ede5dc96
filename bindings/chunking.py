"""Split a reply into messages that fit a platform's limit.

Rules, in order of preference for each cut:

1. never inside a code fence: cut at a paragraph break, else a line break, else after a space,
   outside any fence, at the latest such point that still fills half the message;
2. inside a fence only when that fence alone is longer than a message (it cannot stay whole
   anyway): at the latest line break that fills half the message; the fence is closed at the end
   of the chunk and reopened, with its info string, at the start of the next;
3. else the latest cut outside fences, however short the chunk gets (a fence that fits in a
   message moves whole to the next one);
4. else a hard cut at the limit (closing and reopening the fence if it falls inside one).

Each `Chunk` keeps the exact slice of the original (`body`) apart from the fence lines it adds
(`prefix`, `suffix`), so `"".join(c.body for c in chunks) == text` always holds, and
`len(c.text) <= limit` for every chunk. Lengths are counted in code points.

Limits: Discord 2000 characters per message. Slack accepts 40,000 characters in `text`, but long
messages are hard to read and collapse in clients, so replies are cut at 4,000 characters and
continued in further messages (in the same thread when the reply is threaded).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DISCORD_MESSAGE_LIMIT = 2000
SLACK_MESSAGE_LIMIT = 4000
SLACK_TEXT_HARD_LIMIT = 40_000
MIN_LIMIT = 64
"""Below this a reopened fence plus its closer would leave no room for content."""

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_MAX_MARKER = 16
"""Longer runs of backticks are treated as text: no real fence needs them, and closing and
reopening them would eat the message."""
_MAX_REOPEN = 32
"""An opener line longer than this is reopened with its marker only."""


@dataclass(frozen=True)
class Fence:
    """An open code fence: its marker (```` ``` ```` or `~~~`, possibly longer) and the line that
    opened it."""

    marker: str
    opener: str

    @property
    def reopen(self) -> str:
        return self.opener.strip() if len(self.opener.strip()) <= _MAX_REOPEN else self.marker


@dataclass(frozen=True)
class Chunk:
    prefix: str
    body: str
    suffix: str

    @property
    def text(self) -> str:
        return self.prefix + self.body + self.suffix


def _opener(line: str) -> Fence | None:
    m = _FENCE.match(line)
    if m is None or len(m.group(1)) > _MAX_MARKER:
        return None
    marker, info = m.group(1), m.group(2)
    if marker[0] == "`" and "`" in info:
        return None
    return Fence(marker=marker, opener=line.rstrip("\r\n"))


def _closes(line: str, fence: Fence) -> bool:
    m = _FENCE.match(line.rstrip("\r\n"))
    return (
        m is not None
        and m.group(1)[0] == fence.marker[0]
        and len(m.group(1)) >= len(fence.marker)
        and not m.group(2).strip()
    )


class _Scan:
    """Line starts of `text` (lines end at "\\n" only, as in Markdown) and the fence open at the
    start of each line."""

    def __init__(self, text: str) -> None:
        self.starts: list[int] = []
        self.open_before: list[Fence | None] = []
        self.openers: list[Fence | None] = []
        fence: Fence | None = None
        pos = 0
        while pos < len(text):
            nl = text.find("\n", pos)
            stop = len(text) if nl < 0 else nl + 1
            line = text[pos:stop]
            self.starts.append(pos)
            self.open_before.append(fence)
            opener = _opener(line.rstrip("\r\n")) if fence is None else None
            self.openers.append(opener)
            if fence is None:
                fence = opener
            elif _closes(line, fence):
                fence = None
            pos = stop
        self.open_at_end = fence
        # Length of the fence each line belongs to (opener to closer), 0 outside fences.
        self.fence_length = [0] * len(self.starts)
        i = 0
        while i < len(self.starts):
            if self.openers[i] is None:
                i += 1
                continue
            j = i + 1
            while j < len(self.starts) and self.open_before[j] is not None:
                j += 1
            end = self.starts[j] if j < len(self.starts) else len(text)
            for k in range(i, j):
                self.fence_length[k] = end - self.starts[i]
            i = j

    def line_of(self, pos: int) -> int:
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def fence_at(self, pos: int) -> Fence | None:
        """The fence a cut at `pos` (inside the text) would fall in. A cut at a line start is
        inside when a fence is open before that line; a cut in the middle of a line is also
        inside when that line opens a fence."""
        line = self.line_of(pos)
        if self.starts[line] == pos:
            return self.open_before[line]
        return self.open_before[line] or self.openers[line]


def _suffix_for(fence: Fence, body: str) -> str:
    return fence.marker if body.endswith("\n") else "\n" + fence.marker


def split_chunks(text: str, limit: int) -> list[Chunk]:
    """Split `text` into chunks of at most `limit` characters (see the module docstring).
    An empty text gives no chunks. Raises `ValueError` if `limit < MIN_LIMIT`."""
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT}, got {limit}")
    scan = _Scan(text)
    chunks: list[Chunk] = []
    pos = 0
    carry: Fence | None = None
    while pos < len(text):
        prefix = carry.reopen + "\n" if carry is not None else ""
        avail = limit - len(prefix)
        if len(text) - pos <= avail:
            chunks.append(Chunk(prefix, text[pos:], ""))
            break
        cut, fence = _choose_cut(text, scan, pos, pos + avail, limit)
        body = text[pos:cut]
        suffix = _suffix_for(fence, body) if fence is not None else ""
        chunks.append(Chunk(prefix, body, suffix))
        pos, carry = cut, fence
    return chunks


def chunk_text(text: str, limit: int) -> list[str]:
    """The message texts of `split_chunks(text, limit)`."""
    return [c.text for c in split_chunks(text, limit)]


def _outside_candidates(text: str, scan: _Scan, pos: int, end: int) -> list[list[int]]:
    """Cut points in `(pos, end]` outside fences: [paragraph breaks, line breaks, spaces]."""
    paragraphs: list[int] = []
    lines: list[int] = []
    first = scan.line_of(pos) + 1
    for i in range(first, len(scan.starts)):
        start = scan.starts[i]
        if start > end:
            break
        if scan.open_before[i] is not None:
            continue
        lines.append(start)
        previous = text[scan.starts[i - 1] : start]
        if not previous.strip():
            paragraphs.append(start)
    spaces = [q for q in range(pos + 1, end + 1) if text[q - 1] in " \t" and scan.fence_at(q) is None]
    return [paragraphs, lines, spaces]


def _choose_cut(text: str, scan: _Scan, pos: int, end: int, limit: int) -> tuple[int, Fence | None]:
    """Where to end the chunk that starts at `pos` and may reach `end`. Returns the cut and the
    fence left open there (None outside fences)."""
    fill = pos + (end - pos) // 2
    levels = _outside_candidates(text, scan, pos, end)
    for level in levels:
        if level and level[-1] >= fill:
            return level[-1], None
    # Inside a fence that cannot fit in any message it is cut anyway: fill this one.
    inside = _inside_candidate(scan, pos, end, limit=limit)
    if inside is not None and inside[0] >= fill:
        return inside
    best = max((level[-1] for level in levels if level), default=None)
    if best is not None:
        return best, None
    for cut in range(end, pos, -1):
        fence = scan.fence_at(cut)
        suffix = _suffix_for(fence, text[pos:cut]) if fence is not None else ""
        if cut + len(suffix) <= end:
            return cut, fence
    return pos + 1, scan.fence_at(pos + 1)


def _inside_candidate(scan: _Scan, pos: int, end: int, *, limit: int) -> tuple[int, Fence] | None:
    """The latest line start in `(pos, end]` inside a fence longer than `limit`, leaving room
    for the closing marker."""
    for i in range(scan.line_of(end), scan.line_of(pos), -1):
        start = scan.starts[i]
        fence = scan.open_before[i]
        if fence is not None and pos < start <= end - len(fence.marker) and scan.fence_length[i] > limit:
            return start, fence
    return None
