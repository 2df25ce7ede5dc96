"""`gatewayctl sessions ...`: list, tree, show, new, send, tail, abort, branch, switch, reset,
compact, rm. Each command is `async (ctl, args) -> exit code`; failures raise CtlError."""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from typing import Any

from rich.console import Console
from rich.markup import escape

from gateway.cli.ctl_approvals import approval_line
from gateway.cli.ctl_context import Ctl
from gateway.cli.ctl_errors import CtlError, ExitCode
from gateway.cli.ctl_events import ReplyPrinter, event_line
from gateway.cli.ctl_feed import SessionFeed
from gateway.cli.ctl_follow import ResumeCursor, RunFollower, outcome_from_wait
from gateway.cli.ctl_render import render_session_list, render_transcript, render_tree, session_summary

POLL_AFTER_S = 3.0
"""`sessions send` asks `agent.wait` after this long without an event of its run, in case the run
ended without one reaching us (an input rejected before it ran)."""
COMPACT_TIMEOUT_S = 600.0
"""Compaction asks the session's model for a summary: allow it far longer than a plain call."""


def _print(ctl: Ctl, payload: Any, line: str) -> None:
    """`payload` with --json, else `line` (rich markup allowed)."""
    ctl.out.result(payload, lambda console: console.print(line, soft_wrap=True))


# --- reading ----------------------------------------------------------------------------------


async def sessions_list(ctl: Ctl, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"limit": args.limit, "offset": args.offset}
    for flag, name in (("agent", "agentId"), ("kind", "kind"), ("status", "status"), ("search", "search")):
        value = getattr(args, flag)
        if value:
            params[name] = value
    if args.all:
        params["includeArchived"] = True
    answer = await ctl.once("sessions.list", params, waiting="listing sessions")
    ctl.out.result(answer, lambda console: render_session_list(console, answer))
    return 0


async def sessions_tree(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("sessions.tree", {"key": args.key})
    ctl.out.result(answer, lambda console: render_tree(console, answer, focus=args.key))
    return 0


async def sessions_show(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("chat.history", {"sessionKey": args.key, "limit": args.limit})
    if answer.get("sessionId") is None:  # a key no session uses (yet): its history is empty
        raise CtlError(
            f"no session uses {args.key}",
            hint="see the sessions there are with `gatewayctl sessions list`",
            code="NOT_FOUND",
        )
    ctl.out.result(answer, lambda console: render_transcript(console, answer, full=args.full))
    return 0


# --- changing ---------------------------------------------------------------------------------


async def sessions_new(ctl: Ctl, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {}
    for flag, name in (("key", "key"), ("agent", "agentId"), ("label", "label"), ("model", "model")):
        value = getattr(args, flag)
        if value:
            params[name] = value
    answer = await ctl.once("sessions.create", params)

    def render(console: Console) -> None:
        console.print(f"created session [bold]{escape(str(answer.get('key')))}[/]")
        console.print(session_summary(answer.get("session") or {}))

    ctl.out.result(answer, render)
    return 0


async def sessions_abort(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("sessions.abort", {"key": args.key})
    runs = ", ".join(str(r) for r in answer.get("runIds") or [])
    line = (
        f"aborted run {runs} on {args.key}"
        if answer.get("aborted")
        else f"nothing to abort: no run in flight on {args.key}"
    )
    _print(ctl, answer, escape(line))
    return 0


async def sessions_branch(ctl: Ctl, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"key": args.key}
    if args.at:
        params["fromEntryId"] = args.at
    if args.new_key:
        params["newKey"] = args.new_key
    if args.label:
        params["label"] = args.label
    try:
        answer = await ctl.once("sessions.branch", params)
    except CtlError as exc:
        if args.at and exc.code in ("NOT_FOUND", "INVALID_REQUEST") and "entry" in exc.message.lower():
            exc.hint = (
                f"find entry ids with `gatewayctl sessions show {args.key}` (each message header ends "
                "with `entry <id>`)"
            )
        raise
    row = answer.get("session") or {}
    where = f"entry {row.get('branchPoint')}" if row.get("branchPoint") else "its start"
    _print(
        ctl,
        answer,
        f"created branch [bold]{escape(str(row.get('key')))}[/] (session {row.get('sessionId')}) "
        f"from {escape(args.key)} at {where}",
    )
    return 0


async def sessions_switch(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("sessions.switch", {"key": args.key, "sessionId": args.session_id})
    row = answer.get("session") or {}
    label = f" “{escape(str(row['label']))}”" if row.get("label") else ""
    _print(ctl, answer, f"[bold]{escape(args.key)}[/] now points at session {row.get('sessionId')}{label}")
    return 0


async def sessions_reset(ctl: Ctl, args: argparse.Namespace) -> int:
    answer = await ctl.once("sessions.reset", {"key": args.key})
    _print(
        ctl,
        answer,
        f"[bold]{escape(args.key)}[/] now points at a new, empty session {answer.get('sessionId')} "
        f"(the previous one, {answer.get('previousSessionId')}, is archived: `sessions list --all`)",
    )
    return 0


async def sessions_compact(ctl: Ctl, args: argparse.Namespace) -> int:
    async with ctl.connect() as client:
        with ctl.out.waiting(f"compacting {args.key} (the model writes a summary)"):
            answer = await ctl.call(
                client, "sessions.compact", {"key": args.key}, timeout=max(ctl.timeout, COMPACT_TIMEOUT_S)
            )
    tokens = answer.get("tokensBefore")
    before = f"{tokens:,} tokens" if isinstance(tokens, int) else "the older history"
    _print(
        ctl,
        answer,
        f"compacted {escape(args.key)}: summarised {before}; history is kept from entry "
        f"{answer.get('firstKeptEntryId')}",
    )
    return 0


async def sessions_rm(ctl: Ctl, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"key": args.key}
    if args.cascade:
        params["cascade"] = True
    try:
        answer = await ctl.once("sessions.delete", params)
    except CtlError as exc:
        if not args.cascade and exc.code == "INVALID_REQUEST" and "descendant" in exc.message:
            exc.hint = "delete its branches too with --cascade"
        raise
    _print(ctl, answer, f"deleted {escape(args.key)} (session {answer.get('sessionId')})")
    return 0


# --- streaming --------------------------------------------------------------------------------


def _message(args: argparse.Namespace) -> str:
    text: str = sys.stdin.read() if args.message == "-" else args.message
    if not text.strip():
        raise CtlError(
            "the message is empty", exit_code=ExitCode.USAGE, hint="pass the text, or - to read stdin"
        )
    return text


async def sessions_send(ctl: Ctl, args: argparse.Namespace) -> int:
    message = _message(args)
    input_key = str(uuid.uuid4())
    params: dict[str, Any] = {"sessionKey": args.key, "message": message, "idempotencyKey": input_key}
    if args.queue_mode:
        params["queueMode"] = args.queue_mode
    client = await ctl.open_client()
    async with SessionFeed(ctl, key=args.key, cursor=ResumeCursor(), client=client) as feed:
        if args.no_wait:
            answer = await ctl.call(client, "chat.send", params)
            _print(ctl, {**answer, "sessionKey": args.key}, str(answer.get("runId")))
            return 0
        # Subscribe before sending so no event of the run can slip by. A new key has no session
        # yet: send first (which creates it), then replay it from its first event.
        exists = await _subscribe_if_exists(feed)
        with ctl.out.waiting(f"sending to {args.key}"):
            answer = await ctl.call(client, "chat.send", params)
        if not exists:
            feed.cursor.last_seq = 0
            await feed.open()
        queued = answer.get("queued")
        if queued:
            ctl.out.note(busy_note(args.key, str(queued)))
        ctl.interrupt_hint = (
            f"the run goes on in the gateway: follow it with `gatewayctl sessions tail {args.key}`, "
            f"stop it with `gatewayctl sessions abort {args.key}`"
        )
        outcome = await _follow_run(ctl, feed, input_key, args.key)
    return 0 if outcome.get("status") == "ok" else int(ExitCode.FAILED)


def busy_note(key: str, disposition: str) -> str:
    """What became of a message sent while a run was in flight (`chat.send` answers `queued`:
    `steered` or `followup`, the latter also for a message collected into one follow-up)."""
    if disposition == "steered":
        return f"{key} is busy: your message was passed to the run in flight, which reads it at its next step"
    if disposition == "followup":
        return f"{key} is busy: your message will run as a follow-up when the run in flight ends"
    return f"{key} is busy: your message was accepted ({disposition})"


async def _subscribe_if_exists(feed: SessionFeed) -> bool:
    try:
        await feed.open()
    except CtlError as exc:
        if exc.code == "NOT_FOUND":
            return False
        raise
    return True


async def _follow_run(ctl: Ctl, feed: SessionFeed, input_key: str, key: str) -> dict[str, Any]:
    """Show the run's events until it ends; its outcome (also printed as JSON with --json).

    The run ends with its `session.agent.finished` event. When no event of the session came for
    a while, `agent.wait` is asked (an input rejected before it ran has no such event); when it
    says the run is over, every event of the session up to its last seq is still shown first,
    so the printed reply is the whole reply even when the feed was catching up after a
    reconnect."""
    follower = RunFollower(input_key)
    printer = None if ctl.out.json_mode else ReplyPrinter(ctl.out)
    ctl.out.start_waiting(f"waiting for {key} to answer")
    waited: dict[str, Any] | None = None
    until_seq: int | None = None
    quiet_since = time.monotonic()
    while follower.finished is None:
        if until_seq is not None and feed.cursor.caught_up(until_seq):
            break
        frame = await feed.next(timeout=0.5)
        if frame is None:
            if waited is None and time.monotonic() - quiet_since >= POLL_AFTER_S:
                waited = await _ended_without_event(ctl, feed, input_key)
                if waited is not None:
                    until_seq = await _session_last_seq(ctl, feed)
                    if until_seq is None:
                        waited = None  # the connection dropped: ask again once it is back
                quiet_since = time.monotonic()
            continue
        quiet_since = time.monotonic()
        name = str(frame.get("event"))
        payload = frame.get("payload") or {}
        if name.startswith("exec.approval."):
            if printer is not None:
                ctl.out.stop_waiting()
                ctl.out.err.print(approval_line(frame), soft_wrap=True)
            continue
        mine = follower.mine(name, payload)
        if printer is not None and (mine or name == "session.snapshot"):
            printer.show(frame)
    result = follower.outcome() if follower.finished is not None or waited is None else waited
    result.update({"sessionKey": key, "sessionId": feed.cursor.session_id})
    ctl.out.stop_waiting()
    if printer is not None:
        printer.finish(result)
    else:
        ctl.out.json(result)
    return result


async def _ended_without_event(ctl: Ctl, feed: SessionFeed, input_key: str) -> dict[str, Any] | None:
    """The outcome from `agent.wait` when the run is over, None while it goes on."""
    if feed.client is None:
        return None
    try:
        answer = await ctl.call(feed.client, "agent.wait", {"runId": input_key, "timeoutMs": 0})
    except CtlError as exc:
        if exc.exit_code == ExitCode.UNREACHABLE:
            return None  # the feed reconnects on its next read
        raise
    if answer.get("status") in (None, "timeout", "in_flight"):
        return None
    return outcome_from_wait(answer, input_key)


async def _session_last_seq(ctl: Ctl, feed: SessionFeed) -> int | None:
    """The followed session's last `sessionSeq` now, None when the connection dropped. When the
    key names another session by now (a reset), nothing more of the followed one is to come:
    its last shown seq."""
    if feed.client is None or feed.cursor.session_id is None:
        return None
    try:
        answer = await ctl.call(feed.client, "sessions.describe", {"key": feed.key})
    except CtlError as exc:
        if exc.exit_code == ExitCode.UNREACHABLE:
            return None
        raise
    if answer.get("sessionId") != feed.cursor.session_id:
        return feed.cursor.last_seq or 0
    last = answer.get("lastSeq")
    return last if isinstance(last, int) else 0


def _ended(frame: dict[str, Any], start_seq: int) -> bool:
    payload = frame.get("payload") or {}
    return (
        frame.get("event") == "session.status.changed"
        and payload.get("status") in ("idle", "interrupted")
        and int(payload.get("sessionSeq") or 0) > start_seq
    )


async def sessions_tail(ctl: Ctl, args: argparse.Namespace) -> int:
    ctl.interrupt_exit = ExitCode.OK
    async with SessionFeed(ctl, key=args.key, cursor=ResumeCursor(last_seq=args.from_seq)) as feed:
        answer = await feed.open()
        start_seq = int(answer.get("lastSeq") or 0)
        ctl.out.note(
            f"following {args.key} (session {answer.get('sessionId')}) after event #{feed.cursor.last_seq}"
            f" of {start_seq}; Ctrl-C to stop"
        )
        while True:
            frame = await feed.next()
            if frame is None:
                continue
            if ctl.out.json_mode:
                ctl.out.json({"event": frame.get("event"), "payload": frame.get("payload")}, compact=True)
            elif str(frame.get("event")).startswith("exec.approval."):
                ctl.out.out.print(approval_line(frame), soft_wrap=True)
            else:
                ctl.out.out.print(event_line(frame), soft_wrap=True)
            if args.until_idle and _ended(frame, start_seq):
                return 0
