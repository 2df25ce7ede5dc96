"""`gatewayctl tokens`: create, list and revoke named tokens. Each command is
`async (ctl, args) -> exit code`; failures raise CtlError.

`create` prints the new secret once, on stdout alone (so `gatewayctl tokens create ci --scopes
operator.read > ci.token` keeps nothing else); the gateway stores only its hash.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gateway.cli.ctl_context import Ctl
from gateway.cli.ctl_errors import CtlError, ExitCode
from gateway.cli.ctl_render import ago
from gateway.protocol.methods import OPERATOR_SCOPES


def parse_scopes(text: str) -> list[str]:
    """`--scopes operator.read,operator.write`; CtlError (exit 2) for an unknown scope."""
    scopes = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in scopes if s not in OPERATOR_SCOPES]
    if unknown or not scopes:
        raise CtlError(
            f"unknown scope {unknown[0]!r}" if unknown else "--scopes names no scope",
            exit_code=ExitCode.USAGE,
            hint=f"scopes are {', '.join(sorted(OPERATOR_SCOPES))}, separated by commas",
        )
    return scopes


async def tokens_create(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("tokens.create", {"name": args.name, "scopes": parse_scopes(args.scopes)})
    if ctl.out.json_mode:
        ctl.out.json(answer)
        return 0
    ctl.out.write(f"{answer['token']}\n")
    ctl.out.note(
        f"created token {answer['name']} with {', '.join(answer['scopes'])}; this is the only time "
        "its secret is shown (connect with --token or GATEWAY_TOKEN)"
    )
    return 0


async def tokens_list(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("tokens.list")
    ctl.out.result(answer, lambda console: render_tokens(console, answer.get("tokens") or []))
    return 0


async def tokens_revoke(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("tokens.revoke", {"name": args.name})
    closed = int(answer.get("closedConnections") or 0)
    line = f"revoked token {args.name}; closed {closed} connection{'' if closed == 1 else 's'} using it"
    ctl.out.result(answer, lambda console: console.print(escape(line)))
    return 0


def render_tokens(console: Console, tokens: Sequence[Mapping[str, Any]]) -> None:
    if not tokens:
        console.print("no named tokens; create one with `gatewayctl tokens create NAME`", style="dim")
        return
    table = Table("NAME", "SCOPES", "CONNECTIONS", "CREATED")
    for token in tokens:
        table.add_row(
            str(token.get("name")),
            ", ".join(str(s) for s in token.get("scopes") or ()),
            str(token.get("connections", 0)),
            ago(token.get("createdAt")),
        )
    console.print(table)
