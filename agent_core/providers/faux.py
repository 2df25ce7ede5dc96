"""The faux provider: assistant messages streamed like a real model's, without a network.

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

The built-in ``faux/echo`` model lives in `agent_core.providers.faux_echo`.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import random
import string
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeGuard

import msgspec

from agent_core.event_stream import AssistantMessageEventStream
from agent_core.llm import Context, Model, ModelCost, StreamOptions
from agent_core.messages import (
    AssistantMessage,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    now_ms,
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
DEFAULT_BASE_URL = "http://localhost:0"


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


class FauxState(msgspec.Struct, dict=True):
    call_count: int = 0


FauxResponseFactory: TypeAlias = Callable[
    [Context, StreamOptions, FauxState, Model], AssistantMessage | Awaitable[AssistantMessage]
]
FauxStep: TypeAlias = AssistantMessage | FauxResponseFactory


def error_message(text: str, api: str, provider: str, model_id: str) -> AssistantMessage:
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
            from agent_core.providers.faux_echo import stream_faux  # the echo model builds on this module

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
            message = error_message("No more faux responses queued", self.api, self.provider, model.id)
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
            message = msgspec.structs.replace(
                copy.deepcopy(resolved), api=self.api, provider=self.provider, model=model.id
            )
            message = with_usage_estimate(message, context, options, self._prompt_cache)
        except Exception as exc:
            fail_stream(
                stream,
                error_message(error_message_of(exc), self.api, self.provider, model.id),
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


TokenSize: TypeAlias = tuple[int, int] | Mapping[str, int]
"""``(min, max)``, or pi's ``{"min": ..., "max": ...}`` (either key may be left out)."""

_TOKEN_SIZE_FORM = '(min, max) or {"min": int, "max": int}'
DEFAULT_TOKEN_SIZE = (3, 5)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_token_size(token_size: object) -> tuple[int, int]:
    """`token_size` as a ``(low, high)`` pair with ``1 <= low <= high``, normalised as pi does.

    Raises `TypeError`, naming the expected form, for anything but a pair of ints or a mapping
    with only ``min`` and ``max`` int values.
    """
    low: object
    high: object
    if isinstance(token_size, Mapping):
        unknown = set(token_size) - {"min", "max"}
        low = token_size.get("min", DEFAULT_TOKEN_SIZE[0])
        high = token_size.get("max", DEFAULT_TOKEN_SIZE[1])
        valid = not unknown
    elif isinstance(token_size, tuple | list) and len(token_size) == 2:
        low, high = token_size
        valid = True
    else:
        low = high = None
        valid = False
    if not (valid and _is_int(low) and _is_int(high)):
        raise TypeError(f"token_size must be {_TOKEN_SIZE_FORM}, got {token_size!r}")
    floor = max(1, min(low, high))
    return floor, max(floor, high)


def register_faux_provider(
    *,
    api: str | None = None,
    provider: str = FAUX_PROVIDER,
    models: Sequence[str | Mapping[str, Any]] | None = None,
    tokens_per_second: float | None = None,
    token_size: TokenSize = DEFAULT_TOKEN_SIZE,
) -> FauxProvider:
    """Register a scripted faux API (see the module docstring) and return its handle.

    `models` are ids or partial model definitions (id, name, reasoning, input, cost,
    contextWindow, maxTokens); by default one model ``faux-1``. `token_size` is ``(min, max)``
    or pi's ``{"min": ..., "max": ...}``; anything else raises `TypeError`.
    """
    low, high = parse_token_size(token_size)
    api_name = api if api is not None else _random_id(FAUX_API)
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


__all__ = [
    "FAUX_API",
    "FAUX_PROVIDER",
    "FauxBlock",
    "FauxProvider",
    "FauxResponseFactory",
    "FauxState",
    "FauxStep",
    "TokenSize",
    "error_message",
    "estimate_tokens",
    "faux_assistant_message",
    "faux_text",
    "faux_thinking",
    "faux_tool_call",
    "parse_token_size",
    "register_faux_provider",
    "serialize_context",
    "with_usage_estimate",
]
