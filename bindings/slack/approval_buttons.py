"""Slack approval messages: Block Kit buttons in, `block_actions` payloads out.

The message is a `section` block (the request) and an `actions` block with two buttons
(Approve, style `primary`; Deny, style `danger`) whose `action_id` names the decision and the
request. A click arrives as a `block_actions` payload: in Socket Mode inside an `interactive`
envelope (acknowledged at once: Slack waits three seconds), with the Events API as a signed
`payload=` form posted to the interactivity URL (`bindings.slack.interactivity`). The answer:

- not an approver, or a request not posted here: `chat.postEphemeral`, a line only the clicker
  sees, in the message's conversation (and thread);
- the request had already ended: `chat.update` shows how, without buttons;
- the click decided it: the host edits the message (as for a decision from any other surface).
"""

from __future__ import annotations

from typing import Any

from bindings.approvals import BUTTONS, ApprovalMessage, ClickReply, action_id, ending_line, request_lines
from bindings.slack.web import SlackWeb

BLOCK_ACTIONS = "block_actions"
ACTIONS_BLOCK_ID = "approval"
_STYLES = {"allow-once": "primary", "deny": "danger"}


def _escape(text: str) -> str:
    """Slack's mrkdwn control characters (`&`, `<`, `>`) as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def pending_text(approval: dict[str, Any]) -> str:
    headline, command, why = request_lines(approval)
    return f"*{_escape(headline)}*\n```{_escape(command)}```\n{_escape(why)}"


def ended_text(approval: dict[str, Any]) -> str:
    headline, command, _ = request_lines(approval)
    tool = headline.removeprefix("Approval needed: ")
    return f"*{_escape(ending_line(approval))}* ({_escape(tool)})\n```{_escape(command)}```"


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def pending_blocks(approval: dict[str, Any]) -> list[dict[str, Any]]:
    buttons = [
        {
            "type": "button",
            "text": {"type": "plain_text", "text": label},
            "style": _STYLES[decision],
            "action_id": action_id(decision, approval["id"]),
            "value": str(approval["id"]),
        }
        for decision, label in BUTTONS
    ]
    return [
        _section(pending_text(approval)),
        {"type": "actions", "block_id": ACTIONS_BLOCK_ID, "elements": buttons},
    ]


async def post(
    web: SlackWeb, channel: str, approval: dict[str, Any], *, key: str, thread_ts: str | None
) -> ApprovalMessage:
    """Post the message with buttons (`key` in its metadata: a post whose answer was lost is
    found instead of made twice)."""
    text = pending_text(approval)
    ts = await web.post_message(channel, text, key=key, thread_ts=thread_ts, blocks=pending_blocks(approval))
    return ApprovalMessage(channel_id=channel, message_id=ts, thread_id=thread_ts)


async def show(web: SlackWeb, message: ApprovalMessage, approval: dict[str, Any]) -> None:
    """Edit the message to show how the request ended, without buttons."""
    text = ended_text(approval)
    await web.update_message(message.channel_id, message.message_id, text, blocks=[_section(text)])


def clicks_of(payload: dict[str, Any]) -> tuple[str, list[str], ApprovalMessage] | None:
    """`(user id, action ids, the message clicked)` of a `block_actions` payload on a message;
    None for any other payload."""
    if payload.get("type") != BLOCK_ACTIONS:
        return None
    user = (payload.get("user") or {}).get("id")
    container = payload.get("container") or {}
    message = payload.get("message") or {}
    channel = container.get("channel_id") or (payload.get("channel") or {}).get("id")
    ts = container.get("message_ts") or message.get("ts")
    if not user or not channel or not ts:
        return None
    actions = [
        str(a["action_id"])
        for a in payload.get("actions") or []
        if isinstance(a, dict) and a.get("action_id")
    ]
    clicked = ApprovalMessage(channel_id=str(channel), message_id=str(ts), thread_id=message.get("thread_ts"))
    return str(user), actions, clicked


async def answer(web: SlackWeb, user: str, clicked: ApprovalMessage, reply: ClickReply) -> None:
    """Carry out a click's reply (see the module docstring)."""
    if reply.private is not None:
        await web.post_ephemeral(clicked.channel_id, user, reply.private, thread_ts=clicked.thread_id)
    elif reply.ended is not None:
        await show(web, clicked, reply.ended)
