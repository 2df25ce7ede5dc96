"""One model call that survives a failing provider: key rotation and a fallback chain.

`stream_resilient` streams from the first model of a route (the primary, then its fallbacks) and
moves on only while nothing has been shown to the consumer: an attempt's ``start`` event is held
back until its first content event, so a call that fails before answering can be retried
elsewhere without the consumer seeing two replies. Once content has streamed, the attempt's end
(success or error) is the call's end.

- **Keys.** When the provider has a `KeyPool` (and the call names no key of its own), each key is
  tried in turn: a 401/403 rests the key for the pool's auth cooldown, a 429 for its rate-limit
  cooldown, and the same model is asked again with the next key.
- **Fallbacks.** A failure that says the provider is overloaded (429, 529, any 5xx once the HTTP
  layer's own retries are spent, a connection error or timeout) moves to the next model of the
  route and rests the failed model for `ModelHealth.cooldown_s`, so the next calls skip it; a
  context-length failure moves to the next model with a *larger* context window. Aborts and other
  errors end the call as they are.

The reply of a fallback names the model that wrote it (its ``provider``/``model``), and its
``diagnostics`` carry ``{"fallback": {"from": ref, "to": ref, "reason": kind, "error": text}}``
for the last switch; `on_step` hears every switch as it happens.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias, cast

import msgspec

from agent_core.awaitables import maybe_await
from agent_core.event_stream import AssistantMessageEventStream
from agent_core.events import AssistantMessageEvent, ErrorEvent
from agent_core.llm import Context, Model, StreamFn, StreamOptions
from agent_core.messages import AssistantMessage
from agent_core.providers._common import run_producer
from agent_core.providers.key_pool import KeyPool, key_label

FailureKind: TypeAlias = Literal["rate_limit", "overloaded", "auth", "context_length"]
DEFAULT_MODEL_COOLDOWN_S = 30.0

_STATUS = re.compile(r"^(?:Server requested .*?\): )?(\d{3})\b")
_CONTEXT = re.compile(
    r"context[_ ]length|context window|maximum context|prompt is too long|input is too long|"
    r"too many (input )?tokens|exceeds the maximum (number of )?tokens|request too large",
    re.IGNORECASE,
)
_CONNECTION = ("Connection error", "Request timed out")


def classify_failure(error_message: str | None) -> FailureKind | None:
    """What a provider's error message says about the provider, or None for anything else."""
    text = error_message or ""
    if _CONTEXT.search(text):
        return "context_length"
    match = _STATUS.match(text)
    if match is not None:
        status = int(match.group(1))
        if status == 429:
            return "rate_limit"
        if status in (401, 403):
            return "auth"
        if status >= 500:
            return "overloaded"
        return None
    if text.startswith(_CONNECTION) or "overloaded" in text.lower():
        return "overloaded"
    return None


class FallbackStep(msgspec.Struct, frozen=True):
    """A switch from one model to the next during one call."""

    from_ref: str
    to_ref: str
    reason: FailureKind
    error: str

    def dump(self) -> dict[str, str]:
        return {"from": self.from_ref, "to": self.to_ref, "reason": self.reason, "error": self.error}


class KeyRest(msgspec.Struct, frozen=True):
    """A key put to rest: `label` shows only the key's last characters."""

    provider: str
    label: str
    reason: FailureKind
    seconds: float


@dataclass
class ModelHealth:
    """Which models rest after an overload (and why), for as long as the owner keeps this
    object. `clock` is monotonic seconds."""

    cooldown_s: float = DEFAULT_MODEL_COOLDOWN_S
    clock: Callable[[], float] = time.monotonic
    _resting: dict[str, tuple[float, FailureKind, str]] = field(default_factory=dict, repr=False)

    def rest(self, ref: str, reason: FailureKind = "overloaded", error: str = "") -> None:
        self._resting[ref] = (self.clock() + self.cooldown_s, reason, error)

    def recovered(self, ref: str) -> None:
        self._resting.pop(ref, None)

    def resting(self, ref: str) -> tuple[FailureKind, str] | None:
        """Why `ref` rests (the failure that put it to rest), or None when it does not."""
        entry = self._resting.get(ref)
        if entry is None:
            return None
        if entry[0] <= self.clock():
            del self._resting[ref]
            return None
        return entry[1], entry[2]

    def is_resting(self, ref: str) -> bool:
        return self.resting(ref) is not None


class Resilience(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    """What a call may fall back on: key pools by provider, model health, listeners."""

    pools: Mapping[str, KeyPool] = msgspec.field(default_factory=dict)
    health: ModelHealth = msgspec.field(default_factory=ModelHealth)
    on_step: Callable[[FallbackStep], None] | None = None
    on_key_rest: Callable[[KeyRest], None] | None = None


class _Attempt:
    """One model call whose ``start`` is held back until its first decisive event. `aclose()`
    stops it (cancelling its producer if it still runs); the caller must call it."""

    def __init__(self, stream: AssistantMessageEventStream) -> None:
        self.stream = stream
        self.held: list[AssistantMessageEvent] = []
        self.events = cast(AsyncGenerator[AssistantMessageEvent, None], aiter(stream))

    async def decisive(self) -> AssistantMessageEvent | None:
        """The first event after ``start`` (None when the stream ended without one)."""
        async for event in self.events:
            if event.type == "start":
                self.held.append(event)
                continue
            return event
        return None

    async def aclose(self) -> None:
        await self.events.aclose()
        await self.stream.aclose()


def stream_resilient(
    base: StreamFn,
    route: Sequence[Model],
    context: Context,
    options: StreamOptions | None = None,
    resilience: Resilience | None = None,
) -> AssistantMessageEventStream:
    """Stream one assistant message from the first model of `route` that answers (see the module
    docstring). Never raises: failures are an `error` event. `route` must not be empty."""
    opts = options if options is not None else StreamOptions()
    policy = resilience if resilience is not None else Resilience()
    outer = AssistantMessageEventStream()
    call = _Call(base, list(route), context, opts, policy)
    return run_producer(outer, route[0], lambda: _produce(call, outer))


def _candidates(route: list[Model], health: ModelHealth) -> list[Model]:
    ready = [m for m in route if not health.is_resting(m.ref)]
    return ready if ready else route[:1]


class _Call(msgspec.Struct, frozen=True):
    base: StreamFn
    route: list[Model]
    context: Context
    options: StreamOptions
    policy: Resilience


async def _produce(call: _Call, outer: AssistantMessageEventStream) -> None:
    base, route, context, options, policy = call.base, call.route, call.context, call.options, call.policy
    candidates = _candidates(route, policy.health)
    step = _skipped(route[0], candidates[0], policy.health)
    if step is not None and policy.on_step is not None:
        policy.on_step(step)
    index = 0
    while True:
        model = candidates[index]
        attempt, decisive = await _try_model(base, model, context, options, policy)
        try:
            kind = _failure(decisive)
            following = _next_index(candidates, index, model, kind)
            if kind is not None and following is not None and not _aborted(options):
                assert isinstance(decisive, ErrorEvent)
                error = decisive.error.error_message or ""
                if kind != "context_length":
                    policy.health.rest(model.ref, kind, error)
                step = FallbackStep(
                    from_ref=model.ref, to_ref=candidates[following].ref, reason=kind, error=error
                )
                if policy.on_step is not None:
                    policy.on_step(step)
                index = following
                continue
            if decisive is not None and decisive.type != "error":
                policy.health.recovered(model.ref)
            for event in attempt.held:
                outer.push(event)
            if decisive is not None:
                _forward(outer, decisive, step)
                async for event in attempt.events:
                    _forward(outer, event, step)
            final = await attempt.stream.result()
            _mark(final, step)
            if not outer.done:
                outer.end(final)
            return
        finally:
            await attempt.aclose()


def _skipped(primary: Model, first: Model, health: ModelHealth) -> FallbackStep | None:
    """The switch a call makes without asking the primary, because it rests."""
    why = health.resting(primary.ref) if first is not primary else None
    if why is None:
        return None
    return FallbackStep(
        from_ref=primary.ref, to_ref=first.ref, reason=why[0], error=f"resting after: {why[1]}"
    )


def _aborted(options: StreamOptions) -> bool:
    return options.signal is not None and options.signal.aborted


def _failure(decisive: AssistantMessageEvent | None) -> FailureKind | None:
    if not isinstance(decisive, ErrorEvent) or decisive.reason == "aborted":
        return None
    kind = classify_failure(decisive.error.error_message)
    return None if kind == "auth" else kind


def _next_index(candidates: list[Model], index: int, failed: Model, kind: FailureKind | None) -> int | None:
    if kind is None:
        return None
    for following in range(index + 1, len(candidates)):
        if kind != "context_length" or candidates[following].context_window > failed.context_window:
            return following
    return None


def _forward(
    outer: AssistantMessageEventStream, event: AssistantMessageEvent, step: FallbackStep | None
) -> None:
    if event.type == "done":
        _mark(event.message, step)
    elif isinstance(event, ErrorEvent):
        _mark(event.error, step)
    outer.push(event)


def _mark(message: AssistantMessage, step: FallbackStep | None) -> None:
    if step is None:
        return
    diagnostics = dict(message.diagnostics) if isinstance(message.diagnostics, dict) else {}
    diagnostics["fallback"] = step.dump()
    message.diagnostics = diagnostics


async def _try_model(
    base: StreamFn, model: Model, context: Context, options: StreamOptions, policy: Resilience
) -> tuple[_Attempt, AssistantMessageEvent | None]:
    """Call `model`, rotating through its provider's keys on 401/403/429."""
    pool = policy.pools.get(model.provider)
    keys: list[str | None] = list(pool.candidates()) if pool is not None and not options.api_key else []
    if not keys:
        keys = [None]
    for position, key in enumerate(keys):
        call_options = dataclasses.replace(options, api_key=key) if key is not None else options
        attempt = _Attempt(await maybe_await(base(model, context, call_options)))
        try:
            decisive = await attempt.decisive()
        except BaseException:
            await attempt.aclose()
            raise
        if key is None or pool is None:
            return attempt, decisive
        if not isinstance(decisive, ErrorEvent):
            if decisive is not None:
                pool.used(key)
            return attempt, decisive
        kind = classify_failure(decisive.error.error_message) if decisive.reason == "error" else None
        if kind not in ("auth", "rate_limit"):
            return attempt, decisive
        seconds = pool.rest(key, auth=kind == "auth")
        if policy.on_key_rest is not None:
            policy.on_key_rest(KeyRest(model.provider, key_label(key), kind, seconds))
        if position == len(keys) - 1:
            return attempt, decisive
        await attempt.aclose()
    raise AssertionError("unreachable: the key loop always returns")


__all__ = [
    "DEFAULT_MODEL_COOLDOWN_S",
    "FailureKind",
    "FallbackStep",
    "KeyRest",
    "ModelHealth",
    "Resilience",
    "classify_failure",
    "stream_resilient",
]
