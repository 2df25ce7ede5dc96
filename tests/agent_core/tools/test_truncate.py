from __future__ import annotations

from agent_core.tools.truncate import format_size, truncate_head, truncate_line, truncate_tail


def numbered(count: int) -> str:
    return "\n".join(f"line {i}" for i in range(1, count + 1))


def test_small_text_is_untouched() -> None:
    cut = truncate_head("a\nb\n", max_lines=10, max_bytes=100)
    assert not cut.truncated
    assert cut.content == "a\nb\n"
    assert cut.total_lines == 2


def test_head_keeps_first_lines_when_over_the_line_limit() -> None:
    cut = truncate_head(numbered(3000), max_lines=2000, max_bytes=10**6)
    assert cut.truncated and cut.truncated_by == "lines"
    lines = cut.content.split("\n")
    assert lines[0] == "line 1" and lines[-1] == "line 2000" and len(lines) == 2000
    assert cut.total_lines == 3000


def test_head_stops_at_the_byte_limit_on_a_whole_line() -> None:
    cut = truncate_head(numbered(100), max_lines=1000, max_bytes=30)
    assert cut.truncated_by == "bytes"
    assert cut.content == "line 1\nline 2\nline 3\nline 4"
    assert cut.output_bytes <= 30


def test_tail_keeps_last_lines() -> None:
    cut = truncate_tail(numbered(3000), max_lines=10, max_bytes=10**6)
    assert cut.content.split("\n") == [f"line {i}" for i in range(2991, 3001)]
    assert cut.truncated_by == "lines"


def test_single_overlong_line_is_cut_partially_without_splitting_characters() -> None:
    line = "é" * 100  # two bytes each
    head = truncate_head(line, max_lines=10, max_bytes=51)
    tail = truncate_tail("x\n" + line, max_lines=10, max_bytes=51)
    assert head.partial_line and head.content == "é" * 25
    assert tail.partial_line and tail.content == "é" * 25
    assert head.details()["partialLine"] is True


def test_truncate_line_and_format_size() -> None:
    assert truncate_line("abc", 5) == ("abc", False)
    cut, was_cut = truncate_line("x" * 600)
    assert was_cut and cut.startswith("x" * 500) and cut.endswith("[line truncated]")
    assert format_size(10) == "10B"
    assert format_size(50 * 1024) == "50.0KB"
    assert format_size(3 * 1024 * 1024) == "3.0MB"
