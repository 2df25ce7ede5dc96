"""Discord approval messages: message components (buttons) in, interactions out.

The message is posted with an action row of two buttons (type 2: Approve, style 3 "success";
Deny, style 4 "danger") whose `custom_id` names the decision and the request. A click arrives as
a `MESSAGE_COMPONENT` interaction (type 3): over the Gateway as an `INTERACTION_CREATE` dispatch,
answered with `POST /interactions/{id}/{token}/callback`, or on the signed Interactions endpoint,
answered in the HTTP response. The answer is one of

- `CHANNEL_MESSAGE_WITH_SOURCE` (4) with the `EPHEMERAL` flag (64): a line only the clicker sees
  (not an approver, a request not posted here);
- `UPDATE_MESSAGE` (7): the request had already ended; the message shows how, without buttons;
- `DEFERRED_UPDATE_MESSAGE` (6): the click decided the request; the host edits the message
  (as it does for a decision from any other surface).
"""

from __future__ import annotations

from typing import Any

from bindings.approvals import BUTTONS, ApprovalMessage, ClickReply, action_id, ending_line, request_lines
from bindings.discord.interactions import CHANNEL_MESSAGE_WITH_SOURCE, EPHEMERAL
from bindings.discord.rest import DiscordRest

MESSAGE_COMPONENT = 3
DEFERRED_UPDATE_MESSAGE = 6
UPDATE_MESSAGE = 7
ACTION_ROW = 1
BUTTON = 2
_STYLES = {"allow-once": 3, "deny": 4}


def pending_content(approval: dict[str, Any]) -> str:
    headline, command, why = request_lines(approval)
    return f"**{headline}**\n```\n{command}\n```\n{why}"


def ended_content(approval: dict[str, Any]) -> str:
    headline, command, _ = request_lines(approval)
    tool = headline.removeprefix("Approval needed: ")
    return f"**{ending_line(approval)}** ({tool})\n```\n{command}\n```"


def components(approval: dict[str, Any]) -> list[dict[str, Any]]:
    buttons = [
        {
            "type": BUTTON,
            "style": _STYLES[decision],
            "label": label,
            "custom_id": action_id(decision, approval["id"]),
        }
        for decision, label in BUTTONS
    ]
    return [{"type": ACTION_ROW, "components": buttons}]


async def post(
    rest: DiscordRest, channel_id: str, approval: dict[str, Any], *, nonce: str
) -> ApprovalMessage:
    """Post the message with buttons; the enforced `nonce` makes a second post return the first."""
    sent = await rest.create_message(
        channel_id, pending_content(approval), nonce=nonce, components=components(approval)
    )
    return ApprovalMessage(channel_id=channel_id, message_id=str(sent["id"]))


async def show(rest: DiscordRest, message: ApprovalMessage, approval: dict[str, Any]) -> None:
    """Edit the message to show how the request ended, without buttons."""
    await rest.edit_message(message.channel_id, message.message_id, ended_content(approval), components=[])


def click_of(interaction: dict[str, Any]) -> tuple[str, str] | None:
    """`(user id, custom_id)` of a button click; None for any other interaction."""
    if int(interaction.get("type", 0)) != MESSAGE_COMPONENT:
        return None
    data = interaction.get("data") or {}
    user = (interaction.get("member") or {}).get("user") or interaction.get("user") or {}
    if not user.get("id") or not data.get("custom_id"):
        return None
    return str(user["id"]), str(data["custom_id"])


def response(reply: ClickReply) -> dict[str, Any]:
    """The interaction response for a click's reply."""
    if reply.private is not None:
        return {"type": CHANNEL_MESSAGE_WITH_SOURCE, "data": {"content": reply.private, "flags": EPHEMERAL}}
    if reply.ended is not None:
        return {"type": UPDATE_MESSAGE, "data": {"content": ended_content(reply.ended), "components": []}}
    return {"type": DEFERRED_UPDATE_MESSAGE}
