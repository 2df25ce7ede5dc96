"""What every method's params model shares: the two base models and the field types.

`CompatParams` is the base of the OpenClaw-compatible models (unknown fields kept), `NativeParams`
that of the gateway's own (unknown fields refused); both are strict and camelCase on the wire
(`gateway.protocol.params` says why). The handshake's models (`gateway.protocol.connect_params`)
and every method's (`gateway.protocol.params`, `approval_params`, `cron_params`) build on them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints
from pydantic.alias_generators import to_camel

MAX_SESSION_REF = 512
"""Longest session key or session id a method accepts."""


def _no_control_characters(value: str) -> str:
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in value):
        raise ValueError("must NOT contain control characters")
    return value


NonEmptyStr = Annotated[str, StringConstraints(min_length=1)]
SessionKey = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_SESSION_REF), AfterValidator(_no_control_characters)
]
"""A session key, wherever a method takes one: 1-512 characters, no control characters."""
SessionId = SessionKey
"""A session id (the same rule as a key: ids are stored and logged alongside keys)."""
Label = Annotated[str, StringConstraints(min_length=1, max_length=512)]
QueueMode = Literal["steer", "followup", "collect", "interrupt"]
ThinkingLevel = Literal["off", "minimal", "low", "medium", "high", "xhigh"]


class CompatParams(BaseModel):
    """Base of the OpenClaw-compatible params: strict types, unknown fields kept."""

    # Each model's validator is built when its method is first called, not at import: most
    # connections use a handful of the forty models.
    model_config = ConfigDict(
        alias_generator=to_camel, extra="allow", strict=True, frozen=True, defer_build=True
    )


class NativeParams(BaseModel):
    """Base of the gateway's own params: strict types, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel, extra="forbid", strict=True, frozen=True, defer_build=True
    )
