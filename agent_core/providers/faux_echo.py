"""The built-in ``faux`` models: ``faux/echo``, an offline model for the daemon, demos and
benchmarks.

Models of API ``faux`` (provider ``faux``), usable with no script (the daemon,
demos and benchmarks use them):

``faux/echo`` answers the last user message by streaming ``echo: <its text>``, one word per
`text_delta` (each word keeps its trailing whitespace). The pace is ``model.compat["paceMs"]``
when set, else the ``GATEWAY_FAUX_PACE_MS`` environment variable, else 10 ms per word; 0 means
no sleeping, only a cooperative yield. The abort signal is honoured between deltas. When the last
message is a tool result, it answers ``echo: <the tool result's text>``. A directive at the start
of the last user message scripts the reply instead:

- ``!tool NAME {json args}``: a `toolUse` message calling NAME with those arguments (``{}`` when
  omitted); after the tool result comes back the reply is ``echo: <tool result text>``.
- ``!think TEXT``: a thinking block TEXT, then the text ``echo: TEXT``.
- ``!long N``: streams the N words ``w1 w2 ... wN``.
- ``!error MESSAGE``: an `error` response whose error_message is MESSAGE.
- ``!sleep MS [TEXT]``: waits MS milliseconds after `start` (abort-aware), then echoes TEXT (or the
  whole message when no TEXT follows).

Unknown directives are echoed like any other text.

A reply longer than the request's ``max_tokens`` (when the request sets one; tokens estimated
as pi's faux estimates them, four characters each) stops there, at a word's end, with stop
reason ``length``, as a real model's does. A compaction asks for its summary with a limit, so
with a model whose window is small the echo model lets compaction run in a long soak.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Sequence

import msgspec

from agent_core.event_stream import AssistantMessageEventStream
from agent_core.llm import Context, Model, StreamOptions
from agent_core.messages import (
    AssistantMessage,
    Message,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolResultMessage,
    UserMessage,
    text_of,
)
from agent_core.providers._common import stream_from
from agent_core.providers._faux_stream import FauxBlock, Pacing, Streamer, fail_stream, with_usage_estimate
from agent_core.providers.faux import error_message, faux_tool_call

ECHO_MODEL_ID = "echo"
PACE_ENV = "GATEWAY_FAUX_PACE_MS"
DEFAULT_PACE_MS = 10.0

_DIRECTIVE = re.compile(r"!(?P<name>[a-z]+)(?:[ \t]+(?P<rest>.*))?\Z", re.DOTALL)
_WORD = re.compile(r"\S+\s*")


def split_words(text: str) -> list[str]:
    """One chunk per word, each with its trailing whitespace (leading whitespace goes first)."""
    words = _WORD.findall(text)
    if not words:
        return [text]
    lead = len(text) - len(text.lstrip())
    if lead:
        words[0] = text[:lead] + words[0]
    return words


def pace_ms(model: Model) -> float:
    """Milliseconds per word: ``compat["paceMs"]``, else ``GATEWAY_FAUX_PACE_MS``, else 10."""
    configured = (model.compat or {}).get("paceMs")
    if isinstance(configured, int | float) and configured >= 0:
        return float(configured)
    raw = os.environ.get(PACE_ENV)
    if raw:
        try:
            value = float(raw)
        except ValueError:
            value = -1
        if value >= 0:
            return value
    return DEFAULT_PACE_MS


class EchoPlan(msgspec.Struct, kw_only=True, dict=True):
    """What the echo model will answer: blocks, stop reason, and an initial wait."""

    content: list[FauxBlock]
    stop_reason: StopReason = "stop"
    error_message: str | None = None
    sleep_ms: float = 0.0


def _echo(text: str) -> EchoPlan:
    return EchoPlan(content=[TextContent(text=f"echo: {text}")])


def _last_user_text(messages: Sequence[Message]) -> str:
    for message in reversed(messages):
        if isinstance(message, UserMessage):
            return text_of(message)
    return ""


def plan_echo(context: Context) -> EchoPlan:
    """Decide the echo model's reply to `context` (directives in the module docstring)."""
    messages = context.messages
    if messages and isinstance(messages[-1], ToolResultMessage):
        return _echo("".join(b.text for b in messages[-1].content if isinstance(b, TextContent)))
    text = _last_user_text(messages)
    match = _DIRECTIVE.match(text.strip())
    if match is None:
        return _echo(text)
    name, rest = match.group("name"), (match.group("rest") or "").strip()
    if name == "tool":
        return _plan_tool(rest)
    if name == "think":
        return EchoPlan(content=[ThinkingContent(thinking=rest), TextContent(text=f"echo: {rest}")])
    if name == "long":
        if not rest.isdigit():
            return EchoPlan(content=[], stop_reason="error", error_message="!long expects a number of words")
        return EchoPlan(content=[TextContent(text=" ".join(f"w{i}" for i in range(1, int(rest) + 1)))])
    if name == "error":
        return EchoPlan(content=[], stop_reason="error", error_message=rest or "faux error")
    if name == "sleep":
        amount, _, remainder = rest.partition(" ")
        try:
            delay = float(amount)
        except ValueError:
            return EchoPlan(content=[], stop_reason="error", error_message="!sleep expects milliseconds")
        plan = _echo(remainder.strip() or text)
        plan.sleep_ms = max(0.0, delay)
        return plan
    return _echo(text)


def capped(plan: EchoPlan, max_tokens: int | None) -> EchoPlan:
    """`plan` with its text cut after `max_tokens` estimated tokens (stop reason ``length``)."""
    if max_tokens is None or plan.stop_reason != "stop":
        return plan
    left = max_tokens * 4  # characters (`estimate_tokens`)
    content: list[FauxBlock] = []
    for block in plan.content:
        text = (
            block.text
            if isinstance(block, TextContent)
            else block.thinking
            if isinstance(block, ThinkingContent)
            else None
        )
        if text is None or len(text) <= left:
            content.append(block)
            left -= len(text or "")
            continue
        kept = "".join(_within(split_words(text), left))
        if kept:
            content.append(
                TextContent(text=kept) if isinstance(block, TextContent) else ThinkingContent(thinking=kept)
            )
        return EchoPlan(content=content, stop_reason="length", sleep_ms=plan.sleep_ms)
    return plan


def _within(words: list[str], limit: int) -> list[str]:
    """The leading words whose lengths add up to at most `limit` characters."""
    out: list[str] = []
    for word in words:
        if len(word) > limit:
            break
        out.append(word)
        limit -= len(word)
    return out


def _plan_tool(rest: str) -> EchoPlan:
    name, _, raw_args = rest.partition(" ")
    if not name:
        return EchoPlan(content=[], stop_reason="error", error_message="!tool expects a tool name")
    try:
        arguments = json.loads(raw_args) if raw_args.strip() else {}
    except ValueError as exc:
        return EchoPlan(content=[], stop_reason="error", error_message=f"!tool arguments are not JSON: {exc}")
    if not isinstance(arguments, dict):
        return EchoPlan(
            content=[], stop_reason="error", error_message="!tool arguments must be a JSON object"
        )
    return EchoPlan(content=[faux_tool_call(name, arguments)], stop_reason="toolUse")


def _whole(text: str) -> list[str]:
    return [text]


def stream_faux(
    model: Model, context: Context, options: StreamOptions | None = None
) -> AssistantMessageEventStream:
    """Stream function of the built-in ``faux`` API (``faux/echo``); never raises."""
    return stream_from(_produce_builtin, model, context, options)


async def _produce_builtin(
    model: Model, context: Context, options: StreamOptions, stream: AssistantMessageEventStream
) -> None:
    behaviour = (model.compat or {}).get("fauxBehavior", model.id)
    if behaviour != ECHO_MODEL_ID:
        await asyncio.sleep(0)
        message = error_message(
            f"Unknown faux model: {model.id} (scripted faux models come from register_faux_provider)",
            model.api,
            model.provider,
            model.id,
        )
        fail_stream(stream, message, options.on_event)
        return
    plan = capped(plan_echo(context), options.max_tokens)
    message = AssistantMessage(
        content=plan.content,
        api=model.api,
        provider=model.provider,
        model=model.id,
        stop_reason=plan.stop_reason,
        error_message=plan.error_message,
    )
    message = with_usage_estimate(message, context, options)
    per_word_s = pace_ms(model) / 1000
    pacing = Pacing(
        split=split_words,
        delay_s=lambda _chunk: per_word_s,
        split_arguments=_whole,
        initial_delay_s=plan.sleep_ms / 1000,
    )
    await Streamer(stream, message, options).run(pacing)


__all__ = [
    "DEFAULT_PACE_MS",
    "ECHO_MODEL_ID",
    "PACE_ENV",
    "EchoPlan",
    "pace_ms",
    "plan_echo",
    "split_words",
    "stream_faux",
]
