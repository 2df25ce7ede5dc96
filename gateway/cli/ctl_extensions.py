"""`gatewayctl mcp` and `gatewayctl extensions`: MCP servers and Python extensions. Each command
is `async (ctl, args) -> exit code`; failures raise CtlError.

    gatewayctl mcp list                      every server of every agent: state, tools, last error
    gatewayctl mcp restart NAME [--agent ID] stop and start it again (a failed one retries now)
    gatewayctl extensions list               every extension found, its trust state and what it adds
    gatewayctl extensions enable NAME        let it run (imported and loaded at once)
    gatewayctl extensions disable NAME       withdraw everything it added
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gateway.cli.ctl_context import Ctl
from gateway.cli.ctl_render import ago

_STATE_STYLES = {
    "ready": "green",
    "enabled": "green",
    "starting": "yellow",
    "pending": "yellow",
    "backoff": "red",
    "disabled": "dim",
    "stopped": "dim",
}


async def mcp_list(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("mcp.list")
    ctl.out.result(answer, lambda console: render_servers(console, answer.get("servers") or []))
    return 0


async def mcp_restart(ctl: Ctl, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"name": args.name}
    if args.agent:
        params["agentId"] = args.agent
    answer = await ctl.once("mcp.restart", params, waiting=f"restarting MCP server {args.name}")
    servers = answer.get("servers") or []
    ctl.out.result(answer, lambda console: render_servers(console, servers))
    return 0 if all(server.get("state") in ("ready", "stopped") for server in servers) else 1


async def extensions_list(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("extensions.list")

    def render(console: Console) -> None:
        render_extensions(console, answer.get("extensions") or [])
        for problem in answer.get("problems") or []:
            console.print(escape(f"note: {problem}"), style="yellow")

    ctl.out.result(answer, render)
    return 0


async def extensions_enable(ctl: Ctl, args: argparse.Namespace) -> int:
    return await _change(ctl, "extensions.enable", args.name)


async def extensions_disable(ctl: Ctl, args: argparse.Namespace) -> int:
    return await _change(ctl, "extensions.disable", args.name)


async def _change(ctl: Ctl, method: str, name: str) -> int:
    answer = await ctl.once(method, {"name": name})
    row: Mapping[str, Any] = answer.get("extension") or {}

    def render(console: Console) -> None:
        line = f"extension {name} is {row.get('state')}"
        if row.get("loaded"):
            added = [*row.get("tools", []), *(f"/{c}" for c in row.get("commands", []))]
            line += f", loaded ({', '.join(added) or 'hooks only'})"
        console.print(escape(line))
        if row.get("error"):
            console.print(escape(f"it failed to load: {row['error']}"), style="red")

    ctl.out.result(answer, render)
    return 1 if row.get("error") else 0


def _state(value: Any) -> str:
    text = str(value)
    style = _STATE_STYLES.get(text)
    return f"[{style}]{escape(text)}[/]" if style else escape(text)


def render_servers(console: Console, servers: Sequence[Mapping[str, Any]]) -> None:
    if not servers:
        console.print("no MCP servers configured; add an [[mcp_servers]] table", style="dim")
        return
    table = Table("AGENT", "SERVER", "STATE", "TOOLS", "RESTARTS", "DETAIL")
    for server in servers:
        tools = server.get("tools") or []
        detail = server.get("error") or server.get("target") or ""
        if server.get("state") == "backoff" and server.get("retryInMs") is not None:
            detail = f"retry in {int(server['retryInMs']) // 1000} s: {detail}"
        table.add_row(
            escape(str(server.get("agentId"))),
            escape(f"{server.get('name')} ({server.get('transport')})"),
            _state(server.get("state")),
            escape(", ".join(tools)) if tools else "-",
            str(server.get("restarts", 0)),
            escape(str(detail)),
        )
    console.print(table)


def render_extensions(console: Console, extensions: Sequence[Mapping[str, Any]]) -> None:
    if not extensions:
        console.print(
            "no extensions found; install one (entry point group agent_gateway.extensions) "
            "or put it in <home>/extensions/",
            style="dim",
        )
        return
    table = Table("NAME", "STATE", "LOADED", "ADDS", "CHANGED", "ORIGIN")
    for ext in extensions:
        adds = [*ext.get("tools", []), *(f"/{c}" for c in ext.get("commands", []))]
        adds += [f"hook {h}" for h in ext.get("hooks", [])] + [f"api {a}" for a in ext.get("providers", [])]
        loaded = "yes" if ext.get("loaded") else ("[red]failed[/]" if ext.get("error") else "no")
        origin = ext.get("origin") or ""
        if not ext.get("present"):
            origin = f"(not found) {origin}"
        changed = f"{ago(ext.get('changedAt'))} by {ext.get('changedBy')}" if ext.get("changedBy") else ""
        table.add_row(
            escape(str(ext.get("name"))),
            _state(ext.get("state")),
            loaded,
            escape(", ".join(adds)) or "-",
            escape(changed),
            escape(str(origin)),
        )
    console.print(table)
    for ext in extensions:
        if ext.get("error"):
            console.print(escape(f"{ext.get('name')}: {ext['error']}"), style="red")
