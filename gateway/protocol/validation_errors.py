"""The wording of parameter validation errors.

Worded like the JSON Schema validator OpenClaw uses, because the captured real gateway answers
`invalid chat.send params: must have required property 'message'` and clients may show that
text. Only the first error is reported, as OpenClaw does.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

_TYPE_WORDS = {
    "string_type": "string",
    "int_type": "integer",
    "int_from_float": "integer",
    "float_type": "number",
    "bool_type": "boolean",
    "dict_type": "object",
    "model_type": "object",
    "model_attributes_type": "object",
    "list_type": "array",
    "none_required": "null",
}


def _pointer(loc: tuple[int | str, ...]) -> str:
    return "/" + "/".join(str(part).replace("~", "~0").replace("/", "~1") for part in loc)


def _phrase(error: Any) -> tuple[tuple[int | str, ...], str]:
    """Where (a path of the instance) and what, in JSON Schema validator words."""
    loc: tuple[int | str, ...] = tuple(error["loc"])
    kind: str = error["type"]
    ctx: dict[str, Any] = error.get("ctx") or {}
    if kind == "missing" and loc:
        return loc[:-1], f"must have required property '{loc[-1]}'"
    if kind == "extra_forbidden" and loc:
        return loc[:-1], f"must NOT have additional property '{loc[-1]}'"
    if kind in _TYPE_WORDS:
        return loc, f"must be {_TYPE_WORDS[kind]}"
    if kind == "string_too_short":
        return loc, f"must NOT have fewer than {ctx.get('min_length')} characters"
    if kind == "string_too_long":
        return loc, f"must NOT have more than {ctx.get('max_length')} characters"
    if kind == "greater_than_equal":
        return loc, f"must be >= {ctx.get('ge')}"
    if kind == "less_than_equal":
        return loc, f"must be <= {ctx.get('le')}"
    if kind == "greater_than":
        return loc, f"must be > {ctx.get('gt')}"
    if kind == "less_than":
        return loc, f"must be < {ctx.get('lt')}"
    if kind == "literal_error":
        return loc, f"must be equal to one of the allowed values: {ctx.get('expected')}"
    if kind == "value_error":
        message = str(ctx.get("error") or error["msg"])
        return loc, message
    return loc, str(error["msg"])


def describe_validation_error(exc: ValidationError) -> str:
    """The first error of `exc`, worded like OpenClaw: `[at /path: ]must ...`."""
    errors = exc.errors(include_url=False)
    if not errors:
        return "invalid value"
    loc, what = _phrase(errors[0])
    return f"at {_pointer(loc)}: {what}" if loc else what
