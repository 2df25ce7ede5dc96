"""The model stream of a run, guarded: an abort always ends it, whatever the provider does.

A provider may ignore the abort signal or hang; the run must still end. `guarded_stream`
forwards the provider's events and ends its own stream with an `aborted` error as soon as the
signal fires, and with an `error` when the provider raises. Events are forwarded from the
provider's `push` itself (`EventStream.listen`), so a delta reaches the agent loop with no extra
task switch; the task that waits for the provider's end belongs to the run (`RunState.pumps`)
and ends with the stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Literal

import msgspec

from agent_core import (
    AbortSignal,
    AssistantMessage,
    AssistantMessageEvent,
    AssistantMessageEventStream,
    ErrorEvent,
    Model,
    maybe_await,
)
from sessions.live import RunState

__all__ = ["STREAM_ABORTED_TEXT", "error_stream", "guarded_stream"]

STREAM_ABORTED_TEXT = "Request was aborted"


def guarded_stream(
    call: Callable[[], AssistantMessageEventStream | Awaitable[AssistantMessageEventStream]],
    model: Model,
    signal: AbortSignal | None,
    run: RunState,
) -> AssistantMessageEventStream:
    """The stream of `call()`, forwarded event by event, that ends with an `aborted` error (the
    partial message streamed so far) as soon as `signal` aborts, whether or not the provider
    notices, and with an `error` when the provider raises. Each event touches the run (idle
    watchdog). The task that waits for the provider belongs to `run.pumps` and ends with the
    stream."""
    outer = AssistantMessageEventStream()
    last: list[AssistantMessage] = []

    def end_with(reason: Literal["aborted", "error"], text: str) -> None:
        if outer.done:
            return
        base = last[-1] if last else AssistantMessage(api=model.api, provider=model.provider, model=model.id)
        final = msgspec.structs.replace(base, stop_reason=reason, error_message=text)
        outer.push(ErrorEvent(reason=reason, error=final))
        outer.end(final)

    def forward(event: AssistantMessageEvent) -> None:
        run.touch()
        partial = getattr(event, "partial", None)
        if isinstance(partial, AssistantMessage):
            last[:] = [partial]
        outer.push(event)

    async def pump() -> None:
        try:
            inner = await maybe_await(call())
            inner.listen(forward)
            try:
                final = await inner.result()
            except asyncio.CancelledError:
                inner.abandon()
                raise
            if not outer.done:
                outer.end(final)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            end_with("error", str(exc) or type(exc).__name__)

    def on_abort() -> None:
        end_with("aborted", STREAM_ABORTED_TEXT)
        task.cancel()

    task = asyncio.create_task(pump(), name=f"stream-{run.run_id}")
    run.pumps.add(task)
    task.add_done_callback(run.pumps.discard)
    if signal is not None:
        remove = signal.add_listener(on_abort)
        task.add_done_callback(lambda _: remove())
    return outer


def error_stream(model: Model, message: str) -> AssistantMessageEventStream:
    """A stream that ends at once with `message` as its error (a run without a usable model)."""
    stream = AssistantMessageEventStream()
    final = AssistantMessage(
        api=model.api, provider=model.provider, model=model.id, stop_reason="error", error_message=message
    )
    stream.push(ErrorEvent(reason="error", error=final))
    stream.end(final)
    return stream
