"""What every provider shares: the output message, event snapshots, the producer task, API keys,
and the option defaults of the "simple" entry points."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import ipaddress
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar
from urllib.parse import urlsplit

import msgspec

from agent_core.event_stream import AssistantMessageEventStream
from agent_core.events import ErrorEvent
from agent_core.llm import Context, Model, ReasoningLevel, StreamOptions
from agent_core.messages import AssistantMessage
from agent_core.providers._env import get_env_api_key

ABORTED_MESSAGE = "Request was aborted"
PRODUCER_TASK_PREFIX = "llm-stream:"

_O = TypeVar("_O", bound=StreamOptions)


def new_output(model: Model) -> AssistantMessage:
    """The empty assistant message a provider fills while streaming."""
    return AssistantMessage(api=model.api, provider=model.provider, model=model.id, content=[])


def snapshot(message: AssistantMessage) -> AssistantMessage:
    """A copy of `message` that later streaming does not change (the `partial` of an event).

    Blocks are copied one level deep; their strings are immutable and providers replace (never
    mutate) tool-call argument dicts and usage objects, so that is enough. Cheap (a struct copy
    per block): the HTTP providers take one per received chunk, so that events collected before
    being looked at still show the message as it stood at their chunk, as pi's traces record.
    """
    copied = copy.copy(message)
    copied.content = [copy.copy(block) for block in message.content]
    return copied


def error_message_of(exc: BaseException) -> str:
    text = str(exc)
    return text if text else type(exc).__name__


def fail_output(
    stream: AssistantMessageEventStream, output: AssistantMessage, exc: BaseException, aborted: bool
) -> None:
    """Turn a failure into the final `error` event (pi's catch block)."""
    output.stop_reason = "aborted" if aborted else "error"
    output.error_message = ABORTED_MESSAGE if aborted else error_message_of(exc)
    stream.push(ErrorEvent(reason=output.stop_reason, error=output))
    stream.end(output)


def error_stream(model: Model, message: str, *, aborted: bool = False) -> AssistantMessageEventStream:
    """A stream that holds only an `error` event with `message`."""
    stream = AssistantMessageEventStream()
    output = new_output(model)
    output.stop_reason = "aborted" if aborted else "error"
    output.error_message = message
    stream.push(ErrorEvent(reason=output.stop_reason, error=output))
    stream.end(output)
    return stream


Produce = Callable[[Model, Context, StreamOptions, AssistantMessageEventStream], Coroutine[Any, Any, None]]
"""A provider's producer: feeds one assistant message of `model` for `context` into the stream."""


def stream_from(
    produce: Produce, model: Model, context: Context, options: StreamOptions | None
) -> AssistantMessageEventStream:
    """A provider's stream function: `produce` run as the producer of a new stream (default
    options when none are given). Never raises: failures are an `error` event."""
    opts = options if options is not None else StreamOptions()
    stream = AssistantMessageEventStream()
    return run_producer(stream, model, lambda: produce(model, context, opts, stream))


def key_missing(model: Model, options: StreamOptions, base_url: str) -> AssistantMessageEventStream | None:
    """For the simple stream functions, which require an API key: an `error` stream saying why
    none was found, else None."""
    _, problem = resolve_api_key(model, options, base_url)
    return error_stream(model, problem) if problem is not None else None


def run_producer(
    stream: AssistantMessageEventStream,
    model: Model,
    produce: Callable[[], Coroutine[Any, Any, None]],
) -> AssistantMessageEventStream:
    """Run `produce` (which feeds `stream`) as the stream's producer task and return `stream`.

    The stream owns the task: when its consumer stops early (`aclose()`, or an iteration
    abandoned before the end) the task is cancelled, which ends the stream with an `aborted`
    error and lets `produce` close what it opened (its HTTP response) on the way out.
    `produce` is expected to end the stream itself; anything it lets escape still ends the stream
    with an `error` event, so a stream function never raises and never leaves a consumer hanging.
    Called without a running event loop, the stream holds only an `error` event.
    """

    async def guarded() -> None:
        try:
            await produce()
        except Exception as exc:  # a provider failure is the stream's `error` event, not a crash
            if not stream.done:
                _end_with_error(stream, model, error_message_of(exc), aborted=False)

    def unfinished(task: asyncio.Task[None]) -> None:
        # Cancelled (its consumer stopped, perhaps before `produce` ever ran), or returned without
        # ending the stream.
        if task.cancelled():
            _end_with_error(stream, model, ABORTED_MESSAGE, aborted=True)
        else:
            _end_with_error(stream, model, "Provider ended without a result", aborted=False)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        _end_with_error(stream, model, "Stream functions need a running event loop", aborted=False)
        return stream
    stream.start(
        guarded(), name=f"{PRODUCER_TASK_PREFIX}{model.provider}/{model.id}", on_unfinished=unfinished
    )
    return stream


def _end_with_error(
    stream: AssistantMessageEventStream, model: Model, message: str, *, aborted: bool
) -> None:
    output = new_output(model)
    output.stop_reason = "aborted" if aborted else "error"
    output.error_message = message
    stream.push(ErrorEvent(reason=output.stop_reason, error=output))
    stream.end(output)


def running_producers() -> int:
    """How many provider streams of the running event loop are still being produced (for leak
    checks)."""
    return sum(1 for task in asyncio.all_tasks() if task.get_name().startswith(PRODUCER_TASK_PREFIX))


# --- observing HTTP requests (metrics) ----------------------------------------------------------


class RequestOutcome(msgspec.Struct, frozen=True):
    """How one HTTP attempt of a provider stream ended (for metrics)."""

    provider: str
    model: str
    status: str
    """The HTTP status code, or `transport_error` (connection failed, timed out or broke)."""
    retrying: bool
    """Another attempt follows."""
    final: bool
    """The request failed for good (no attempt follows)."""


RequestObserver = Callable[[RequestOutcome], None]
_observers: list[RequestObserver] = []


def observe_requests(observer: RequestObserver) -> Callable[[], None]:
    """Call `observer` (synchronously; it must not block or raise) with the outcome of every
    HTTP attempt of every provider stream, until the returned function is called."""
    _observers.append(observer)

    def remove() -> None:
        if observer in _observers:
            _observers.remove(observer)

    return remove


def request_observers() -> list[RequestObserver]:
    """The observers registered now (a copy)."""
    return list(_observers)


# --- API keys ---------------------------------------------------------------------------------


def is_loopback_url(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_api_key(model: Model, options: StreamOptions, base_url: str) -> tuple[str | None, str | None]:
    """``(key, problem)``: the key to send, or the error message when one is needed and missing.

    The key comes from `options.api_key`, else the provider's environment variable. A server on
    this machine (loopback base URL) or a model with ``compat.requiresApiKey = false`` may be
    called without one.
    """
    key = options.api_key or get_env_api_key(model.provider)
    if key:
        return key, None
    compat = model.compat or {}
    if compat.get("requiresApiKey") is False or is_loopback_url(base_url):
        return None, None
    return None, f"No API key for provider: {model.provider}"


# --- "simple" options ---------------------------------------------------------------------------

DEFAULT_THINKING_BUDGETS: dict[str, int] = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384}


def with_options(cls: type[_O], options: StreamOptions | None, **changes: Any) -> _O:
    """`options` as an instance of the provider's options class `cls`, with `changes` applied.

    Fields of `cls` that `options` also has (a caller may pass the provider's own class) are kept.
    """
    values: dict[str, Any] = {}
    if options is not None:
        for f in dataclasses.fields(options):
            values[f.name] = getattr(options, f.name)
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in values.items() if k in names}
    values.update(changes)
    return cls(**values)


def base_max_tokens(model: Model, options: StreamOptions | None) -> int:
    """pi's default output cap for the simple entry points: min(model max, 32000)."""
    if options is not None and options.max_tokens:
        return options.max_tokens
    return min(model.max_tokens, 32_000)


def clamp_reasoning(model: Model, level: ReasoningLevel | None) -> ReasoningLevel | None:
    """The reasoning level the model can take: none for non-reasoning models, xhigh only where
    ``compat.supportsXhigh`` says so (else high)."""
    if level is None or not model.reasoning:
        return None
    if level == "xhigh" and not (model.compat or {}).get("supportsXhigh"):
        return "high"
    return level


def adjust_max_tokens_for_thinking(
    base_max: int, model_max: int, level: ReasoningLevel, budgets: dict[str, int] | None = None
) -> tuple[int, int]:
    """``(max_tokens, budget)`` for budget-based thinking (pi's adjustMaxTokensForThinking)."""
    table = {**DEFAULT_THINKING_BUDGETS, **(budgets or {})}
    budget = table["high" if level == "xhigh" else level]
    max_tokens = min(base_max + budget, model_max)
    if max_tokens <= budget:
        budget = max(0, max_tokens - 1024)
    return max_tokens, budget
