"""`gatewayctl approvals`: tool calls waiting for a decision, and deciding them. Each command is
`async (ctl, args) -> exit code`; failures raise CtlError.

`list` shows the pending requests (`--all`: every request, newest first, with who decided,
from where and when); `approve ID` lets the call run (`--session`: and every later call of the
same shape in that session); `deny ID --reason TEXT` refuses it, and the model reads the reason.
`approval_line` is how `sessions tail` and `sessions send` show a request as it happens.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gateway.cli.ctl_context import Ctl
from gateway.cli.ctl_errors import CtlError, ExitCode
from gateway.cli.ctl_render import ago

APPROVAL_EVENTS = frozenset({"exec.approval.requested", "exec.approval.resolved"})


async def approvals_list(ctl: Ctl, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"history": bool(args.all), "limit": args.limit}
    if args.key:
        params["sessionKey"] = args.key
    answer = await ctl.once("exec.approval.list", params)
    rows = answer.get("approvals") or []
    ctl.out.result(answer, lambda console: render_approvals(console, rows, history=bool(args.all)))
    return 0


async def approvals_approve(ctl: Ctl, args: argparse.Namespace) -> int:
    decision = "allow-always" if args.session else "allow-once"
    return await _resolve(ctl, {"id": args.id, "decision": decision})


async def approvals_deny(ctl: Ctl, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"id": args.id, "decision": "deny"}
    if args.reason:
        params["reason"] = args.reason
    return await _resolve(ctl, params)


async def _resolve(ctl: Ctl, params: dict[str, Any]) -> int:
    answer = await ctl.once("exec.approval.resolve", params)
    approval = answer.get("approval") or {}
    if not answer.get("applied"):
        if ctl.out.json_mode:
            ctl.out.json(answer)
        raise CtlError(
            f"approval {params['id']} was already {approval.get('status')} ({_ending(approval)})",
            exit_code=ExitCode.FAILED,
        )
    line = f"{approval.get('status')}: {approval.get('tool')} {_command(approval)}"
    if params["decision"] == "allow-always":
        line += " (and calls of the same shape in this session)"
    ctl.out.result(answer, lambda console: console.print(escape(line)))
    return 0


def _command(approval: Mapping[str, Any]) -> str:
    presentation = approval.get("presentation") or {}
    return str(presentation.get("commandPreview") or presentation.get("commandText") or "")


def _ending(approval: Mapping[str, Any]) -> str:
    status = str(approval.get("status"))
    if status in ("allowed", "denied"):
        who = f"{approval.get('decidedBy')} via {approval.get('surface')}"
        note = f": {approval['note']}" if approval.get("note") else ""
        return f"{approval.get('decision')} by {who}{note}"
    return str(approval.get("note") or approval.get("reason") or "")


def render_approvals(console: Console, rows: Sequence[Mapping[str, Any]], *, history: bool) -> None:
    if not rows:
        text = "no approval requests yet" if history else "no tool call is waiting for a decision"
        console.print(text, style="dim")
        return
    columns = ["ID", "SESSION", "TOOL", "CALL", "RISK", "ASKED"]
    columns += ["STATUS", "DECISION"] if history else ["BECAUSE"]
    table = Table(*columns)
    for row in rows:
        cells = [
            str(row.get("id")),
            str(row.get("sessionKey") or row.get("sessionId")),
            str(row.get("tool")),
            escape(_command(row)),
            str(row.get("risk") or ""),
            ago(row.get("createdAtMs")),
        ]
        cells += [str(row.get("status")), escape(_ending(row))] if history else [escape(str(row.get("rule")))]
        table.add_row(*cells)
    console.print(table)


def approval_line(frame: Mapping[str, Any]) -> Text:
    """One line for an approval event in a session's live view."""
    approval = frame.get("payload") or {}
    line = Text()
    if frame.get("event") == "exec.approval.requested":
        line.append("approval needed ", style="bold yellow")
        line.append(f"{approval.get('tool')}: {_command(approval)}")
        line.append(f"  (risk {approval.get('risk')}; {approval.get('rule')})", style="dim")
        line.append(f"\n  gatewayctl approvals approve {approval.get('id')}  |  deny {approval.get('id')}")
        return line
    status = str(approval.get("status"))
    line.append(f"approval {status} ", style="bold green" if status == "allowed" else "bold red")
    line.append(f"{approval.get('tool')}: {_ending(approval)}")
    return line
