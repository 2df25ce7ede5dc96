"""The faux provider: assistant messages streamed like a real model's, without a network.

Two ways to use it.

**Scripted** (pi's ``registerFauxProvider``): ``faux = register_faux_provider()`` registers a new
API (``faux:<ms>:<random>`` unless `api` is given; provider ``faux``) with one model ``faux-1``
by default. Queue steps with `set_responses` / `append_responses`; a step is an
`AssistantMessage` (build one with `faux_assistant_message`, `faux_text`, `faux_thinking`,
`faux_tool_call`) or a callable ``(context, options, state, model) -> AssistantMessage`` (may be
async). Each call takes the next step and streams it: `start`, then per block its start event,
deltas of ``token_size * 4`` characters (``token_size`` drawn from ``[min, max]`` per chunk, so
fixed when min == max), and its end event; tool-call arguments stream as their JSON text while
the partial keeps ``arguments == {}`` until `toolcall_end`. Between chunks it yields to the loop
(or sleeps ``tokens / tokens_per_second``). The abort signal is checked per chunk (`error`
"Request was aborted"); an empty queue gives `error` "No more faux responses queued". Usage is
estimated as ``ceil(chars / 4)`` of the serialised context and of the output (with a
`session_id`, cache reads and writes are simulated from the common prompt prefix); cost is 0.

**Built-in models** of API ``faux`` (provider ``faux``), usable with no script (the daemon,
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
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import random
import re
import string
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from agent_core.event_stream import AssistantMessageEventStream
from agent_core.llm import Context, Model, ModelCost, StreamOptions
from agent_core.messages import (
    AssistantMessage,
    Message,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    now_ms,
    text_of,
)
from agent_core.providers._common import error_message_of, run_producer
from agent_core.providers._faux_stream import (
    FauxBlock,
    Pacing,
    Streamer,
    estimate_tokens,
    fail_stream,
    serialize_context,
    with_usage_estimate,
)
from agent_core.providers._registry import register_api_provider, unregister_api_provider

FAUX_API = "faux"
FAUX_PROVIDER = "faux"
DEFAULT_MODEL_ID = "faux-1"
ECHO_MODEL_ID = "echo"
DEFAULT_BASE_URL = "http://localhost:0"
PACE_ENV = "GATEWAY_FAUX_PACE_MS"
DEFAULT_PACE_MS = 10.0


# --- building scripted messages ----------------------------------------------------------------


def faux_text(text: str) -> TextContent:
    return TextContent(text=text)


def faux_thinking(thinking: str) -> ThinkingContent:
    return ThinkingContent(thinking=thinking)


def _random_id(prefix: str) -> str:
    suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=10))
    return f"{prefix}:{now_ms()}:{suffix}"


def faux_tool_call(name: str, arguments: Mapping[str, Any], id: str | None = None) -> ToolCall:
    """A tool call block; the id defaults to ``tool:<ms>:<random>`` as pi's."""
    return ToolCall(id=id if id is not None else _random_id("tool"), name=name, arguments=dict(arguments))


def faux_assistant_message(
    content: str | FauxBlock | Sequence[FauxBlock],
    *,
    stop_reason: StopReason = "stop",
    error_message: str | None = None,
    response_id: str | None = None,
    timestamp: int | None = None,
) -> AssistantMessage:
    """A scripted reply; a string becomes one text block."""
    if isinstance(content, str):
        blocks: list[FauxBlock] = [faux_text(content)]
    elif isinstance(content, TextContent | ThinkingContent | ToolCall):
        blocks = [content]
    else:
        blocks = list(content)
    return AssistantMessage(
        content=blocks,
        api=FAUX_API,
        provider=FAUX_PROVIDER,
        model=DEFAULT_MODEL_ID,
        stop_reason=stop_reason,
        error_message=error_message,
        response_id=response_id,
        timestamp=timestamp if timestamp is not None else now_ms(),
    )


# --- scripted registrations --------------------------------------------------------------------


@dataclass
class FauxState:
    call_count: int = 0


FauxResponseFactory: TypeAlias = Callable[
    [Context, StreamOptions, FauxState, Model], AssistantMessage | Awaitable[AssistantMessage]
]
FauxStep: TypeAlias = AssistantMessage | FauxResponseFactory


def _error_message(text: str, api: str, provider: str, model_id: str) -> AssistantMessage:
    return AssistantMessage(
        content=[], api=api, provider=provider, model=model_id, stop_reason="error", error_message=text
    )


@dataclass(eq=False)
class FauxProvider:
    """One scripted faux registration; see the module docstring. Call `unregister()` when done."""

    api: str
    provider: str
    models: list[Model]
    tokens_per_second: float | None = None
    token_size: tuple[int, int] = (3, 5)
    state: FauxState = field(default_factory=FauxState)
    # The queue of scripted steps and, per session id, the last prompt (for the cache estimate);
    # both live as long as the registration.
    _pending: list[FauxStep] = field(default_factory=list, init=False, repr=False)
    _prompt_cache: dict[str, str] = field(default_factory=dict, init=False, repr=False)

    @property
    def model(self) -> Model:
        """The first (default) model."""
        return self.models[0]

    @property
    def call_count(self) -> int:
        return self.state.call_count

    @property
    def pending_response_count(self) -> int:
        return len(self._pending)

    def get_model(self, model_id: str | None = None) -> Model | None:
        """The first model, or the one with `model_id` (None when unknown)."""
        if model_id is None:
            return self.models[0]
        return next((m for m in self.models if m.id == model_id), None)

    def set_responses(self, steps: Sequence[FauxStep]) -> None:
        self._pending = list(steps)

    def append_responses(self, steps: Sequence[FauxStep]) -> None:
        self._pending.extend(steps)

    def unregister(self) -> None:
        """Remove this API (a registration over the built-in ``faux`` API gives it back)."""
        unregister_api_provider(self.api)
        if self.api == FAUX_API:
            register_api_provider(FAUX_API, stream_faux, stream_faux)

    def split(self, text: str) -> list[str]:
        """pi's chunking: ``token_size * 4`` characters per chunk, token_size drawn per chunk."""
        low, high = self.token_size
        chunks: list[str] = []
        index = 0
        while index < len(text):
            size = max(1, random.randint(low, high) * 4)
            chunks.append(text[index : index + size])
            index += size
        return chunks or [""]

    def _delay(self, chunk: str) -> float:
        if not self.tokens_per_second or self.tokens_per_second <= 0:
            return 0.0
        return estimate_tokens(chunk) / self.tokens_per_second

    def stream(
        self, model: Model, context: Context, options: StreamOptions | None = None
    ) -> AssistantMessageEventStream:
        """The stream function registered for `api` (both plain and simple)."""
        opts = options if options is not None else StreamOptions()
        step = self._pending.pop(0) if self._pending else None
        self.state.call_count += 1
        stream = AssistantMessageEventStream()
        return run_producer(stream, model, lambda: self._produce(step, model, context, opts, stream))

    async def _produce(
        self,
        step: FauxStep | None,
        model: Model,
        context: Context,
        options: StreamOptions,
        stream: AssistantMessageEventStream,
    ) -> None:
        await asyncio.sleep(0)  # like pi's queueMicrotask: the caller gets the stream first
        if step is None:
            message = _error_message("No more faux responses queued", self.api, self.provider, model.id)
            fail_stream(
                stream, with_usage_estimate(message, context, options, self._prompt_cache), options.on_event
            )
            return
        try:
            resolved = step(context, options, self.state, model) if callable(step) else step
            if inspect.isawaitable(resolved):
                resolved = await resolved
            if not isinstance(resolved, AssistantMessage):
                raise TypeError(f"faux step returned {type(resolved).__name__}, not an AssistantMessage")
            message = resolved.model_copy(
                deep=True, update={"api": self.api, "provider": self.provider, "model": model.id}
            )
            message = with_usage_estimate(message, context, options, self._prompt_cache)
        except Exception as exc:
            fail_stream(
                stream,
                _error_message(error_message_of(exc), self.api, self.provider, model.id),
                options.on_event,
            )
            return
        pacing = Pacing(split=self.split, delay_s=self._delay)
        await Streamer(stream, message, options).run(pacing)


def _faux_model(definition: str | Mapping[str, Any], api: str, provider: str) -> Model:
    spec: dict[str, Any] = {"id": definition} if isinstance(definition, str) else dict(definition)
    spec.setdefault("name", spec["id"])
    spec.setdefault("input", ["text", "image"])
    spec.setdefault("cost", ModelCost())
    spec.setdefault("context_window", spec.pop("contextWindow", 128_000))
    spec.setdefault("max_tokens", spec.pop("maxTokens", 16_384))
    return Model.model_validate({**spec, "api": api, "provider": provider, "base_url": DEFAULT_BASE_URL})


def register_faux_provider(
    *,
    api: str | None = None,
    provider: str = FAUX_PROVIDER,
    models: Sequence[str | Mapping[str, Any]] | None = None,
    tokens_per_second: float | None = None,
    token_size: tuple[int, int] = (3, 5),
) -> FauxProvider:
    """Register a scripted faux API (see the module docstring) and return its handle.

    `models` are ids or partial model definitions (id, name, reasoning, input, cost,
    contextWindow, maxTokens); by default one model ``faux-1``. `token_size` is (min, max).
    """
    api_name = api if api is not None else _random_id(FAUX_API)
    low = max(1, min(token_size[0], token_size[1]))
    high = max(low, token_size[1])
    built = [
        _faux_model(d, api_name, provider)
        for d in (models or [{"id": DEFAULT_MODEL_ID, "name": "Faux Model"}])
    ]
    handle = FauxProvider(
        api=api_name,
        provider=provider,
        models=built,
        tokens_per_second=tokens_per_second,
        token_size=(low, high),
    )
    register_api_provider(api_name, handle.stream, handle.stream)
    return handle


# --- built-in models: faux/echo ----------------------------------------------------------------

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


@dataclass(kw_only=True)
class EchoPlan:
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
    opts = options if options is not None else StreamOptions()
    stream = AssistantMessageEventStream()
    return run_producer(stream, model, lambda: _produce_builtin(model, context, opts, stream))


async def _produce_builtin(
    model: Model, context: Context, options: StreamOptions, stream: AssistantMessageEventStream
) -> None:
    behaviour = (model.compat or {}).get("fauxBehavior", model.id)
    if behaviour != ECHO_MODEL_ID:
        await asyncio.sleep(0)
        message = _error_message(
            f"Unknown faux model: {model.id} (scripted faux models come from register_faux_provider)",
            model.api,
            model.provider,
            model.id,
        )
        fail_stream(stream, message, options.on_event)
        return
    plan = plan_echo(context)
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
    "FAUX_API",
    "FAUX_PROVIDER",
    "PACE_ENV",
    "EchoPlan",
    "FauxBlock",
    "FauxProvider",
    "FauxResponseFactory",
    "FauxState",
    "FauxStep",
    "estimate_tokens",
    "faux_assistant_message",
    "faux_text",
    "faux_thinking",
    "faux_tool_call",
    "pace_ms",
    "plan_echo",
    "register_faux_provider",
    "serialize_context",
    "split_words",
    "stream_faux",
    "with_usage_estimate",
]
