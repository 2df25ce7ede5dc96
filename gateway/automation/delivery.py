"""Where a job's or a webhook's reply goes: a Discord or Slack conversation, through the outbox.

OpenClaw's wire shape: `{"mode": "announce", "channel": "discord", "to": "123456", "accountId":
"main", "threadId": "..."}` (`to` may also be written `channel:123456`); `{"mode": "none"}` or no
delivery means the reply stays in the session.

A delivery does not post anything itself. The run it asks for records, in its input's `source`,
the binding and the reply route (`bindings.ReplyRoute`) the reply must take; the gateway's reply
relay (`gateway.channel_replies.ReplyFeed`) finds that record when the run starts, as it does for
a run resumed after a restart, and streams the reply into the conversation through the binding's
outbox: one message edited while the reply streams, split at the platform's limit, never posted
twice. Whether it arrived is read back from the outbox rows of the run (`delivery_status`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec

from gateway.automation.errors import InvalidJob

if TYPE_CHECKING:
    from bindings import ReplyRoute

__all__ = ["DELIVERY_STATUSES", "Delivery", "DeliveryStatus", "delivery_status", "parse_delivery"]

Platform = Literal["discord", "slack"]
DeliveryStatus = Literal["delivered", "not-delivered", "unknown", "not-requested"]
DELIVERY_STATUSES: Final[tuple[DeliveryStatus, ...]] = (
    "delivered",
    "not-delivered",
    "unknown",
    "not-requested",
)
_PLATFORMS: Final = ("discord", "slack")
_FIELDS: Final = ("mode", "channel", "to", "accountId", "threadId", "bestEffort")


class Delivery(msgspec.Struct, frozen=True):
    """A conversation to post a reply in. `account_id` None: the only account of that platform."""

    channel: Platform
    to: str
    account_id: str | None = None
    thread_id: str | None = None

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": "announce", "channel": self.channel, "to": self.to}
        if self.account_id is not None:
            out["accountId"] = self.account_id
        if self.thread_id is not None:
            out["threadId"] = self.thread_id
        return out

    def resolve(self, bindings: Iterable[tuple[str, str]]) -> tuple[str, ReplyRoute]:
        """The binding id and reply route among the running `(platform, account)` bindings.
        Raises LookupError with a one-line reason when no binding fits."""
        accounts = [account for platform, account in bindings if platform == self.channel]
        if self.account_id is not None:
            if self.account_id not in accounts:
                raise LookupError(f"no {self.channel} binding with account {self.account_id!r} is running")
            account = self.account_id
        elif len(accounts) == 1:
            account = accounts[0]
        elif not accounts:
            raise LookupError(f"no {self.channel} binding is running")
        else:
            raise LookupError(
                f"several {self.channel} accounts are running ({', '.join(sorted(accounts))}); "
                "name one as accountId"
            )
        from bindings.host import ReplyRoute  # only once a binding runs: it is loaded then

        route = ReplyRoute(
            platform=self.channel, account_id=account, channel_id=self.to, thread_id=self.thread_id
        )
        return f"{self.channel}:{account}", route


def parse_delivery(data: Any, *, where: str = "delivery") -> Delivery | None:
    """The delivery a wire object describes; None for no delivery. Raises InvalidJob."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise InvalidJob(f"{where}: must be an object")
    extra = sorted(set(data) - set(_FIELDS))
    if extra:
        raise InvalidJob(f"{where}.{extra[0]}: not supported by this gateway")
    mode = data.get("mode", "announce")
    if mode == "none":
        return None
    if mode != "announce":
        raise InvalidJob(f"{where}.mode: {mode!r} is not supported by this gateway (announce or none)")
    channel = data.get("channel")
    if channel not in _PLATFORMS:
        raise InvalidJob(f"{where}.channel: must be one of {', '.join(_PLATFORMS)}")
    to = data.get("to")
    if not isinstance(to, str) or not to.strip():
        raise InvalidJob(f'{where}.to: must name the channel to post in, e.g. "channel:123456"')
    target = to.strip()
    kind, sep, rest = target.partition(":")
    if sep:
        if kind != "channel" or not rest:
            raise InvalidJob(f'{where}.to: only channels can be named ("channel:<id>" or "<id>")')
        target = rest
    account = data.get("accountId")
    if account is not None and (not isinstance(account, str) or not account):
        raise InvalidJob(f"{where}.accountId: must be a non-empty string")
    thread = data.get("threadId")
    if thread is not None and (isinstance(thread, bool) or not isinstance(thread, str | int | float)):
        raise InvalidJob(f"{where}.threadId: must be a string or a number")
    return Delivery(
        channel=channel,
        to=target,
        account_id=account,
        thread_id=None if thread is None else _thread_text(thread),
    )


def delivery_status(requested: bool, error: str | None, outbox_states: Iterable[str]) -> DeliveryStatus:
    """How a run's delivery went, from what its outbox rows say: `delivered` once every chunk of
    the reply reached its final text, `not-delivered` when none could be sent (no binding) or a
    chunk was refused, `unknown` while the reply is still on its way."""
    if not requested:
        return "not-requested"
    if error is not None:
        return "not-delivered"
    states = list(outbox_states)
    if "failed" in states:
        return "not-delivered"
    if states and all(state == "final" for state in states):
        return "delivered"
    return "unknown"


def _thread_text(value: str | float) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
