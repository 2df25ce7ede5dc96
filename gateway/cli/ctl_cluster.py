"""`gatewayctl cluster status`: the nodes sharing the database, what each holds, how busy it is.
`async (ctl, args) -> exit code`; failures raise CtlError."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gateway.cli.ctl_context import Ctl
from gateway.cli.ctl_render import duration


async def cluster_status(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("cluster.status")
    ctl.out.result(answer, lambda console: render_cluster(console, answer))
    return 0


def render_cluster(console: Console, answer: Mapping[str, Any]) -> None:
    """One row per node; the node that answered is marked `*`. A node whose heartbeat row
    expired shows its state as `expired`: what it held is the others' to take."""
    clustered = bool(answer.get("clustered"))
    here = answer.get("node")
    table = Table("NODE", "STATE", "HEARTBEAT", "SESSIONS", "CHANNELS", "RUNS")
    for node in answer.get("nodes") or ():
        name = Text(str(node.get("nodeId")))
        if node.get("nodeId") == here:
            name.append(" *", style="bold")
        table.add_row(
            name,
            _state(node),
            heartbeat_age(node.get("heartbeatAgeMs")) if clustered else "-",
            _count(node.get("sessionsOwned")),
            ", ".join(_account(str(name)) for name in node.get("channelAccounts") or ()) or "-",
            _count(node.get("runs")),
        )
    console.print(table)
    footer = "* the node that answered"
    if not clustered:
        footer += "; a single node, not in a cluster"
    elif isinstance(answer.get("sessionsUnowned"), int) and answer["sessionsUnowned"]:
        footer += f"; {answer['sessionsUnowned']} session(s) held by no node"
    console.print(footer, style="dim")


def heartbeat_age(ms: Any) -> str:
    """`350 ms ago` under a second, else as `duration` writes it."""
    if not isinstance(ms, int | float):
        return "?"
    return f"{int(ms)} ms ago" if ms < 1000 else duration(ms) + " ago"


def _state(node: Mapping[str, Any]) -> Text:
    if not node.get("alive"):
        return Text("expired", style="bold red")
    state = str(node.get("state") or "?")
    return Text(state, style="green" if state == "running" else "yellow")


def _account(lease: str) -> str:
    """`channel:discord:main` as `discord:main`; other lease names as they are."""
    return lease.removeprefix("channel:")


def _count(value: Any) -> str:
    return str(value) if isinstance(value, int) else "?"
