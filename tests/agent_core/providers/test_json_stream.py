"""parse_streaming_json and its helpers (spec §6.5 examples first)."""

from __future__ import annotations

import json

import pytest

from agent_core.json_stream import (
    EXACT_LIMIT,
    IncrementalJson,
    parse_json_with_repair,
    parse_streaming_json,
    repair_json,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("   ", {}),
        (None, {}),
        ('{"a": "hel', {"a": "hel"}),
        ('{"a":tru', {"a": True}),
        ("[1,2", [1, 2]),
        ("not json", {}),
        ('{"a": 1}', {"a": 1}),
        ('{"value":"trunc', {"value": "trunc"}),
    ],
)
def test_spec_examples(text: str | None, expected: object) -> None:
    assert parse_streaming_json(text) == expected


def test_raw_control_characters_inside_strings_are_repaired() -> None:
    assert parse_streaming_json('{"code": "line1\nline2\tend"}') == {"code": "line1\nline2\tend"}
    assert parse_streaming_json('{"code": "open\nstill') == {"code": "open\nstill"}


def test_invalid_backslashes_are_doubled() -> None:
    assert parse_streaming_json(r'{"path": "C:\dir\q"}') == {"path": r"C:\dir\q"}
    assert repair_json(r'{"a": "\uZZ"}') == r'{"a": "\\uZZ"}'


def test_repair_leaves_valid_text_and_outside_whitespace_alone() -> None:
    valid = '{\n  "a": "x\\n\\"y\\"",\n  "b": "\\u00e9"\n}'
    assert repair_json(valid) == valid
    assert repair_json('{"a":"x\\') == '{"a":"x\\'  # a backslash the next delta completes


def test_parse_json_with_repair() -> None:
    assert parse_json_with_repair('{"t": "a\nb"}') == {"t": "a\nb"}
    with pytest.raises(ValueError):
        parse_json_with_repair('{"t": ')


def test_incremental_parse_matches_full_parse_at_every_prefix() -> None:
    document = json.dumps({"path": "a.py", "content": "def f():\n    return 'x'\n" * 3, "n": [1, 2.5, None]})
    parser = IncrementalJson()
    for i in range(len(document)):
        value = parser.feed(document[i])
        assert value == parse_streaming_json(document[: i + 1])
    assert parser.value() == json.loads(document)


def test_incremental_parse_of_a_long_argument_is_exact_at_the_end() -> None:
    document = json.dumps({"content": "x" * (EXACT_LIMIT * 8)})
    parser = IncrementalJson()
    reparses = 0
    last = None
    for start in range(0, len(document), 7):
        value = parser.feed(document[start : start + 7])
        if value is not last:
            reparses += 1
            last = value
    assert reparses < EXACT_LIMIT // 7 + 200  # far fewer than one parse per delta
    assert parser.value() == json.loads(document)
