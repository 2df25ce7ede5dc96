"""Argument access and path resolution shared by the built-in tools.

Arguments are validated against each tool's JSON Schema before `execute` runs, but a tool may be
called directly (tests, other layers), so the getters check types again and raise `ToolError`
with a message the model can act on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent_core.abort import AbortSignal
from agent_core.errors import ToolError


def resolve_tool_path(workspace: Path, path: str) -> Path:
    """Absolute path for a tool argument: ``~`` expands to the home directory, relative paths are
    taken from the workspace. Symlinks are left alone (confinement is the sandbox's job)."""
    text = path.strip()
    if not text:
        return workspace
    if text == "~" or text.startswith("~/"):
        text = os.path.expanduser(text)
    candidate = Path(text)
    return candidate if candidate.is_absolute() else workspace / candidate


def get_str(params: Mapping[str, Any], name: str, *, default: str | None = None) -> str:
    value = params.get(name, default)
    if value is None:
        raise ToolError(f"Missing required argument '{name}'")
    if not isinstance(value, str):
        raise ToolError(f"Argument '{name}' must be a string, got {type(value).__name__}")
    return value


def get_opt_str(params: Mapping[str, Any], name: str) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ToolError(f"Argument '{name}' must be a string, got {type(value).__name__}")
    return value


def get_opt_int(params: Mapping[str, Any], name: str, *, minimum: int) -> int | None:
    """A whole number of at least `minimum` (JSON numbers like ``5.0`` are accepted)."""
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolError(f"Argument '{name}' must be a number, got {type(value).__name__}")
    if isinstance(value, float) and not value.is_integer():
        raise ToolError(f"Argument '{name}' must be a whole number, got {value}")
    number = int(value)
    if number < minimum:
        raise ToolError(f"Argument '{name}' must be at least {minimum}, got {number}")
    return number


def get_opt_float(params: Mapping[str, Any], name: str) -> float | None:
    """A positive number (seconds, sizes)."""
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolError(f"Argument '{name}' must be a number, got {type(value).__name__}")
    if value <= 0:
        raise ToolError(f"Argument '{name}' must be greater than 0, got {value}")
    return float(value)


def get_bool(params: Mapping[str, Any], name: str) -> bool:
    value = params.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ToolError(f"Argument '{name}' must be true or false, got {value!r}")
    return value


def as_mapping(params: Any) -> Mapping[str, Any]:
    if not isinstance(params, Mapping):
        raise ToolError(f"Tool arguments must be an object, got {type(params).__name__}")
    return params


def check_not_aborted(signal: AbortSignal | None, what: str) -> None:
    """Raise before starting work the run no longer wants."""
    if signal is not None and signal.aborted:
        raise ToolError(f"{what} aborted")
