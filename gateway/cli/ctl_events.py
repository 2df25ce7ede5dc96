"""How native session events look on a terminal: one line per event (`sessions tail`), and the
live reply of `sessions send` (text on stdout as it streams, tools and the outcome on stderr)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from rich.text import Text

from gateway.cli.ctl_follow import message_text
from gateway.cli.ctl_output import Output

_STYLES = {
    "status.changed": "magenta",
    "agent.started": "bold blue",
    "agent.finished": "bold blue",
    "turn.started": "blue",
    "turn.finished": "blue",
    "message.started": "cyan",
    "message.delta": "dim",
    "message.completed": "cyan",
    "tool.started": "yellow",
    "tool.updated": "yellow",
    "tool.finished": "yellow",
    "error": "bold red",
    "snapshot": "bold magenta",
}


def clip(text: str, width: int = 120) -> str:
    """`text` on one line, at most `width` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def hms(ts: Any) -> str:
    """`HH:MM:SS.mmm` local time of a Unix-ms timestamp."""
    if not isinstance(ts, int | float):
        return "--:--:--.---"
    seconds = ts / 1000
    return time.strftime("%H:%M:%S", time.localtime(seconds)) + f".{int(ts % 1000):03d}"


def tokens_and_time(payload: Mapping[str, Any]) -> str:
    parts = []
    if isinstance(payload.get("totalTurns"), int):
        turns = payload["totalTurns"]
        parts.append(f"{turns} turn{'s' if turns != 1 else ''}")
    if isinstance(payload.get("totalTokens"), int):
        parts.append(f"{payload['totalTokens']:,} tokens")
    ms = payload.get("durationMs")
    if isinstance(ms, int | float):
        parts.append(f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.1f} s")
    return " · ".join(parts)


def event_detail(name: str, payload: Mapping[str, Any]) -> str:
    """What a native event says, in a few words (`name` without the `session.` prefix)."""
    if name == "status.changed":
        return str(payload.get("status"))
    if name == "agent.started":
        return f"run {payload.get('runId')}"
    if name in ("turn.started", "turn.finished"):
        extra = " (tool calls)" if payload.get("hasToolCalls") else ""
        return f"turn {payload.get('turnIndex', '?')}{extra}"
    if name == "message.started":
        return str(payload.get("role", ""))
    if name == "message.delta":
        return f"{payload.get('kind', 'text')} +{compact_json(payload.get('delta', ''))}"
    if name == "message.completed":
        return _completed(payload.get("message"))
    if name == "tool.started":
        return f"{payload.get('toolName')} {clip(compact_json(payload.get('args', {})), 100)}"
    if name == "tool.updated":
        return f"{payload.get('toolName')} …"
    if name == "tool.finished":
        verdict = "error" if payload.get("isError") else "ok"
        ms = payload.get("durationMs")
        took = f" {ms} ms" if isinstance(ms, int | float) else ""
        return f"{payload.get('toolName')} {verdict}{took}: {clip(_result_text(payload.get('result')), 90)}"
    if name == "agent.finished":
        error = payload.get("errorMessage")
        summary = tokens_and_time(payload)
        reason = str(payload.get("terminationReason"))
        return " · ".join(p for p in (reason, summary, f"error: {error}" if error else "") if p)
    if name == "error":
        return f"{payload.get('code')}: {payload.get('message')}"
    if name == "snapshot":
        count = len(payload.get("messages") or [])
        partial = " + a partial reply" if payload.get("partial") else ""
        return f"{count} message(s) committed since the last event shown{partial}"
    return ""


def _completed(message: Any) -> str:
    if not isinstance(message, dict):
        return ""
    role = str(message.get("role"))
    text = clip(message_text(message), 90)
    calls = [
        b.get("name")
        for b in message.get("content") or []
        if isinstance(b, dict) and b.get("type") == "toolCall"
    ]
    bits = [f"{role}: {json.dumps(text, ensure_ascii=False)}"]
    if calls:
        bits.append(f"calls {', '.join(str(c) for c in calls)}")
    if message.get("stopReason") not in (None, "stop", "toolUse"):
        bits.append(str(message.get("stopReason")))
    if message.get("errorMessage"):
        bits.append(f"error: {message['errorMessage']}")
    return " · ".join(bits)


def _result_text(result: Any) -> str:
    if isinstance(result, dict):
        return message_text(result)
    return "" if result is None else str(result)


def event_line(frame: Mapping[str, Any]) -> Text:
    """`   12  14:03:01.123  message.completed  assistant: "echo: hi"` with colours."""
    payload = frame.get("payload") or {}
    name = str(frame.get("event", "")).removeprefix("session.")
    line = Text()
    line.append(f"{payload.get('sessionSeq', '?'):>6}  ", style="bold")
    line.append(f"{hms(payload.get('ts'))}  ", style="dim")
    line.append(f"{name:<18} ", style=_STYLES.get(name, ""))
    line.append(event_detail(name, payload))
    return line


class ReplyPrinter:
    """The live view of a run for `sessions send`: the reply's text on stdout as it streams,
    thinking, tool calls and the outcome on stderr (so `> file` captures the reply alone).

    Thinking is a block of its own on a terminal: `thinking:` and the dimmed thoughts, then a
    blank line before the reply (both on stderr, so stdout stays exactly the reply)."""

    def __init__(self, out: Output) -> None:
        self.out = out
        self.at_line_start = True
        self.shown_text = False
        self.thinking = False
        """A thinking block is open on stderr (its line is not ended yet)."""

    def show(self, frame: Mapping[str, Any]) -> None:
        payload = frame.get("payload") or {}
        name = str(frame.get("event", "")).removeprefix("session.")
        if name == "message.delta" and payload.get("kind") == "text":
            delta = str(payload.get("delta", ""))
            if delta:
                self.out.stop_waiting()
                self._end_thinking()
                self.out.write(delta)
                self.at_line_start = delta.endswith("\n")
                self.shown_text = True
        elif name == "message.delta" and payload.get("kind") == "thinking":
            self.out.stop_waiting()
            if not self.thinking:
                self._end_line()
                self.out.err.print(Text("thinking: ", style="dim bold"), end="")
                self.thinking = True
            self.out.err.print(Text(str(payload.get("delta", "")), style="dim italic"), end="")
        elif name == "tool.started":
            self._end_thinking()
            self._end_line()
            self.out.note(f"→ {event_detail(name, payload)}", style="yellow")
            self.out.start_waiting(f"running {payload.get('toolName')}")
        elif name == "tool.finished":
            self.out.stop_waiting()
            style = "red" if payload.get("isError") else "yellow"
            self.out.note(f"← {event_detail(name, payload)}", style=style)
        elif name == "message.completed":
            message = payload.get("message") or {}
            if message.get("role") == "assistant":
                self._end_thinking()
                self._end_line()
        elif name == "snapshot":
            self._end_thinking()
            self._end_line()
            self.out.note(f"(resumed from a snapshot: {event_detail(name, payload)})")

    def finish(self, outcome: Mapping[str, Any]) -> None:
        self.out.stop_waiting()
        self._end_thinking()
        self._end_line()
        status = outcome.get("status")
        summary = tokens_and_time(outcome)
        if status == "ok":
            self.out.note("✓ done" + (f" · {summary}" if summary else ""), style="green")
            return
        why = outcome.get("errorMessage") or outcome.get("terminationReason") or status
        self.out.note(f"✗ run {status}: {why}" + (f" · {summary}" if summary else ""), style="bold red")

    def _end_thinking(self) -> None:
        if self.thinking:
            self.out.err.print()
            self.out.err.print()
            self.thinking = False

    def _end_line(self) -> None:
        if not self.at_line_start:
            self.out.write("\n")
            self.at_line_start = True
