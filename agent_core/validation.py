"""Validation of tool-call arguments against a tool's JSON Schema, with pi's coercions.

Models send arguments of the wrong primitive type often enough (`{"count": "3"}`, `{"flag": 1}`)
that pi converts them before validating. The order is: deep-copy the raw arguments, coerce them
towards the schema (primitives per the table below, recursing into properties,
additionalProperties, items, allOf, and the first anyOf/oneOf branch that then validates), validate
with `jsonschema`, and either return the coerced copy or raise `ToolError` with pi's exact text.

| target  | coerced values                                      |
|---------|-----------------------------------------------------|
| number  | null -> 0, numeric string -> number, bool -> 1/0    |
| integer | null -> 0, numeric string -> truncated int, bool -> 1/0 |
| boolean | null -> false, "true"/"false", 1/0                  |
| string  | null -> "", number/bool -> their JSON text          |
| null    | "", 0, false -> null                                |

A value that already matches one member of a type list is left alone. Properties the schema does
not name are kept.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from agent_core.errors import ToolError
from agent_core.messages import ToolCall

if TYPE_CHECKING:
    from jsonschema import ValidationError
    from jsonschema.protocols import Validator


class SchemaTool(Protocol):
    """Anything with a name and a JSON Schema of its arguments (`AgentTool`, `Tool`)."""

    @property
    def name(self) -> str: ...

    @property
    def parameters(self) -> dict[str, Any]: ...


_CACHE_SIZE = 256
# Compiled validators keyed by the identity of the schema dict. Each entry keeps the schema alive so
# its id cannot be reused by another object while cached; the least recently used entry is dropped
# once more than _CACHE_SIZE schemas were seen (tools are usually long-lived, so this rarely churns).
_validators: OrderedDict[int, tuple[dict[str, Any], Validator]] = OrderedDict()

_NUMERIC = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")


def validate_tool_arguments(tool: SchemaTool, tool_call: ToolCall) -> Any:
    """Return the tool call's arguments coerced to and validated against `tool.parameters`.

    The tool call is not modified. Raises `ToolError` whose message lists every failure and the
    arguments as received.
    """
    raw = tool_call.arguments
    schema = tool.parameters
    validator = _validator(schema)
    args = _coerce(schema, copy.deepcopy(raw), schema)
    errors = list(validator.iter_errors(args))
    if not errors:
        return args
    lines = [f"  - {path}: {message}" for path, message in _describe(errors)]
    received = json.dumps(raw, indent=2, ensure_ascii=False)
    details = "\n".join(lines)
    header = f'Validation failed for tool "{tool.name}":'
    raise ToolError(f"{header}\n{details}\n\nReceived arguments:\n{received}")


def validator_for(schema: dict[str, Any]) -> type[Validator]:
    """jsonschema's validator class for `schema`'s dialect. jsonschema is imported by the first
    call rather than with the engine: a process that never validates arguments (a daemon before
    its first tool call) does not load it."""
    from jsonschema.validators import validator_for as dialect_validator

    return dialect_validator(schema)


def _validator(schema: dict[str, Any]) -> Validator:
    key = id(schema)
    cached = _validators.get(key)
    if cached is not None and cached[0] is schema:
        _validators.move_to_end(key)
        return cached[1]
    validator = validator_for(schema)(schema)
    _validators[key] = (schema, validator)
    if len(_validators) > _CACHE_SIZE:
        _validators.popitem(last=False)
    return validator


# --- coercion ---------------------------------------------------------------------------------


def _coerce(schema: Any, value: Any, root: dict[str, Any]) -> Any:
    if not isinstance(schema, dict):
        return value
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = _local_ref(root, ref)
        if target is not None:
            value = _coerce(target, value, root)
    for sub in _schema_list(schema.get("allOf")):
        value = _coerce(sub, value, root)
    for keyword in ("anyOf", "oneOf"):
        branches = _schema_list(schema.get(keyword))
        if branches:
            value = _first_valid_branch(branches, value, root)
    types = _types(schema)
    if types:
        value = _coerce_primitive(types, value)
    if isinstance(value, dict):
        _coerce_object(schema, value, root)
    elif isinstance(value, list):
        _coerce_array(schema, value, root)
    return value


def _first_valid_branch(branches: list[dict[str, Any]], value: Any, root: dict[str, Any]) -> Any:
    for branch in branches:
        candidate = _coerce(branch, copy.deepcopy(value), root)
        if _branch_validator(root, branch).is_valid(candidate):
            return candidate
    return value


def _branch_validator(root: dict[str, Any], branch: dict[str, Any]) -> Validator:
    # Keep the root's $defs reachable from the branch so local references still resolve.
    return _validator(root).evolve(schema=branch)


def _coerce_object(schema: dict[str, Any], value: dict[str, Any], root: dict[str, Any]) -> None:
    properties = schema.get("properties")
    extra = schema.get("additionalProperties")
    for key in list(value):
        if isinstance(properties, dict) and key in properties:
            value[key] = _coerce(properties[key], value[key], root)
        elif isinstance(extra, dict):
            value[key] = _coerce(extra, value[key], root)


def _coerce_array(schema: dict[str, Any], value: list[Any], root: dict[str, Any]) -> None:
    prefix = schema.get("prefixItems")
    items = schema.get("items")
    positional = prefix if isinstance(prefix, list) else items if isinstance(items, list) else []
    for index, sub in enumerate(positional[: len(value)]):
        value[index] = _coerce(sub, value[index], root)
    rest = items if isinstance(items, dict) else schema.get("additionalItems")
    if isinstance(rest, dict):
        for index in range(len(positional), len(value)):
            value[index] = _coerce(rest, value[index], root)


def _coerce_primitive(types: list[str], value: Any) -> Any:
    if any(_matches(kind, value) for kind in types):
        return value
    for kind in types:
        converted, ok = _convert(kind, value)
        if ok:
            return converted
    return value


def _matches(kind: str, value: Any) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if kind == "integer":
        return isinstance(value, int) or value.is_integer()
    return kind == "number"


def _convert(kind: str, value: Any) -> tuple[Any, bool]:
    if kind in ("number", "integer"):
        return _to_number(value, integer=kind == "integer")
    if kind == "boolean":
        return _to_boolean(value)
    if kind == "string":
        return _to_string(value)
    if kind == "null" and (value == "" or value is False or (_is_number(value) and value == 0)):
        return None, True
    return value, False


def _to_number(value: Any, *, integer: bool) -> tuple[Any, bool]:
    if value is None:
        return 0, True
    if isinstance(value, bool):
        return int(value), True
    if isinstance(value, str) and _NUMERIC.match(value):
        number = float(value)
        if not math.isfinite(number):
            return value, False
        if integer:
            return math.trunc(number), True
        return int(number) if number.is_integer() and abs(number) < 2**53 else number, True
    return value, False


def _to_boolean(value: Any) -> tuple[Any, bool]:
    if value is None:
        return False, True
    if value == "true":
        return True, True
    if value == "false":
        return False, True
    if _is_number(value) and value in (0, 1):
        return value == 1, True
    return value, False


def _to_string(value: Any) -> tuple[Any, bool]:
    if value is None:
        return "", True
    if isinstance(value, bool):
        return ("true" if value else "false"), True
    if _is_number(value):
        return _js_number(value), True
    return value, False


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _js_number(value: float) -> str:
    """A number as JavaScript's `String(n)` writes it (no trailing `.0`)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def _types(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [k for k in kind if isinstance(k, str)]
    return []


def _schema_list(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, dict)]


def _local_ref(root: dict[str, Any], ref: str) -> Any:
    if not ref.startswith("#"):
        return None
    node: Any = root
    for raw_part in ref[1:].split("/"):
        if not raw_part:
            continue
        part = raw_part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


# --- failure text -----------------------------------------------------------------------------


def _describe(errors: Iterable[ValidationError]) -> list[tuple[str, str]]:
    lines: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for error in errors:
        base = [str(part) for part in error.absolute_path]
        if error.validator == "required" and isinstance(error.instance, dict):
            required: Any = error.validator_value
            missing = [p for p in required if p not in error.instance]
            entries = [(".".join([*base, str(p)]), f"must have required properties {p}") for p in missing]
        else:
            entries = [(".".join(base) or "root", _message(error))]
        for entry in entries:
            if entry not in seen:
                seen.add(entry)
                lines.append(entry)
    return lines


_LIMITS = {
    "minimum": ">=",
    "maximum": "<=",
    "exclusiveMinimum": ">",
    "exclusiveMaximum": "<",
}
_COUNTS = {
    "minLength": ("fewer", "characters"),
    "maxLength": ("more", "characters"),
    "minItems": ("fewer", "items"),
    "maxItems": ("more", "items"),
    "minProperties": ("fewer", "properties"),
    "maxProperties": ("more", "properties"),
}
_FIXED = {
    "enum": "must be equal to one of the allowed values",
    "const": "must be equal to constant",
    "additionalProperties": "must NOT have additional properties",
    "unevaluatedProperties": "must NOT have unevaluated properties",
    "uniqueItems": "must NOT have duplicate items",
    "anyOf": "must match a schema in anyOf",
    "oneOf": "must match exactly one schema in oneOf",
    "not": "must NOT be valid",
}


def _message(error: ValidationError) -> str:
    keyword = str(error.validator)
    value: Any = error.validator_value
    if keyword == "type":
        kinds = value if isinstance(value, list) else [value]
        return "must be " + ",".join(str(k) for k in kinds)
    if keyword in _LIMITS and _is_number(value):
        return f"must be {_LIMITS[keyword]} {_js_number(value)}"
    if keyword in _COUNTS:
        direction, unit = _COUNTS[keyword]
        return f"must NOT have {direction} than {value} {unit}"
    if keyword == "multipleOf" and _is_number(value):
        return f"must be multiple of {_js_number(value)}"
    if keyword == "pattern":
        return f'must match pattern "{value}"'
    if keyword == "format":
        return f'must match format "{value}"'
    return _FIXED.get(keyword, error.message)
