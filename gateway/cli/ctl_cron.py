"""`gatewayctl cron`: list, get, add, update, remove, run, runs and status of cron jobs. Each
command is `async (ctl, args) -> exit code`; failures raise CtlError.

`add` and `update` build the `cron.add` params / `cron.update` patch from options (`--cron`,
`--every`, `--at`, `--message`, `--session`, `--announce`, ...); `--params` / `--patch` take the
JSON object whole (`-` reads stdin) for what the options do not cover, options given beside it
win.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gateway.cli.ctl_context import Ctl
from gateway.cli.ctl_errors import CtlError, ExitCode
from gateway.cli.ctl_render import ago, duration
from gateway.cli.ctl_system import parse_params

_EVERY = re.compile(r"^(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|m|min|h|d)?$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _usage(message: str, hint: str) -> CtlError:
    return CtlError(message, exit_code=ExitCode.USAGE, hint=hint)


def every_ms(text: str) -> int:
    """`--every 90s` / `5m` / `1h` / `2d` / `1500ms` (no unit: seconds) in milliseconds."""
    match = _EVERY.match(text.strip().lower())
    if match is None:
        raise _usage(f"--every {text!r} is not a duration", "write it like 30s, 5m, 1h or 2d")
    value = float(match.group("n")) * _UNIT_MS[match.group("unit") or "s"]
    if value < 1000:
        raise _usage("--every must be at least one second", "write it like 30s, 5m, 1h or 2d")
    return int(value)


def _schedule(args: argparse.Namespace) -> dict[str, Any] | None:
    given = [name for name in ("cron", "every", "at") if getattr(args, name, None) is not None]
    if len(given) > 1:
        raise _usage(
            f"--{given[0]} and --{given[1]} both give a schedule", "give one of --cron, --every, --at"
        )
    if args.tz is not None and args.cron is None:
        raise _usage("--tz goes with --cron", 'e.g. --cron "0 8 * * 1-5" --tz Europe/Berlin')
    if args.cron is not None:
        schedule: dict[str, Any] = {"kind": "cron", "expr": args.cron}
        if args.tz is not None:
            schedule["tz"] = args.tz
        return schedule
    if args.every is not None:
        return {"kind": "every", "everyMs": every_ms(args.every)}
    if args.at is not None:
        return {"kind": "at", "at": args.at}
    return None


def _target(text: str) -> str:
    if text in ("main", "isolated", "current") or text.startswith("session:"):
        return text
    return f"session:{text}"


def _delivery(args: argparse.Namespace) -> dict[str, Any] | None:
    if getattr(args, "no_announce", False):
        return {"mode": "none"}
    if args.announce is None:
        if args.account is not None or args.thread is not None:
            raise _usage("--account and --thread go with --announce", "e.g. --announce discord:123456")
        return None
    channel, sep, to = args.announce.partition(":")
    if not sep or channel not in ("discord", "slack") or not to:
        raise _usage(
            f"--announce {args.announce!r} names no channel",
            "write it PLATFORM:CHANNEL_ID, e.g. slack:C0123456",
        )
    delivery: dict[str, Any] = {"mode": "announce", "channel": channel, "to": to}
    if args.account is not None:
        delivery["accountId"] = args.account
    if args.thread is not None:
        delivery["threadId"] = args.thread
    return delivery


def _message(text: str | None) -> str | None:
    if text == "-":
        return sys.stdin.read()
    return text


def _object(text: str | None, option: str) -> dict[str, Any]:
    value = parse_params(text) if text is not None else {}
    if not isinstance(value, dict):
        raise _usage(f"{option} must be a JSON object", f'e.g. {option} \'{{"name": "daily"}}\'')
    return value


async def cron_list(ctl: Ctl, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"includeDisabled": True, "limit": args.limit}
    if args.agent:
        params["agentId"] = args.agent
    answer = await ctl.once("cron.list", params)
    ctl.out.result(answer, lambda console: render_jobs(console, answer.get("jobs") or []))
    return 0


async def cron_get(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("cron.get", {"id": args.id})
    ctl.out.result(answer, lambda console: render_job(console, answer))
    return 0


async def cron_status(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("cron.status")

    def render(console: Console) -> None:
        state = "on" if answer.get("enabled") else "off (jobs run only by hand)"
        console.print(f"scheduler    {state}")
        console.print(f"jobs         {answer.get('jobs', 0)} ({answer.get('enabledJobs', 0)} enabled)")
        console.print(f"next run     {_when(answer.get('nextWakeAtMs'))}")
        console.print(f"webhooks     {', '.join(answer.get('webhooks') or []) or 'none'}")
        console.print(f"stored in    {escape(str(answer.get('storePath')))}")

    ctl.out.result(answer, render)
    return 0


async def cron_add(ctl: Ctl, args: argparse.Namespace) -> int:
    params = _object(args.params, "--params")
    if args.name is not None:
        params["name"] = args.name
    schedule = _schedule(args)
    if schedule is not None:
        params["schedule"] = schedule
    message = _message(args.message)
    if message is not None:
        params["payload"] = {"kind": "agentTurn", "message": message}
    for key, value in (
        ("agentId", args.agent),
        ("sessionTarget", _target(args.session) if args.session else None),
        ("catchUp", args.catch_up),
        ("description", args.description),
    ):
        if value is not None:
            params[key] = value
    delivery = _delivery(args)
    if delivery is not None:
        params["delivery"] = delivery
    if args.disabled:
        params["enabled"] = False
    if args.delete_after_run:
        params["deleteAfterRun"] = True
    params.setdefault("sessionTarget", "isolated")
    params.setdefault("wakeMode", "now")
    for needed, hint in (
        ("name", "give the job a NAME"),
        ("schedule", "give --cron, --every or --at"),
        ("payload", "give --message TEXT (- reads stdin)"),
    ):
        if needed not in params:
            raise _usage(f"cron add needs a {needed}", hint)
    answer = await ctl.once("cron.add", params)

    def render(console: Console) -> None:
        console.print(f"added cron job {escape(str(answer.get('name')))} ({answer.get('id')})")
        console.print(f"next run {_when((answer.get('state') or {}).get('nextRunAtMs'))}", style="dim")

    ctl.out.result(answer, render)
    return 0


async def cron_update(ctl: Ctl, args: argparse.Namespace) -> int:
    patch = _object(args.patch, "--patch")
    if args.name is not None:
        patch["name"] = args.name
    schedule = _schedule(args)
    if schedule is not None:
        patch["schedule"] = schedule
    message = _message(args.message)
    if message is not None:
        patch["payload"] = {"kind": "agentTurn", "message": message}
    if args.enable or args.disable:
        patch["enabled"] = bool(args.enable)
    if args.catch_up is not None:
        patch["catchUp"] = args.catch_up
    if args.session is not None:
        patch["sessionTarget"] = _target(args.session)
    delivery = _delivery(args)
    if delivery is not None:
        patch["delivery"] = delivery
    if not patch:
        raise _usage("cron update changes nothing", "give what to change, e.g. --disable or --every 1h")
    answer = await ctl.once("cron.update", {"id": args.id, "patch": patch})
    ctl.out.result(answer, lambda console: render_job(console, answer))
    return 0


async def cron_remove(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("cron.remove", {"id": args.id})
    if not answer.get("removed"):
        raise CtlError(f"no cron job with id {args.id!r}", hint="see the jobs with `gatewayctl cron list`")
    ctl.out.result(answer, lambda console: console.print(f"removed cron job {escape(args.id)}"))
    return 0


async def cron_run(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("cron.run", {"id": args.id, "mode": "due" if args.due else "force"})

    def render(console: Console) -> None:
        if answer.get("enqueued"):
            console.print(f"started run {escape(str(answer.get('runId')))}")
            console.print("see its outcome with `gatewayctl cron runs " + escape(args.id) + "`", style="dim")
        else:
            console.print(f"nothing ran: {escape(str(answer.get('reason')))}")

    ctl.out.result(answer, render)
    return 0


async def cron_runs(ctl: Ctl, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"limit": args.limit}
    if args.id:
        params["id"] = args.id
    else:
        params["scope"] = "all"
    if args.status:
        params["status"] = args.status
    answer = await ctl.once("cron.runs", params)
    ctl.out.result(answer, lambda console: render_runs(console, answer.get("entries") or []))
    return 0


# --- rendering ------------------------------------------------------------------------------


def schedule_text(schedule: Mapping[str, Any]) -> str:
    kind = schedule.get("kind")
    if kind == "cron":
        tz = schedule.get("tz")
        return f"cron {schedule.get('expr')}" + (f" ({tz})" if tz else " (UTC)")
    if kind == "every":
        return f"every {duration(schedule.get('everyMs'))}"
    if kind == "at":
        return f"at {schedule.get('at')}"
    return str(kind)


def _when(ts_ms: Any) -> str:
    if not isinstance(ts_ms, int | float):
        return "—"
    delta = ts_ms - time.time() * 1000
    return f"in {duration(delta)}" if delta >= 0 else ago(ts_ms)


def _outcome(job: Mapping[str, Any]) -> Text:
    state = job.get("state") or {}
    if "runningAtMs" in state:
        return Text("running", style="cyan")
    status = state.get("lastRunStatus")
    if status is None:
        return Text("never ran", style="dim")
    text = Text(str(status), style="green" if status == "ok" else "red")
    delivery = state.get("lastDeliveryStatus")
    if delivery not in (None, "not-requested"):
        text.append(f" · {delivery}", style="dim")
    return text


def render_jobs(console: Console, jobs: Sequence[Mapping[str, Any]]) -> None:
    if not jobs:
        console.print(
            "no cron jobs; add one with `gatewayctl cron add NAME --every 1h --message ...`", style="dim"
        )
        return
    table = Table("ID", "NAME", "SCHEDULE", "NEXT", "LAST", "OUTCOME", "ENABLED")
    for job in jobs:
        state = job.get("state") or {}
        table.add_row(
            str(job.get("id")),
            escape(str(job.get("name"))),
            escape(schedule_text(job.get("schedule") or {})),
            _when(state.get("nextRunAtMs")) if job.get("enabled") else "—",
            ago(state.get("lastRunAtMs")),
            _outcome(job),
            "yes" if job.get("enabled") else "no",
        )
    console.print(table)


def render_job(console: Console, job: Mapping[str, Any]) -> None:
    state = job.get("state") or {}
    payload = job.get("payload") or {}
    delivery = job.get("delivery") or {}
    rows = [
        ("id", job.get("id")),
        ("name", job.get("name")),
        ("enabled", "yes" if job.get("enabled") else "no"),
        ("schedule", schedule_text(job.get("schedule") or {})),
        ("catch up", job.get("catchUp")),
        ("agent", job.get("agentId")),
        ("session", job.get("sessionTarget")),
        ("message", payload.get("message") or payload.get("text")),
        (
            "delivery",
            f"{delivery.get('channel')} {delivery.get('to')}"
            if delivery.get("mode") == "announce"
            else "none",
        ),
        ("next run", _when(state.get("nextRunAtMs")) if job.get("enabled") else "—"),
        ("last run", ago(state.get("lastRunAtMs"))),
    ]
    for name, value in rows:
        console.print(f"{name:<10} {escape(str(value))}")
    console.print(Text("outcome    ").append_text(_outcome(job)))
    if state.get("lastError"):
        console.print(f"error      {escape(str(state['lastError']))}", style="red")


def render_runs(console: Console, entries: Sequence[Mapping[str, Any]]) -> None:
    if not entries:
        console.print("no finished runs yet", style="dim")
        return
    table = Table("WHEN", "JOB", "TRIGGER", "STATUS", "DELIVERY", "DURATION", "SUMMARY")
    for entry in entries:
        status = str(entry.get("status"))
        summary = str(entry.get("error") or entry.get("summary") or "")
        table.add_row(
            ago(entry.get("runAtMs")),
            escape(str(entry.get("jobName") or entry.get("jobId"))),
            str(entry.get("trigger", "")),
            Text(status, style="green" if status == "ok" else "red"),
            str(entry.get("deliveryStatus", "")),
            duration(entry.get("durationMs")) if entry.get("durationMs") is not None else "—",
            escape(summary[:80] + ("…" if len(summary) > 80 else "")),
        )
    console.print(table)
