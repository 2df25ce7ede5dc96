"""Layer 6: tool parameter schemas normalised for the session's provider.

Providers accept different subsets of JSON Schema. Every provider gets a root `object` schema
without `$schema`/`$id`; Google's models also lose keywords they reject (`additionalProperties`,
`default`, `examples`, `$ref`-free schemas only, `format` other than enum/date-time); OpenAI's
strict mode would need every property required, so tools are sent non-strict and schemas are only
cleaned. The tool's own validation (in the agent loop) always uses the original schema.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

from msgspec.structs import replace

from agent_core import AgentTool

_ALWAYS_DROP = ("$schema", "$id", "$comment", "examples")
_GOOGLE_DROP = ("additionalProperties", "default", "patternProperties", "const", "$defs", "definitions")


_CACHE_SIZE = 1024
_normalized: OrderedDict[tuple[int, str], tuple[dict[str, Any], dict[str, Any]]] = OrderedDict()
"""Normalised schemas by (the original's identity, provider), each kept with its original so the
identity cannot be reused while the entry lives. Every run builds its tools again from the same
schema objects (module constants, an MCP server's listed tools), so each is normalised once."""


def normalize_schema(schema: dict[str, Any], provider: str) -> dict[str, Any]:
    """`schema` for `provider` (the result is shared: neither it nor `schema` may be changed in
    place; tools are made with a schema and never change it)."""
    key = (id(schema), provider)
    hit = _normalized.get(key)
    if hit is not None and hit[0] is schema:
        _normalized.move_to_end(key)
        return hit[1]
    out = _normalize(schema, provider)
    _normalized[key] = (schema, out)
    if len(_normalized) > _CACHE_SIZE:
        _normalized.popitem(last=False)
    return out


def _normalize(schema: dict[str, Any], provider: str) -> dict[str, Any]:
    out: dict[str, Any] = _clean(copy.deepcopy(schema), google=provider in ("google", "gemini", "vertex"))
    if out.get("type") != "object":
        out = {
            "type": "object",
            "properties": out.get("properties", {}),
            **{k: v for k, v in out.items() if k not in ("type", "properties")},
        }
    out.setdefault("properties", {})
    return out


def _clean(node: Any, *, google: bool) -> Any:
    if isinstance(node, list):
        return [_clean(item, google=google) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in _ALWAYS_DROP:
            continue
        if google and key in _GOOGLE_DROP:
            continue
        if google and key == "format" and value not in ("enum", "date-time"):
            continue
        out[key] = _clean(value, google=google)
    return out


def schema_layer(tools: list[AgentTool], *, provider: str) -> list[AgentTool]:
    return [replace(tool, parameters=normalize_schema(tool.parameters, provider)) for tool in tools]
