"""The stateful `Agent`: a transcript, two queues of pending messages, and at most one run.

A port of pi-agent-core 0.73.1 `agent.ts`. The agent owns its state and updates it from the loop's
events (the reducer) before handing each event to its listeners, which are awaited in
subscription order, so a slow listener slows the run. `prompt()` and `continue_()` return once
the run and every listener call for it have finished; they do not raise for model or provider
failures, which end up as an assistant message with `stop_reason` `"error"` or `"aborted"`.

Lifetimes: the state lives as long as the agent; a run's abort controller lives from the start of
`prompt()`/`continue_()` until the run finished (`signal` is `None` otherwise). The loop works on a
snapshot of the transcript taken when the run starts; the transcript itself only grows through
`message_end` events.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeAlias, cast

import msgspec

from agent_core.abort import AbortController, AbortSignal
from agent_core.agent_state import (
    DEFAULT_MODEL,
    AgentInitialState,
    AgentState,
    PendingMessageQueue,
)
from agent_core.agent_types import AgentContext, AgentLoopConfig, AgentOptions, QueueMode
from agent_core.errors import AgentBusyError, ContinueError
from agent_core.events import AgentEndEvent, AgentEvent
from agent_core.llm import StreamFn
from agent_core.loop import run_agent_loop, run_agent_loop_continue
from agent_core.messages import (
    AgentMessage,
    AssistantMessage,
    ImageContent,
    TextContent,
    Usage,
    UserMessage,
    now_ms,
)

__all__ = [
    "DEFAULT_MODEL",
    "Agent",
    "AgentInitialState",
    "AgentListener",
    "AgentState",
    "PromptInput",
]

AgentListener: TypeAlias = Callable[[AgentEvent, AbortSignal], Awaitable[None] | None]
"""A subscriber: called with every event and the active run's abort signal; awaited in order."""

PromptInput: TypeAlias = str | AgentMessage | Sequence[AgentMessage]

BUSY_PROMPT = (
    "Agent is already processing a prompt. "
    "Use steer() or followUp() to queue messages, or wait for completion."
)
BUSY_CONTINUE = "Agent is already processing. Wait for completion before continuing."


class _ActiveRun(msgspec.Struct, eq=False):
    controller: AbortController
    finished: asyncio.Future[None]


class Agent:
    """A stateful agent running one loop at a time; see the module docstring.

    `options` (hooks and stream settings) is kept as given, not copied: changing it, or assigning
    another, takes effect from the next run (a run works on a copy taken when it starts, with
    `stream.reasoning` set from `state.thinking_level`, None when that is `"off"`). `stream_fn`
    is the model seam (default: `agent_core.providers.stream_simple`).
    """

    def __init__(
        self,
        *,
        initial_state: AgentInitialState | None = None,
        options: AgentOptions | None = None,
        stream_fn: StreamFn | None = None,
        steering_mode: QueueMode = "one-at-a-time",
        follow_up_mode: QueueMode = "one-at-a-time",
    ) -> None:
        self._state = AgentState(initial_state)
        self.options = options if options is not None else AgentOptions()
        self.stream_fn = stream_fn
        self._steering = PendingMessageQueue(steering_mode)
        self._follow_ups = PendingMessageQueue(follow_up_mode)
        self._listeners: list[AgentListener] = []
        self._active: _ActiveRun | None = None

    # --- state and subscriptions ---------------------------------------------------------------

    @property
    def state(self) -> AgentState:
        return self._state

    @property
    def signal(self) -> AbortSignal | None:
        """The active run's abort signal, or None when idle."""
        return self._active.controller.signal if self._active is not None else None

    def subscribe(self, listener: AgentListener) -> Callable[[], None]:
        """Call `listener(event, signal)` for every event from now on. Returns the unsubscriber."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    # --- queues -------------------------------------------------------------------------------

    @property
    def steering_mode(self) -> QueueMode:
        return self._steering.mode

    @steering_mode.setter
    def steering_mode(self, mode: QueueMode) -> None:
        self._steering.mode = mode

    @property
    def follow_up_mode(self) -> QueueMode:
        return self._follow_ups.mode

    @follow_up_mode.setter
    def follow_up_mode(self, mode: QueueMode) -> None:
        self._follow_ups.mode = mode

    def steer(self, message: AgentMessage) -> None:
        """Queue a message for the next model call of the active (or next) run."""
        self._steering.enqueue(message)

    def follow_up(self, message: AgentMessage) -> None:
        """Queue a message to start a new turn once the run would otherwise stop."""
        self._follow_ups.enqueue(message)

    def clear_steering_queue(self) -> None:
        self._steering.clear()

    def clear_follow_up_queue(self) -> None:
        self._follow_ups.clear()

    def clear_all_queues(self) -> None:
        self._steering.clear()
        self._follow_ups.clear()

    def has_queued_messages(self) -> bool:
        return len(self._steering) > 0 or len(self._follow_ups) > 0

    @property
    def pending_message_count(self) -> int:
        """Messages waiting in both queues."""
        return len(self._steering) + len(self._follow_ups)

    def drain_queues(self) -> list[AgentMessage]:
        """Remove and return every queued message: steering first, then follow-ups."""
        return [*self._steering.drain_all(), *self._follow_ups.drain_all()]

    # --- runs ---------------------------------------------------------------------------------

    async def prompt(self, input: PromptInput, images: Sequence[ImageContent] | None = None) -> None:
        """Run the loop for a new prompt: a text (with optional images), a message, or messages.

        Raises `AgentBusyError` if a run is active. Returns when the run and its listeners are done.
        """
        if self._active is not None:
            raise AgentBusyError(BUSY_PROMPT)
        await self._run_prompt_messages(_normalise_prompt(input, images))

    async def continue_(self) -> None:
        """Continue from the current transcript.

        With an assistant message last, queued steering messages (else follow-ups) become the
        prompt; with neither, or with no messages at all, raises `ContinueError`. Raises
        `AgentBusyError` if a run is active.
        """
        if self._active is not None:
            raise AgentBusyError(BUSY_CONTINUE)
        messages = self._state.messages
        if not messages:
            raise ContinueError("No messages to continue from")
        last = messages[-1]
        if last.role == "assistant":
            steering = self._steering.drain()
            if steering:
                await self._run_prompt_messages(steering, skip_initial_steering_poll=True)
                return
            follow_ups = self._follow_ups.drain()
            if follow_ups:
                await self._run_prompt_messages(follow_ups)
                return
            raise ContinueError(f"Cannot continue from message role: {last.role}")
        await self._run_with_lifecycle(self._continuation)

    def abort(self, reason: Any = None) -> None:
        """Abort the active run (no-op when idle)."""
        if self._active is not None:
            self._active.controller.abort(reason)

    async def wait_for_idle(self) -> None:
        """Return once no run is active (listeners of the last run included)."""
        run = self._active
        if run is not None:
            await asyncio.shield(run.finished)

    def reset(self) -> None:
        """Clear the transcript, the run fields and both queues (does not abort a run)."""
        self._state.clear()
        self.clear_all_queues()

    async def _run_prompt_messages(
        self, messages: list[AgentMessage], *, skip_initial_steering_poll: bool = False
    ) -> None:
        async def run(signal: AbortSignal) -> None:
            await run_agent_loop(
                messages,
                self._context_snapshot(),
                self._loop_config(skip_initial_steering_poll),
                self._process_event,
                signal,
                self.stream_fn,
            )

        await self._run_with_lifecycle(run)

    async def _continuation(self, signal: AbortSignal) -> None:
        await run_agent_loop_continue(
            self._context_snapshot(), self._loop_config(False), self._process_event, signal, self.stream_fn
        )

    async def _run_with_lifecycle(self, executor: Callable[[AbortSignal], Awaitable[None]]) -> None:
        if self._active is not None:
            raise AgentBusyError("Agent is already processing.")
        run = _ActiveRun(AbortController(), asyncio.get_running_loop().create_future())
        self._active = run
        self._state.begin_run()
        try:
            await executor(run.controller.signal)
        except asyncio.CancelledError:
            # The caller's task was cancelled: make sure providers and tools that listen to the
            # signal (HTTP streams, subprocesses) stop as well.
            run.controller.abort("The run was cancelled")
            raise
        except Exception as exc:
            await self._handle_run_failure(exc, aborted=run.controller.signal.aborted)
        finally:
            self._finish_run(run)

    def _finish_run(self, run: _ActiveRun) -> None:
        self._state.finish_run()
        if not run.finished.done():
            run.finished.set_result(None)
        self._active = None

    async def _handle_run_failure(self, error: Exception, *, aborted: bool) -> None:
        # pi 0.73.1: the synthetic message goes straight into the transcript and only agent_end
        # is emitted for it (later versions also emit message_start/message_end/turn_end).
        model = self._state.model
        failure = AssistantMessage(
            content=[TextContent(text="")],
            api=model.api,
            provider=model.provider,
            model=model.id,
            usage=Usage(),
            stop_reason="aborted" if aborted else "error",
            error_message=str(error),
            timestamp=now_ms(),
        )
        self._state.record_failure(failure)
        await self._process_event(AgentEndEvent(messages=[failure]))

    def _context_snapshot(self) -> AgentContext:
        return AgentContext(
            system_prompt=self._state.system_prompt,
            messages=list(self._state.messages),
            tools=list(self._state.tools),
        )

    def _loop_config(self, skip_initial_steering_poll: bool) -> AgentLoopConfig:
        skip = skip_initial_steering_poll

        async def steering() -> list[AgentMessage]:
            # After continue_() drained the steering queue itself, the loop's first poll must not
            # drain it again (one-at-a-time would deliver two messages in the first turn).
            nonlocal skip
            if skip:
                skip = False
                return []
            return self._steering.drain()

        async def follow_ups() -> list[AgentMessage]:
            return self._follow_ups.drain()

        return AgentLoopConfig(
            model=self._state.model,
            options=self._run_options(),
            get_steering_messages=steering,
            get_follow_up_messages=follow_ups,
        )

    def _run_options(self) -> AgentOptions:
        level = self._state.thinking_level
        stream = dataclasses.replace(self.options.stream, reasoning=None if level == "off" else level)
        return msgspec.structs.replace(self.options, stream=stream)

    async def _process_event(self, event: AgentEvent) -> None:
        self._state.apply(event)
        run = self._active
        if run is None:
            raise RuntimeError("Agent listener invoked outside active run")
        signal = run.controller.signal
        for listener in tuple(self._listeners):
            result = listener(event, signal)
            if result is not None and inspect.isawaitable(result):
                await result


def _normalise_prompt(input: PromptInput, images: Sequence[ImageContent] | None) -> list[AgentMessage]:
    if isinstance(input, str):
        content: list[TextContent | ImageContent] = [TextContent(text=input), *(images or ())]
        return [UserMessage(content=content, timestamp=now_ms())]
    if isinstance(input, list | tuple):
        return list(input)
    return [cast(AgentMessage, input)]
