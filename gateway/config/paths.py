"""Where paths in the configuration point: `~` is the user's home (`HOME`), and the state
directory is `GATEWAY_HOME`, else `~/.gateway`. Every function takes the environment it reads, so
tests never touch the real home."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def default_home(env: Mapping[str, str]) -> Path:
    """`GATEWAY_HOME`, else `~/.gateway`."""
    if env.get("GATEWAY_HOME"):
        return expand_path(env["GATEWAY_HOME"], env).absolute()
    return user_home(env) / ".gateway"


def user_home(env: Mapping[str, str]) -> Path:
    return Path(env["HOME"]) if env.get("HOME") else Path.home()


def expand_path(value: str, env: Mapping[str, str]) -> Path:
    """`value` as a path, a leading `~` replaced by the user's home."""
    if value == "~" or value.startswith("~/"):
        return user_home(env) / value[2:]
    return Path(value)
