"""The sans-I/O SSE decoder."""

from __future__ import annotations

from agent_core.providers._sse import ServerSentEvent, SSEDecoder


def decode(*pieces: bytes | str) -> list[tuple[str | None, str]]:
    decoder = SSEDecoder()
    events: list[ServerSentEvent] = []
    for piece in pieces:
        events.extend(decoder.feed(piece))
    events.extend(decoder.close())
    return [(e.event, e.data) for e in events]


def test_every_line_ending() -> None:
    for sep in ("\n", "\r", "\r\n"):
        body = f"event: a{sep}data: 1{sep}{sep}data: 2{sep}{sep}"
        assert decode(body) == [("a", "1"), (None, "2")]


def test_crlf_split_across_reads_is_one_line_break() -> None:
    assert decode(b"data: 1\r", b"\n", b"\r", b"\ndata: 2\r\n\r\n") == [(None, "1"), (None, "2")]


def test_comments_multiline_data_and_space_after_colon() -> None:
    body = ": comment\ndata:first\ndata:  second\ndata\nid: 7\nretry: 100\n\n"
    assert decode(body) == [(None, "first\n second\n")]


def test_utf8_split_inside_a_character() -> None:
    raw = "data: héllo ✓\n\n".encode()
    assert decode(*[raw[i : i + 1] for i in range(len(raw))]) == [(None, "héllo ✓")]


def test_pending_event_and_unterminated_line_are_dispatched_at_close() -> None:
    assert decode("data: a\n\ndata: tail") == [(None, "a"), (None, "tail")]
    assert decode("event: only\n") == [("only", "")]


def test_blank_lines_without_fields_dispatch_nothing() -> None:
    assert decode("\n\n: just a comment\n\n\n") == []


def test_byte_order_mark_and_raw_lines_kept_for_errors() -> None:
    decoder = SSEDecoder()
    (event,) = decoder.feed("\ufeffevent: x\ndata: y\n\n")
    assert (event.event, event.data, event.raw) == ("x", "y", ("event: x", "data: y"))
