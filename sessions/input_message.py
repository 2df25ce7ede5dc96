"""An accepted input as the message the agent receives.

`InputMessage` is a user message that knows which inputs of the ledger it carries: one for a
message sent on its own, several when the `collect` queue mode merged messages that arrived
within its quiet window. The agent passes it through its queues unchanged, so when it comes back
(committed as a transcript entry, or left over in a queue) the session knows which inputs it
belongs to.

Its JSON form is a pi user message plus `idempotencyKey` (the first input's key) and, for a
merged message, `mergedKeys` (every input's key): the transcript and `message.completed` events
carry them, so a client can tell which committed message is its input.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_core import AgentMessage, TextContent, UserMessage, text_of

__all__ = ["InputMessage", "as_input", "input_keys_of", "merge_inputs"]


class InputMessage(UserMessage, kw_only=True):
    idempotency_key: str
    """The key of the input (the first one of a merged message)."""
    merged_keys: list[str] | None = None
    """Every merged input's key, in arrival order; None for a message of one input."""

    @property
    def input_keys(self) -> list[str]:
        """The keys of the inputs this message carries."""
        return list(self.merged_keys) if self.merged_keys else [self.idempotency_key]


def as_input(message: str | AgentMessage, idempotency_key: str) -> InputMessage:
    """The message of the input `idempotency_key`: a text, a user message (its content and
    timestamp kept) or the text of another message."""
    if isinstance(message, str):
        return InputMessage(content=[TextContent(text=message)], idempotency_key=idempotency_key)
    if isinstance(message, UserMessage):
        return InputMessage(
            content=message.content, timestamp=message.timestamp, idempotency_key=idempotency_key
        )
    return InputMessage(content=[TextContent(text=text_of(message))], idempotency_key=idempotency_key)


def merge_inputs(messages: Sequence[InputMessage]) -> InputMessage:
    """Collected messages as one message (texts joined by a blank line) that carries every
    input's key."""
    if len(messages) == 1:
        return messages[0]
    keys = [key for message in messages for key in message.input_keys]
    text = "\n\n".join(text_of(message) for message in messages)
    return InputMessage(content=[TextContent(text=text)], idempotency_key=keys[0], merged_keys=keys)


def input_keys_of(message: AgentMessage) -> list[str]:
    """The keys of the inputs a message carries (none for any other message)."""
    return message.input_keys if isinstance(message, InputMessage) else []
