"""`gatewayctl models list` and `gatewayctl usage`: the model catalogue (prices, context windows,
which providers have keys) and the tokens and cost of finished runs per agent and day. Each
command is `async (ctl, args) -> exit code`; failures raise CtlError."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from gateway.cli.ctl_context import Ctl


async def models_list(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("models.list")
    models = [
        m for m in answer.get("models") or [] if not args.provider or m.get("provider") == args.provider
    ]
    if args.provider:
        answer = {**answer, "models": models}
    ctl.out.result(answer, lambda console: render_models(console, models))
    return 0


async def usage(ctl: Ctl, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"days": args.days}
    if args.agent:
        params["agentId"] = args.agent
    answer = await ctl.once("usage.summary", params)
    ctl.out.result(answer, lambda console: render_usage(console, answer.get("usage") or [], args.days))
    return 0


def _price(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) else "-"


def _keys(model: Mapping[str, Any]) -> str:
    count = int(model.get("keys") or 0)
    if count:
        return str(count)
    return "not needed" if model.get("keyless") else "none"


def render_models(console: Console, models: Sequence[Mapping[str, Any]]) -> None:
    if not models:
        console.print("no models", style="dim")
        return
    table = Table("MODEL", "API", "CONTEXT", "MAX OUT", "IN $/M", "OUT $/M", "CACHE $/M", "KEYS")
    for model in models:
        cost = model.get("cost") or {}
        table.add_row(
            str(model.get("ref")),
            str(model.get("api")),
            f"{int(model.get('contextWindow') or 0):,}",
            f"{int(model.get('maxTokens') or 0):,}",
            _price(cost.get("input")),
            _price(cost.get("output")),
            _price(cost.get("cacheRead")),
            _keys(model),
        )
    console.print(table)


def render_usage(console: Console, rows: Sequence[Mapping[str, Any]], days: int) -> None:
    if not rows:
        console.print(f"no finished runs in the last {days} day{'' if days == 1 else 's'}", style="dim")
        return
    table = Table("DAY", "AGENT", "RUNS", "INPUT", "OUTPUT", "CACHE READ", "TOTAL TOKENS", "COST $")
    for row in rows:
        table.add_row(
            str(row.get("day")),
            str(row.get("agentId")),
            str(row.get("runs", 0)),
            f"{int(row.get('input') or 0):,}",
            f"{int(row.get('output') or 0):,}",
            f"{int(row.get('cacheRead') or 0):,}",
            f"{int(row.get('totalTokens') or 0):,}",
            f"{float(row.get('cost') or 0):.4f}",
        )
    console.print(table)
