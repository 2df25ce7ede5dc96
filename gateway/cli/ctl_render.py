"""Human renderings of method answers: status, health, channels, session tables and trees,
transcripts, configuration, pairing requests. Each takes a rich `Console` and the payload."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from gateway.cli.ctl_events import compact_json

STATUS_STYLES = {"idle": "green", "running": "bold yellow", "interrupted": "red", "archived": "dim"}


# --- small formats ----------------------------------------------------------------------------


def duration(ms: Any) -> str:
    """`3 d 4 h`, `2 h 5 min`, `4 min 10 s`, `12 s`."""
    if not isinstance(ms, int | float):
        return "?"
    seconds = int(ms // 1000)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def ago(ts_ms: Any, now_ms: int | None = None) -> str:
    if not isinstance(ts_ms, int | float):
        return "never"
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return duration(max(0, now - ts_ms)) + " ago"


def size(count: Any) -> str:
    if not isinstance(count, int | float):
        return "?"
    value = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"  # pragma: no cover - the loop returns at GB


def status_text(row: Mapping[str, Any]) -> Text:
    status = str(row.get("status") or "?")
    return Text(status, style=STATUS_STYLES.get(status, ""))


def _opt(value: Any) -> str:
    return "" if value is None else str(value)


# --- gateway ----------------------------------------------------------------------------------


def render_status(console: Console, status: Mapping[str, Any], url: str) -> None:
    """One `label  value` line per fact. Values are plain text (a hint such as `[agent_defaults]`
    is printed as written, not read as markup) and lines are not padded, so a pipe gets exactly
    the text."""
    slots = status.get("runSlots") or {}
    database = status.get("database") or {}
    sessions = status.get("sessions") or {}
    depths = status.get("queueDepths") or {}
    waiting = sum(v for v in depths.values() if isinstance(v, int))
    rows = [
        ("gateway", f"{url}  (version {status.get('version')}, pid {status.get('pid')})"),
        ("uptime", duration(status.get("uptimeMs"))),
        ("model", _opt(status.get("model")) or "none configured"),
        ("connections", str(status.get("connections", "?"))),
        (
            "sessions",
            f"{sessions.get('count', '?')} stored · {status.get('liveSessions', '?')} live · "
            f"{status.get('runsInFlight', '?')} run(s) in flight",
        ),
        ("run slots", f"{slots.get('active', '?')} active · {slots.get('waiting', '?')} waiting"),
        ("queues", f"{waiting} input(s) waiting in {len(depths)} session(s)" if depths else "empty"),
        ("journal", f"{status.get('journalPending', '?')} pending"),
        ("database", f"{database.get('url') or '?'} ({size(database.get('sizeBytes'))})"),
        ("sandbox", sandbox_line(status.get("sandbox"))),
    ]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        line = Text(f"{label:<{width}}", style="bold")
        line.append(f"  {value}")
        console.print(line, soft_wrap=True)
    if depths:
        table = Table("SESSION", "WAITING", title="queue depths", title_justify="left")
        for session_id, depth in sorted(depths.items(), key=lambda kv: -int(kv[1])):
            table.add_row(session_id, str(depth))
        console.print(table)
    render_channels(console, status.get("channels") or [])


def sandbox_line(sandbox: Any) -> str:
    """Which runner confines `bash`: `bwrap (mode auto, confined)`, or why there is none."""
    if not isinstance(sandbox, Mapping):
        return "?"
    mode = sandbox.get("mode") or "?"
    runner = sandbox.get("runner")
    if runner in (None, "none"):
        return f"none: bash is refused (mode {mode}; {sandbox.get('reason') or 'no runner works here'})"
    state = "confined" if sandbox.get("confined") else "NOT CONFINED"
    return f"{runner} (mode {mode}, {state})"


def render_channels(console: Console, channels: Sequence[Mapping[str, Any]]) -> None:
    """One row per binding as `channels.status` reports it (gateway/channels.py)."""
    if not channels:
        console.print("channels: none configured", style="dim")
        return
    table = Table("CHANNEL", "MODE", "STATE", "LAST INBOUND", "QUEUED", "REPLYING", title="channels")
    table.title_justify = "left"
    for entry in channels:
        state = str(entry.get("state") or "?")
        style = {"ready": "green", "closed": "red"}.get(state, "yellow")
        age = entry.get("secondsSinceLastInbound")
        table.add_row(
            str(entry.get("id") or f"{entry.get('channel')}:{entry.get('accountId')}"),
            _opt(entry.get("mode")),
            Text(state, style=style),
            duration(age * 1000) + " ago" if isinstance(age, int | float) else "never",
            _opt(entry.get("inboundQueue")),
            _opt(entry.get("replyStreams")),
        )
    console.print(table)


def render_health(console: Console, health: Mapping[str, Any]) -> None:
    ok = bool(health.get("ok"))
    console.print(Text("healthy" if ok else "unhealthy", style="bold green" if ok else "bold red"), end="")
    console.print(f"  (answered in {health.get('durationMs', '?')} ms)", style="dim")
    sessions = health.get("sessions") or {}
    console.print(
        f"sessions: {sessions.get('count', '?')} stored · {sessions.get('live', '?')} live · "
        f"{sessions.get('running', '?')} running"
    )
    agents = health.get("agents") or []
    default = health.get("defaultAgentId")
    for agent in agents:
        mark = " (default)" if agent.get("agentId") == default else ""
        model = agent.get("model") or "none configured"
        console.print(Text(f"agent {agent.get('agentId')}{mark}: model {model}"), soft_wrap=True)
    render_channels(console, health_channels(health))


def health_channels(health: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """`health.channels` is keyed by channel id (OpenClaw's shape), in `channelOrder`."""
    channels = health.get("channels")
    if isinstance(channels, list):
        return [c for c in channels if isinstance(c, dict)]
    if not isinstance(channels, dict):
        return []
    order = health.get("channelOrder") or list(channels)
    return [{"id": name, **channels[name]} for name in order if isinstance(channels.get(name), dict)]


# --- sessions ---------------------------------------------------------------------------------


def render_session_list(console: Console, answer: Mapping[str, Any]) -> None:
    rows = answer.get("sessions") or []
    if not rows:
        console.print("no sessions match", style="dim")
        return
    table = Table("KEY", "LABEL", "KIND", "STATUS", "AGENT", "MODEL", "TOKENS", "UPDATED", "SEQ")
    table.columns[0].overflow = "fold"
    table.columns[0].min_width = 20
    table.columns[7].no_wrap = True
    now = int(time.time() * 1000)
    for row in rows:
        key = (
            Text(str(row["key"])) if row.get("key") else Text(f"{row.get('sessionId')} (no key)", style="dim")
        )
        table.add_row(
            key,
            _opt(row.get("label")),
            _opt(row.get("kind")),
            status_text(row),
            _opt(row.get("agentId")),
            _opt(row.get("model")) or "default",
            f"{row.get('totalTokens') or 0:,}",
            ago(row.get("updatedAt"), now),
            _opt(row.get("lastSeq")),
        )
    console.print(table)
    offset = int(answer.get("nextOffset") or 0) - len(rows) if answer.get("hasMore") else None
    total = answer.get("totalCount", len(rows))
    start = (offset if offset is not None else total - len(rows)) + 1
    footer = f"sessions {start} to {start + len(rows) - 1} of {total}"
    if answer.get("hasMore"):
        footer += f"; next page: --offset {answer.get('nextOffset')}"
    console.print(footer, style="dim")


def _node_label(node: Mapping[str, Any], focus: str | None) -> Text:
    label = Text()
    label.append(str(node.get("key") or f"(no key) {node.get('sessionId')}"), style="bold")
    if node.get("label"):
        label.append(f" “{node['label']}”")
    label.append(f"  {node.get('kind')} ", style="dim")
    label.append_text(status_text(node))
    label.append(f"  {node.get('sessionId')}", style="dim")
    if node.get("branchPoint"):
        label.append(f"  from entry {node['branchPoint']}", style="dim")
    if focus is not None and focus in (node.get("keys") or []):
        label.append("  ◀", style="bold cyan")
    return label


def render_tree(console: Console, answer: Mapping[str, Any], focus: str | None = None) -> None:
    root = answer.get("root") or {}
    tree = Tree(_node_label(root, focus))

    def add(parent: Tree, node: Mapping[str, Any]) -> None:
        for child in node.get("children") or []:
            add(parent.add(_node_label(child, focus)), child)

    add(tree, root)
    console.print(tree)


def session_summary(row: Mapping[str, Any]) -> Text:
    text = Text()
    text.append(str(row.get("key") or row.get("sessionId")), style="bold")
    if row.get("label"):
        text.append(f" “{row['label']}”")
    text.append("  ")
    text.append_text(status_text(row))
    text.append(f"  {row.get('kind')} · agent {row.get('agentId')} · model {row.get('model') or 'default'}")
    text.append(f" · {row.get('totalTokens') or 0:,} tokens · last seq {row.get('lastSeq')}", style="dim")
    text.append(f"\nsession {row.get('sessionId')}", style="dim")
    if row.get("parentId"):
        text.append(f" · branch of {row['parentId']} at entry {row.get('branchPoint')}", style="dim")
    return text


def render_transcript(console: Console, history: Mapping[str, Any], *, full: bool = False) -> None:
    info = history.get("sessionInfo") or {}
    console.print(session_summary(info))
    messages = history.get("messages") or []
    if history.get("hasMore"):
        console.print(
            f"(older messages not shown; showing the last {len(messages)}; raise --limit)", style="dim"
        )
    if not messages:
        console.print("no messages yet", style="dim")
    for message in messages:
        console.print()
        console.print(_message_block(message, full=full))
    in_flight = history.get("inFlightRun")
    if isinstance(in_flight, dict):
        console.print()
        console.print(Text(f"▌ running {in_flight.get('runId')}", style="bold yellow"))
        if in_flight.get("text"):
            console.print(escape(str(in_flight["text"])) + "…")


def _header(message: Mapping[str, Any]) -> Text:
    role = str(message.get("role"))
    style = {"user": "bold cyan", "assistant": "bold green", "toolResult": "bold yellow"}.get(role, "bold")
    header = Text(f"▌ {role}", style=style)
    if role == "assistant":
        bits = [f"{message.get('provider')}/{message.get('model')}"]
        usage = message.get("usage") or {}
        if usage.get("totalTokens"):
            bits.append(f"{usage['totalTokens']:,} tokens")
        if message.get("stopReason"):
            bits.append(str(message["stopReason"]))
        header.append("  " + " · ".join(bits), style="dim")
    if role == "toolResult":
        verdict = "error" if message.get("isError") else "ok"
        header.append(f"  {message.get('toolName')} {verdict}", style="red" if message.get("isError") else "")
    meta = message.get("__gateway") or {}
    stamp = message.get("timestamp")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp / 1000)) if isinstance(stamp, int) else ""
    header.append(f"  {when}  entry {meta.get('id', '?')}", style="dim")
    return header


def _message_block(message: Mapping[str, Any], *, full: bool) -> Group:
    parts: list[Any] = [_header(message)]
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            text = str(block["text"])
            parts.append(Text(text if full or message.get("role") != "toolResult" else _head(text)))
        elif kind == "thinking":
            parts.append(Text(str(block.get("thinking", "")), style="dim italic"))
        elif kind == "toolCall":
            parts.append(
                Text(f"→ {block.get('name')} {compact_json(block.get('arguments', {}))}", style="yellow")
            )
        elif kind == "image":
            parts.append(Text(f"[image {block.get('mimeType', '')}]", style="dim"))
    if message.get("errorMessage"):
        parts.append(Text(f"error: {message['errorMessage']}", style="red"))
    return Group(*parts)


def _head(text: str, lines: int = 20) -> str:
    rows = text.splitlines()
    if len(rows) <= lines:
        return text
    return "\n".join(rows[:lines]) + f"\n… ({len(rows) - lines} more lines; --full shows all)"


# --- configuration and pairing ----------------------------------------------------------------


def render_config(console: Console, config: Mapping[str, Any], path: str | None) -> None:
    """The configuration in TOML form (unset values as comments). Lines are never wrapped at the
    console width (a wrapped `key = "value"` is no longer TOML), so the output can be saved as a
    config file at any width."""
    line = Text(f"# config file: {path or 'none (built-in defaults and environment)'}", style="dim")
    console.print(line, soft_wrap=True)
    scalars = {k: v for k, v in config.items() if not isinstance(v, dict | list)}
    for key, value in scalars.items():
        console.print(_toml_line(key, value), soft_wrap=True)
    for key, value in config.items():
        if isinstance(value, dict):
            _toml_table(console, key, value)
        elif isinstance(value, list) and all(isinstance(v, dict) for v in value) and value:
            for item in value:
                console.print(Text(f"\n[[{key}]]", style="bold"), soft_wrap=True)
                for k, v in item.items():
                    console.print(_toml_line(k, v), soft_wrap=True)
        elif isinstance(value, list):
            console.print(_toml_line(key, value), soft_wrap=True)


def _toml_table(console: Console, name: str, table: Mapping[str, Any]) -> None:
    console.print(Text(f"\n[{name}]", style="bold"), soft_wrap=True)
    nested = {k: v for k, v in table.items() if isinstance(v, dict)}
    for key, value in table.items():
        if key not in nested:
            console.print(_toml_line(key, value), soft_wrap=True)
    for key, value in nested.items():
        _toml_table(console, f"{name}.{key}", value)


def _toml_line(key: str, value: Any) -> Text:
    if value is None:
        return Text(f"# {key} = (unset)", style="dim")
    return Text(f"{key} = {json.dumps(value, ensure_ascii=False, default=str)}")


def render_pairing(console: Console, requests: Sequence[Mapping[str, Any]]) -> None:
    if not requests:
        console.print("no pending pairing requests", style="dim")
        return
    table = Table("CODE", "CHANNEL", "ACCOUNT", "SENDER", "REQUESTED")
    for request in requests:
        sender = request.get("senderName") or ""
        sender_id = request.get("senderId") or ""
        table.add_row(
            Text(str(request.get("code")), style="bold"),
            _opt(request.get("channel")),
            _opt(request.get("accountId")),
            f"{sender} ({sender_id})" if sender else str(sender_id),
            ago(request.get("createdAt")),
        )
    console.print(table)
    console.print("approve one with `gatewayctl pairing approve CODE`", style="dim")
