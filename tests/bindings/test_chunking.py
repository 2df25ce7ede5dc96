"""Splitting replies at platform limits without breaking code fences."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bindings.chunking import DISCORD_MESSAGE_LIMIT, _Scan, chunk_text, split_chunks


def fences_balanced(text: str) -> bool:
    return _Scan(text).open_at_end is None


def test_short_text_is_one_chunk_and_empty_text_none() -> None:
    assert chunk_text("hello", 2000) == ["hello"]
    assert chunk_text("", 2000) == []
    with pytest.raises(ValueError, match="at least 64"):
        chunk_text("x", 10)


def test_prefers_paragraphs_then_lines_then_words() -> None:
    a, b = "a" * 1200, "b" * 1200
    assert chunk_text(f"{a}\n\n{b}", 2000) == [f"{a}\n\n", b]
    assert chunk_text(f"{a}\n{b}", 2000) == [f"{a}\n", b]
    words = "word " * 500
    chunks = chunk_text(words, 2000)
    assert all(c.endswith(" ") for c in chunks[:-1])
    assert "".join(chunks) == words
    assert chunk_text("x" * 4500, 2000) == ["x" * 2000, "x" * 2000, "x" * 500]


def test_a_fence_that_fits_moves_whole_to_the_next_chunk() -> None:
    prose = "intro " * 200  # 1200 characters, no line break
    fence = "```python\n" + "print('hi')\n" * 80 + "```\n"  # about 970 characters
    chunks = chunk_text(prose + "\n" + fence + "after", 2000)
    assert chunks[0] == prose + "\n"
    assert chunks[1].startswith("```python\n") and fence in chunks[1]


def test_a_fence_longer_than_a_message_is_closed_and_reopened() -> None:
    code = "".join(f"line {i} = {i * i}\n" for i in range(300))
    text = "Here:\n```python\n" + code + "```\nDone."
    chunks = split_chunks(text, 2000)
    assert len(chunks) >= 3
    assert chunks[0].suffix == "```" and chunks[0].text.endswith("\n```")
    for chunk in chunks[1:-1]:
        assert chunk.prefix == "```python\n" and chunk.suffix == "```"
    assert chunks[-1].prefix == "```python\n" and chunks[-1].text.endswith("Done.")
    assert all(fences_balanced(c.text) for c in chunks)
    assert "".join(c.body for c in chunks) == text
    assert all(len(c.text) <= 2000 for c in chunks)


def test_a_single_code_line_longer_than_a_message() -> None:
    text = "~~~\n" + "y" * 5000 + "\n~~~\n"
    chunks = split_chunks(text, 2000)
    assert all(len(c.text) <= 2000 for c in chunks)
    assert all(fences_balanced(c.text) for c in chunks)
    assert chunks[1].prefix == "~~~\n" and chunks[0].suffix == "\n~~~"


def test_longer_markers_need_longer_closers() -> None:
    text = "````md\n```\ninner\n```\n" + "z\n" * 1200 + "````\n"
    chunks = split_chunks(text, 1000)
    assert chunks[0].suffix == "````"
    assert chunks[1].prefix == "````md\n"


prose_word = st.text(alphabet="abcdefghij", min_size=1, max_size=12)
prose = st.lists(prose_word, min_size=1, max_size=60).map(" ".join)
code_line = st.text(alphabet="abc xyz=()+-*/#\t", max_size=90)
fence_block = st.builds(
    lambda marker, lang, lines: f"{marker}{lang}\n" + "".join(line + "\n" for line in lines) + marker,
    st.sampled_from(["```", "~~~", "````"]),
    st.sampled_from(["", "python", "js"]),
    st.lists(code_line, max_size=40),
)
documents = st.lists(st.one_of(prose, fence_block), min_size=1, max_size=12).flatmap(
    lambda blocks: st.sampled_from(["\n", "\n\n"]).map(lambda sep: sep.join(blocks))
)
limits = st.integers(min_value=64, max_value=400)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=3000), limit=limits)
def test_any_text_is_restored_and_within_the_limit(text: str, limit: int) -> None:
    chunks = split_chunks(text, limit)
    assert "".join(c.body for c in chunks) == text
    assert all(len(c.text) <= limit for c in chunks)
    assert all(c.body for c in chunks)


@settings(max_examples=300, deadline=None)
@given(text=documents, limit=limits)
def test_markdown_keeps_fences_whole_or_closed(text: str, limit: int) -> None:
    chunks = split_chunks(text, limit)
    assert "".join(c.body for c in chunks) == text
    assert all(len(c.text) <= limit for c in chunks)
    # every chunk renders on its own: fences it opens, it closes
    for chunk in chunks[:-1]:
        assert fences_balanced(chunk.text), chunk
    assert fences_balanced(chunks[-1].text) == fences_balanced(text)
    # a fence that fits in one message is never cut
    scan = _Scan(text)
    cuts = []
    pos = 0
    for chunk in chunks[:-1]:
        pos += len(chunk.body)
        cuts.append(pos)
    starts = scan.starts
    i = 0
    while i < len(starts):
        fence = scan.openers[i] if scan.open_before[i] is None else None
        if fence is None:
            i += 1
            continue
        j = i + 1
        while j < len(starts) and scan.open_before[j] is not None:
            j += 1
        end = starts[j] if j < len(starts) else len(text)
        if end - starts[i] <= limit:
            assert not any(starts[i] < cut < end for cut in cuts), (starts[i], end, cuts)
        i = j


def test_discord_limit_constant() -> None:
    assert DISCORD_MESSAGE_LIMIT == 2000
