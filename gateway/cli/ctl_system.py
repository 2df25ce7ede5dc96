"""Gateway-wide commands: status, health, channels status, config show/reload, pairing list/approve,
and `call` for any method. Each is `async (ctl, args) -> exit code`; failures raise CtlError."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape

from gateway.cli.ctl_context import Ctl
from gateway.cli.ctl_errors import CtlError, ExitCode
from gateway.cli.ctl_render import (
    render_channels,
    render_config,
    render_health,
    render_pairing,
    render_status,
)


async def status(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("status")
    ctl.out.result(answer, lambda console: render_status(console, answer, ctl.target.url))
    return 0


async def health(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("health")
    ctl.out.result(answer, lambda console: render_health(console, answer))
    return 0 if answer.get("ok") else int(ExitCode.FAILED)


async def channels_status(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("channels.status")
    ctl.out.result(answer, lambda console: render_channels(console, answer.get("channels") or []))
    return 0


async def config_show(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("config.get")
    config = answer.get("config") or {}
    if not args.key:
        ctl.out.result(answer, lambda console: render_config(console, config, answer.get("path")))
        return 0
    value = _lookup(config, args.key)

    def render(console: Console) -> None:
        if isinstance(value, dict):
            render_config(console, {args.key: value}, answer.get("path"))
        else:
            console.print(json.dumps(value, ensure_ascii=False) if value is not None else "(unset)")

    ctl.out.result({"key": args.key, "value": value, "path": answer.get("path")}, render)
    return 0


def _lookup(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise CtlError(
                f"the configuration has no key {dotted!r}",
                hint="see every key with `gatewayctl config show`",
            )
    return node


async def config_reload(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("config.reload", waiting="reloading the configuration")
    changed = answer.get("changed")
    if isinstance(changed, dict):
        changed = changed.get("changed")
    names = [str(c) for c in changed] if isinstance(changed, list) else []
    line = (
        f"reloaded the configuration; changed: {', '.join(names)}"
        if names
        else "reloaded the configuration; nothing changed"
    )
    pending = answer.get("restartRequired")
    waiting = [str(key) for key in pending] if isinstance(pending, list) else []
    if waiting:
        line += f"\ntaking effect after a restart: {', '.join(waiting)}"
    ctl.out.result(answer, lambda console: console.print(escape(line)))
    return 0


async def pairing_list(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("pairing.list")
    ctl.out.result(answer, lambda console: render_pairing(console, answer.get("requests") or []))
    return 0


async def pairing_approve(ctl: Ctl, args: argparse.Namespace) -> int:
    params = {"code": args.code}
    if args.channel is not None:
        params["channel"] = args.channel
    answer = await ctl.once("pairing.approve", params)
    approved = answer.get("approved") or {}
    who = approved.get("senderName") or approved.get("senderId") if isinstance(approved, dict) else None
    line = f"approved {args.code}" + (f": {who} may now talk to the agent" if who else "")
    ctl.out.result(answer, lambda console: console.print(escape(line)))
    return 0


def parse_params(text: str | None) -> Any:
    """`--params` as JSON (`-` reads stdin); CtlError (exit 2) when it is not JSON."""
    if text is None:
        return None
    raw = sys.stdin.read() if text == "-" else text
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise CtlError(
            f"--params is not valid JSON: {exc}",
            exit_code=ExitCode.USAGE,
            hint='write it like --params \'{"key": "agent:main:main"}\'',
        ) from None


async def call(ctl: Ctl, args: argparse.Namespace) -> int:
    params = parse_params(args.params)
    async with ctl.connect() as client:
        with ctl.out.waiting(f"waiting for {args.method}"):
            if args.expect_final:
                payload = await ctl.call_final(client, args.method, params)
            else:
                payload = await ctl.call(client, args.method, params)
    if ctl.out.json_mode:
        ctl.out.json(payload)
    else:
        ctl.out.out.print_json(data=payload, default=str)
    return 0
