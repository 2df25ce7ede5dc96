"""What `gatewayctl` prints for people, checked on the text a pipe or a narrow terminal gets."""

from __future__ import annotations

import io
import tomllib
from typing import Any

from rich.console import Console

from gateway.cli.ctl_render import render_config

LONG_PATH = "/srv/agents/" + "nested-directory/" * 6 + "workspace"
CONFIG: dict[str, Any] = {
    "home": "/var/lib/gateway",
    "database_url": None,
    "gateway": {"port": 18789, "allowed_hosts": ["gateway.internal", "gateway.example.org"]},
    "agent_defaults": {"model": "faux/echo", "limits": {"max_turns": 40, "note": "word " * 20}},
    "agents": [{"id": "main", "workspace": LONG_PATH}, {"id": "reviewer", "workspace": None}],
}


def _without_unset(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_unset(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_unset(v) for v in value]
    return value


def test_config_show_stays_toml_at_any_width() -> None:
    for width in (30, 80, 200):
        out = io.StringIO()
        render_config(Console(file=out, width=width, no_color=True), CONFIG, "/etc/" + "x" * 60 + ".toml")
        text = out.getvalue()
        assert tomllib.loads(text) == _without_unset(CONFIG), (width, text)
        assert [line for line in text.splitlines() if line != line.rstrip()] == [], (width, text)
        assert text.splitlines()[0] == "# config file: /etc/" + "x" * 60 + ".toml"
