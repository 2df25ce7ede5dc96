"""bindings/approvals.py: button ids, the lines a message shows, and the reply to a click."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bindings.approvals import (
    COMMAND_CHARS,
    ClickAnswer,
    ClickReply,
    action_id,
    answer_click,
    ending_line,
    parse_action_id,
    request_lines,
)
from bindings.discord import approval_buttons as discord_buttons
from bindings.slack import approval_buttons as slack_buttons

REQUEST: dict[str, Any] = {
    "id": "0196f3c2-aaaa",
    "tool": "bash",
    "command": "chmod 777 a.txt",
    "presentation": {"commandText": "chmod 777 a.txt"},
    "risk": "medium",
    "rule": "risk medium is at or above ask_threshold medium",
    "status": "pending",
}


@given(st.sampled_from(["allow-once", "deny"]), st.text(min_size=1, max_size=60))
def test_a_button_id_names_its_decision_and_request(decision: Any, approval_id: str) -> None:
    assert parse_action_id(action_id(decision, approval_id)) == (decision, approval_id)


def test_other_ids_are_not_approval_buttons() -> None:
    for value in ("", "approval:", "approval:allow-always:x", "approval:deny:", "pairing:deny:x", "deny:x"):
        assert parse_action_id(value) is None, value


def test_the_message_shows_the_tool_the_command_and_why() -> None:
    assert request_lines(REQUEST) == (
        "Approval needed: bash",
        "chmod 777 a.txt",
        "Risk medium; asked because risk medium is at or above ask_threshold medium.",
    )
    long = {**REQUEST, "presentation": {"commandText": "x" * 5000}}
    assert len(request_lines(long)[1]) == COMMAND_CHARS
    fenced = {**REQUEST, "presentation": {"commandText": "echo ```; rm"}}
    assert "```" not in request_lines(fenced)[1], "a command cannot close the code block"


def test_the_ending_says_who_decided_from_where() -> None:
    ended = {
        **REQUEST,
        "status": "allowed",
        "decision": "allow-once",
        "decidedBy": "77",
        "surface": "discord",
    }
    assert ending_line(ended) == "Approved by 77 via discord"
    always = {**ended, "decision": "allow-always", "surface": "dashboard", "decidedBy": "operator"}
    assert ending_line(always) == "Approved for this session by operator via dashboard"
    denied = {
        **REQUEST,
        "status": "denied",
        "decidedBy": "operator",
        "surface": "gatewayctl",
        "note": "use 644",
    }
    assert ending_line(denied) == "Denied by operator via gatewayctl: use 644"
    assert ending_line({**REQUEST, "status": "expired"}) == "Expired: no one decided in time"
    stopped = {**REQUEST, "status": "cancelled", "note": "The run was stopped."}
    assert ending_line(stopped) == "Cancelled: The run was stopped."


def test_the_reply_to_a_click() -> None:
    assert answer_click(ClickAnswer(applied=True, approval=REQUEST)) == ClickReply()
    assert answer_click(ClickAnswer(applied=False, refusal="no")) == ClickReply(private="no")
    ended = {**REQUEST, "status": "expired"}
    assert answer_click(ClickAnswer(applied=False, approval=ended)) == ClickReply(ended=ended)


def test_the_platform_answers_to_a_click() -> None:
    assert discord_buttons.response(ClickReply(private="no")) == {
        "type": 4,
        "data": {"content": "no", "flags": 64},
    }
    assert discord_buttons.response(ClickReply()) == {"type": 6}
    ended = discord_buttons.response(ClickReply(ended={**REQUEST, "status": "expired"}))
    assert ended["type"] == 7 and ended["data"]["components"] == []
    assert ended["data"]["content"].startswith("**Expired: no one decided in time** (bash)")


def test_slack_text_escapes_its_control_characters() -> None:
    shown = slack_buttons.pending_text({**REQUEST, "presentation": {"commandText": "a && b > <c>"}})
    assert "a &amp;&amp; b &gt; &lt;c&gt;" in shown
    actions = slack_buttons.pending_blocks(REQUEST)[1]
    assert [e["action_id"] for e in actions["elements"]] == [
        f"approval:allow-once:{REQUEST['id']}",
        f"approval:deny:{REQUEST['id']}",
    ]
