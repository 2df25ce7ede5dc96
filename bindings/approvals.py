"""Approvals decided from a chat: what the Discord and Slack approval buttons share.

When a tool call of a session that came from a chat waits for a person, the host asks the
binding the session came from to post a message with **Approve** and **Deny** buttons into that
conversation (`ChatBinding.post_approval`), and to edit it once the request has ended, however it
ended (`ChatBinding.show_approval`). A request reaches the binding as the gateway's approval
snapshot (the `exec.approval.*` payload: `id`, `tool`, `command`, `risk`, `rule`, `status`,
`decision`, `decidedBy`, `surface`, `note`, ...), so there is one model of a request.

A click names the decision and the request in the button's id (`approval:<decision>:<id>`). Only
the account's `approvers` (platform user ids) may decide; anyone else gets a private refusal.
An approver's click goes to the host's `ApprovalDecider`, which records the clicker as the
reviewer with the platform as the surface.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

ButtonDecision: TypeAlias = Literal["allow-once", "deny"]
BUTTONS: tuple[tuple[ButtonDecision, str], ...] = (("allow-once", "Approve"), ("deny", "Deny"))
"""The buttons of an approval message, in order: decision and label."""

ACTION_PREFIX = "approval:"
COMMAND_CHARS = 1500
"""Longest command shown in a message (both platforms' limits leave room for the rest)."""

NOT_AN_APPROVER = "You are not on this bot's approvers list, so you cannot decide this request."
NOT_POSTED_HERE = "This request was not posted here; decide it where it was posted."
UNKNOWN_REQUEST = "This request is no longer known."


@dataclass(frozen=True, kw_only=True)
class ApprovalMessage:
    """Where an approval message was posted: the channel (Discord: the thread, if any), the
    Slack thread, and the platform's message id (Discord snowflake, Slack `ts`)."""

    channel_id: str
    message_id: str
    thread_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class ClickAnswer:
    """What the host made of an approver's click. `applied`: this click decided the request.
    `approval`: the request's snapshot after the click (None when unknown). `refusal`: a private
    line for the clicker when the click was not taken (not posted here, unknown request)."""

    applied: bool
    approval: dict[str, Any] | None = None
    refusal: str | None = None


@dataclass(frozen=True, kw_only=True)
class ClickReply:
    """How a binding answers a click: `private` goes to the clicker alone; `ended` is the
    snapshot of a request that had already ended (the message is edited to show it at once);
    neither: the click decided the request and the host edits the message."""

    private: str | None = None
    ended: dict[str, Any] | None = field(default=None)


class ApprovalDecider(Protocol):
    async def decide_approval(
        self, binding_id: str, approval_id: str, decision: ButtonDecision, *, sender_id: str
    ) -> ClickAnswer:
        """Decide request `approval_id` as `sender_id` of `binding_id` (the caller checked that
        the sender is an approver). Must answer within a second or two: platforms wait for the
        click's answer only a few seconds."""
        ...


def action_id(decision: ButtonDecision, approval_id: str) -> str:
    """The id a button carries (at most 100 characters for Discord's `custom_id`)."""
    return f"{ACTION_PREFIX}{decision}:{approval_id}"


def parse_action_id(value: str) -> tuple[ButtonDecision, str] | None:
    """`(decision, approval id)` of a button id, or None when it is not an approval button."""
    if not value.startswith(ACTION_PREFIX):
        return None
    decision, _, approval_id = value[len(ACTION_PREFIX) :].partition(":")
    if decision not in ("allow-once", "deny") or not approval_id:
        return None
    return ("allow-once" if decision == "allow-once" else "deny"), approval_id


def _command(snapshot: dict[str, Any]) -> str:
    text = str((snapshot.get("presentation") or {}).get("commandText") or snapshot.get("command") or "")
    if len(text) > COMMAND_CHARS:
        text = text[: COMMAND_CHARS - 1] + "…"
    return text.replace("```", "`\u200b``")


def request_lines(snapshot: dict[str, Any]) -> tuple[str, str, str]:
    """`(headline, command, why)` of a request, as both platforms show it."""
    headline = f"Approval needed: {snapshot.get('tool') or 'tool'}"
    why = f"Risk {snapshot.get('risk') or 'none'}; asked because {snapshot.get('rule') or 'the policy asks'}."
    return headline, _command(snapshot), why


def ending_line(snapshot: dict[str, Any]) -> str:
    """One line saying how a request ended: who decided, from where, and the note."""
    status = str(snapshot.get("status") or "pending")
    who, surface, note = snapshot.get("decidedBy"), snapshot.get("surface"), snapshot.get("note")
    by = f" by {who}" if who else ""
    via = f" via {surface}" if surface else ""
    if status == "allowed":
        scope = " for this session" if snapshot.get("decision") == "allow-always" else ""
        line = f"Approved{scope}{by}{via}"
    elif status == "denied":
        line = f"Denied{by}{via}"
    elif status == "expired":
        line = "Expired" if note else "Expired: no one decided in time"
    elif status == "cancelled":
        line = "Cancelled"
    else:
        return "Waiting for a decision"
    return f"{line}: {note}" if note else line


def answer_click(answer: ClickAnswer) -> ClickReply:
    """The reply to an approver's click, given the host's answer."""
    if answer.refusal is not None:
        return ClickReply(private=answer.refusal)
    if not answer.applied and answer.approval is not None:
        return ClickReply(ended=answer.approval)
    return ClickReply()
