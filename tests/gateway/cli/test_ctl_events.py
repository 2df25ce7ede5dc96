"""How `sessions send` shows a run: the reply alone on stdout, everything else on stderr."""

from __future__ import annotations

import io
from typing import Any

from gateway.cli.ctl_events import ReplyPrinter
from gateway.cli.ctl_output import Output
from gateway.cli.ctl_sessions import busy_note


def delta(kind: str, text: str) -> dict[str, Any]:
    return {"event": "session.message.delta", "payload": {"kind": kind, "delta": text}}


def completed() -> dict[str, Any]:
    return {"event": "session.message.completed", "payload": {"message": {"role": "assistant"}}}


def test_thinking_is_a_block_of_its_own_before_the_reply() -> None:
    stdout, stderr = io.StringIO(), io.StringIO()
    printer = ReplyPrinter(Output(json_mode=False, color=False, stdout=stdout, stderr=stderr))
    for frame in (
        delta("thinking", "Check the "),
        delta("thinking", "workspace first."),
        delta("text", "echo: "),
        delta("text", "done"),
        completed(),
    ):
        printer.show(frame)
    printer.finish({"status": "ok"})
    assert stdout.getvalue() == "echo: done\n"
    assert stderr.getvalue().startswith("thinking: Check the workspace first.\n\n")


def test_a_reply_without_thinking_has_no_thinking_block() -> None:
    stdout, stderr = io.StringIO(), io.StringIO()
    printer = ReplyPrinter(Output(json_mode=False, color=False, stdout=stdout, stderr=stderr))
    printer.show(delta("text", "echo: hi"))
    printer.show(completed())
    printer.finish({"status": "ok"})
    assert stdout.getvalue() == "echo: hi\n"
    assert "thinking" not in stderr.getvalue()


def test_what_became_of_a_message_sent_to_a_busy_session_reads_as_a_sentence() -> None:
    assert busy_note("k", "steered") == (
        "k is busy: your message was passed to the run in flight, which reads it at its next step"
    )
    assert busy_note("k", "followup") == (
        "k is busy: your message will run as a follow-up when the run in flight ends"
    )
