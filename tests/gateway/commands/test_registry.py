"""`gateway.commands.registry`: the `commands.list` answer, in OpenClaw's `CommandEntry` shape."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from gateway.commands.registry import command_entries
from gateway.commands.skills import Skill
from gateway.commands.templates import PromptTemplate

_TEXT = {"type": "string", "minLength": 1, "maxLength": 200}
COMMAND_ENTRY: dict[str, Any] = {
    # The constraints OpenClaw's protocol schema (2026.9) puts on a `commands.list` entry.
    "type": "object",
    "required": ["name", "description", "source", "scope", "acceptsArgs"],
    "additionalProperties": False,
    "properties": {
        "name": _TEXT,
        "nativeName": _TEXT,
        "textAliases": {"type": "array", "items": _TEXT, "maxItems": 20},
        "description": {"type": "string", "maxLength": 2000},
        "category": {"enum": ["session", "options", "status", "management", "media", "tools"]},
        "source": {"enum": ["native", "skill", "plugin"]},
        "skillDisplayName": _TEXT,
        "skillModelVisible": {"type": "boolean"},
        "scope": {"enum": ["text", "native", "both"]},
        "acceptsArgs": {"type": "boolean"},
        "args": {
            "type": "array",
            "maxItems": 20,
            "items": {
                "type": "object",
                "required": ["name", "description", "type"],
                "additionalProperties": False,
                "properties": {
                    "name": _TEXT,
                    "description": {"type": "string", "maxLength": 500},
                    "type": {"enum": ["string", "number", "boolean"]},
                    "required": {"type": "boolean"},
                    "choices": {
                        "type": "array",
                        "maxItems": 50,
                        "items": {
                            "type": "object",
                            "required": ["value", "label"],
                            "additionalProperties": False,
                            "properties": {"value": {"type": "string"}, "label": {"type": "string"}},
                        },
                    },
                    "dynamic": {"type": "boolean"},
                },
            },
        },
    },
}


@dataclass(frozen=True)
class Ext:
    name: str
    description: str
    accepts_args: bool = False


SKILLS = [
    Skill("deploy", "Deploy the app", Path("/s/deploy/SKILL.md")),
    Skill("secret", "Only by name", Path("/s/secret/SKILL.md"), model_visible=False),
]
TEMPLATES = [
    PromptTemplate("review", "Review a file", "Review $1", Path("/p/review.md")),
    PromptTemplate("status", "shadowed by the chat command", "x", Path("/p/status.md")),
    PromptTemplate("lint", "shadowed by the extension", "x", Path("/p/lint.md")),
]


def test_every_kind_in_the_openclaw_shape_with_and_without_args() -> None:
    for include_args in (False, True):
        entries = command_entries(
            skills=SKILLS,
            templates=TEMPLATES,
            extensions=[Ext("lint", "Lint it", True)],
            include_args=include_args,
        )
        for entry in entries:
            jsonschema.validate(entry, COMMAND_ENTRY)
        assert ("args" in next(e for e in entries if e["name"] == "think")) is include_args

    by_name = {e["name"]: e for e in entries}
    assert list(by_name) == [
        "stop", "new", "reset", "compact", "model", "think", "status",
        "lint", "review", "skill:deploy", "skill:secret",
    ]  # fmt: skip
    assert by_name["status"]["source"] == "native" and by_name["status"]["category"] == "status"
    assert by_name["status"]["textAliases"] == ["/status"]
    assert by_name["lint"] == {
        "name": "lint",
        "textAliases": ["/lint"],
        "description": "Lint it",
        "source": "plugin",
        "scope": "text",
        "acceptsArgs": True,
    }
    assert by_name["review"]["source"] == "skill" and by_name["review"]["skillModelVisible"] is False
    assert by_name["skill:deploy"]["skillDisplayName"] == "deploy"
    assert by_name["skill:deploy"]["skillModelVisible"] is True
    assert by_name["skill:secret"]["skillModelVisible"] is False
    think = by_name["think"]["args"][0]
    assert [c["value"] for c in think["choices"]] == ["off", "minimal", "low", "medium", "high", "xhigh"]


def test_scopes() -> None:
    assert command_entries(skills=SKILLS, templates=TEMPLATES, scope="native") == []
    both = command_entries(skills=SKILLS, templates=TEMPLATES, scope="both")
    assert both == command_entries(skills=SKILLS, templates=TEMPLATES, scope="text")
    assert {e["scope"] for e in both} == {"text"}
