"""Tool argument validation: pi's coercion table, recursion rules and failure text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

import agent_core.validation as validation
from agent_core import ToolCall, ToolError
from agent_core.validation import validate_tool_arguments


@dataclass
class SchemaTool:
    parameters: dict[str, Any]
    name: str = "probe"
    label: str = field(default="probe")


def check(schema: dict[str, Any], arguments: Any) -> Any:
    return validate_tool_arguments(SchemaTool(schema), ToolCall(id="c1", name="probe", arguments=arguments))


def prop(kind: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"v": {"type": kind}}}


def fails(schema: dict[str, Any], arguments: Any) -> str:
    with pytest.raises(ToolError) as error:
        check(schema, arguments)
    return str(error.value)


@pytest.mark.parametrize(
    ("kind", "given", "expected"),
    [
        ("number", None, 0),
        ("number", "42", 42),
        ("number", "-2.5", -2.5),
        ("number", True, 1),
        ("number", False, 0),
        ("integer", None, 0),
        ("integer", "7", 7),
        ("integer", "4.5", 4),
        ("integer", True, 1),
        ("boolean", None, False),
        ("boolean", "true", True),
        ("boolean", "false", False),
        ("boolean", 1, True),
        ("boolean", 0, False),
        ("string", None, ""),
        ("string", 42, "42"),
        ("string", 2.5, "2.5"),
        ("string", 3.0, "3"),
        ("string", True, "true"),
        ("null", "", None),
        ("null", 0, None),
        ("null", False, None),
    ],
)
def test_primitive_coercions(kind: str, given: Any, expected: Any) -> None:
    result = check(prop(kind), {"v": given})
    assert result == {"v": expected}
    assert type(result["v"]) is type(expected)


@pytest.mark.parametrize(
    ("kind", "given"), [("number", "abc"), ("boolean", "yes"), ("integer", [1]), ("null", "x")]
)
def test_values_that_cannot_be_coerced_fail(kind: str, given: Any) -> None:
    assert f"  - v: must be {kind}" in fails(prop(kind), {"v": given})


def test_a_value_matching_one_member_of_a_type_list_is_not_coerced() -> None:
    assert check(prop(["number", "string"]), {"v": "12"}) == {"v": "12"}
    assert check(prop(["null", "boolean"]), {"v": None}) == {"v": None}
    assert check(prop(["number", "boolean"]), {"v": "true"}) == {"v": True}


def test_nested_properties_additional_properties_and_items_are_coerced() -> None:
    schema = {
        "type": "object",
        "properties": {
            "outer": {"type": "object", "properties": {"count": {"type": "integer"}}},
            "list": {"type": "array", "items": {"type": "number"}},
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}]},
        },
        "additionalProperties": {"type": "string"},
    }
    arguments = {"outer": {"count": "3"}, "list": ["1", 2, "3.5"], "pair": [5, "true"], "extra": 9}
    assert check(schema, arguments) == {
        "outer": {"count": 3},
        "list": [1, 2, 3.5],
        "pair": ["5", True],
        "extra": "9",
    }


def test_all_of_applies_every_branch() -> None:
    schema = {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "number"}}},
            {"properties": {"b": {"type": "boolean"}}},
        ]
    }
    assert check(schema, {"a": "1", "b": "false"}) == {"a": 1, "b": False}


def test_any_of_keeps_the_first_branch_that_validates_after_coercion() -> None:
    schema = prop(None)
    schema["properties"]["v"] = {
        "anyOf": [{"type": "integer", "minimum": 10}, {"type": "string"}, {"type": "number"}]
    }
    assert check(schema, {"v": "12"}) == {"v": 12}
    assert check(schema, {"v": "5"}) == {"v": "5"}  # 5 breaks the minimum, the string branch takes it
    one_of = {"type": "object", "properties": {"v": {"oneOf": [{"type": "boolean"}, {"type": "string"}]}}}
    assert check(one_of, {"v": "true"}) == {"v": True}


def test_local_references_are_followed() -> None:
    schema = {
        "type": "object",
        "$defs": {"count": {"type": "integer"}},
        "properties": {
            "n": {"$ref": "#/$defs/count"},
            "m": {"anyOf": [{"$ref": "#/$defs/count"}, {"type": "null"}]},
        },
    }
    assert check(schema, {"n": "4", "m": "8"}) == {"n": 4, "m": 8}


def test_unknown_properties_are_kept_and_the_tool_call_is_not_modified() -> None:
    raw: dict[str, Any] = {"value": 42, "extra": {"deep": [1]}}
    tool_call = ToolCall(id="c1", name="echo", arguments=raw)
    schema = {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}
    result = validate_tool_arguments(SchemaTool(schema, name="echo"), tool_call)
    assert result == {"value": "42", "extra": {"deep": [1]}}
    assert tool_call.arguments == {"value": 42, "extra": {"deep": [1]}}
    result["extra"]["deep"].append(2)
    assert raw["extra"]["deep"] == [1]


def test_missing_required_property_has_pi_text() -> None:
    schema = {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}
    with pytest.raises(ToolError) as error:
        validate_tool_arguments(
            SchemaTool(schema, name="echo"), ToolCall(id="c1", name="echo", arguments={"wrong": 1})
        )
    assert str(error.value) == (
        'Validation failed for tool "echo":\n'
        "  - value: must have required properties value\n"
        "\n"
        "Received arguments:\n"
        '{\n  "wrong": 1\n}'
    )


def test_every_failure_is_listed_with_a_dotted_path() -> None:
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 2},
            "opts": {
                "type": "object",
                "properties": {"depth": {"type": "integer", "maximum": 3}},
                "required": ["mode"],
            },
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
        },
        "additionalProperties": False,
    }
    text = fails(schema, {"path": "x", "opts": {"depth": 9}, "tags": ["a", "z"], "bogus": 1})
    lines = [line for line in text.splitlines() if line.startswith("  - ")]
    assert sorted(lines) == sorted(
        [
            "  - path: must NOT have fewer than 2 characters",
            "  - opts.depth: must be <= 3",
            "  - opts.mode: must have required properties mode",
            "  - tags.1: must be equal to one of the allowed values",
            "  - root: must NOT have additional properties",
        ]
    )
    assert text.endswith('"bogus": 1\n}')


def test_root_failures_are_reported_at_root() -> None:
    assert "  - root: must NOT have fewer than 1 properties" in fails(
        {"type": "object", "minProperties": 1}, {}
    )
    # prepare_arguments may hand the validator something that is not an object at all
    odd = ToolCall(id="c1", name="probe", arguments=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(ToolError, match="  - root: must be object"):
        validate_tool_arguments(SchemaTool({"type": "object"}), odd)


def test_validators_are_compiled_once_per_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[Any] = []
    real = validation.validator_for  # type: ignore[attr-defined]

    def counting(schema: Any, *args: Any, **kwargs: Any) -> Any:
        compiled.append(schema)
        return real(schema, *args, **kwargs)

    monkeypatch.setattr(validation, "validator_for", counting)
    schema = prop("string")
    for _ in range(3):
        check(schema, {"v": "x"})
    assert compiled == [schema]
    check(prop("string"), {"v": "x"})  # an equal but distinct schema object compiles on its own
    assert len(compiled) == 2
