"""A live session: the in-memory side of one session while it runs or was recently used.

`LiveSession` owns the session's `Agent` (whose queues take steering and follow-up messages at
once, even while a run waits for its turn), the next durable `seq`, and the state of its active
run (`RunState`). The agent holds a run's messages only while the run lasts; each run starts from
the session's context as `sessions.context_cache` keeps it (within a byte budget, equal to a
fresh read), or as read from the store (`Store.transcript.context_entries`, only the part of the
transcript the context holds) when it is not cached.

Lifetimes: a `RunState` lives from the input that starts it until its outcome is recorded
(`sessions.runs`); a `LiveSession` as long as `sessions.live_cache` keeps it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from enum import StrEnum

import msgspec

from agent_core import Agent, AgentMessage, AssistantMessage, Usage
from sessions.event_payloads import EventPayload
from sessions.ids import new_id
from sessions.input_message import InputMessage
from sessions.session_events import RunTranslator, SessionEvent
from sessions.store import SessionRecord
from sessions.termination import TerminationReason

__all__ = ["LiveSession", "RunPhase", "RunState"]


class RunPhase(StrEnum):
    PENDING = "pending"
    """Accepted; waiting for the session's lane or a run slot. More prompts may join it."""
    RUNNING = "running"
    """The agent runs."""
    FINISHING = "finishing"
    """The agent is done; the outcome is being recorded."""
    DONE = "done"


_NEXT_PHASES: dict[RunPhase, frozenset[RunPhase]] = {
    RunPhase.PENDING: frozenset({RunPhase.RUNNING, RunPhase.DONE}),
    RunPhase.RUNNING: frozenset({RunPhase.FINISHING, RunPhase.DONE}),
    RunPhase.FINISHING: frozenset({RunPhase.DONE}),
    RunPhase.DONE: frozenset(),
}


class RunState(msgspec.Struct, eq=False, dict=True):
    """One run of a live session, from acceptance to its recorded end."""

    run_id: str
    prompts: list[InputMessage]
    input_keys: list[str]
    phase: RunPhase = RunPhase.PENDING
    translator: RunTranslator = msgspec.field(default_factory=RunTranslator)
    abort_reason: TerminationReason | None = None
    abort_at: float | None = None
    finished: asyncio.Event = msgspec.field(default_factory=asyncio.Event)
    awaiting_model: bool = False
    last_activity: float = msgspec.field(default_factory=time.monotonic)
    partial_chunks: list[str] = msgspec.field(default_factory=list)
    """The text deltas of the reply being streamed (joined on demand: appending to one string
    per delta would copy the whole reply each time)."""
    partial_message_id: str | None = None
    last_message: AgentMessage | None = None
    last_assistant: AssistantMessage | None = None
    answered_calls: set[str] = msgspec.field(default_factory=set)
    usage: Usage = msgspec.field(default_factory=Usage)
    hard_stopped: bool = False
    failure: str | None = None
    pumps: set[asyncio.Task[None]] = msgspec.field(default_factory=set)

    @classmethod
    def for_messages(cls, messages: Sequence[InputMessage]) -> RunState:
        keys = [k for m in messages for k in m.input_keys]
        return cls(run_id=keys[0] if keys else new_id(), prompts=list(messages), input_keys=keys)

    def advance(self, to: RunPhase) -> None:
        if to not in _NEXT_PHASES[self.phase]:
            expected = " or ".join(p.value for p in RunPhase if to in _NEXT_PHASES[p])
            raise RuntimeError(
                f"run {self.run_id}: cannot go from {self.phase.value!r} to {to.value!r}; expected {expected}"
            )
        self.phase = to

    def join(self, message: InputMessage) -> None:
        """Add a prompt to a run that has not started."""
        if self.phase is not RunPhase.PENDING:
            raise RuntimeError(
                f"run {self.run_id}: prompts join only a pending run, not a {self.phase.value} one"
            )
        self.prompts.append(message)
        self.input_keys.extend(k for k in message.input_keys if k not in self.input_keys)

    @property
    def partial_text(self) -> str:
        """The text streamed so far of the reply being streamed ("" between replies)."""
        return "".join(self.partial_chunks)

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def add_usage(self, usage: Usage) -> None:
        total = self.usage
        total.input += usage.input
        total.output += usage.output
        total.cache_read += usage.cache_read
        total.cache_write += usage.cache_write
        total.total_tokens += usage.total_tokens
        total.cost.total += usage.cost.total


class LiveSession(msgspec.Struct, eq=False, dict=True):
    record: SessionRecord
    next_seq: int
    agent: Agent
    run: RunState | None = None
    collect_buffer: list[InputMessage] = msgspec.field(default_factory=list)
    collect_timer: asyncio.TimerHandle | None = None
    last_used: float = msgspec.field(default_factory=time.monotonic)

    @property
    def session_id(self) -> str:
        return self.record.id

    @property
    def session_key(self) -> str | None:
        keys = self.record.keys
        return keys[0] if keys else None

    @property
    def busy(self) -> bool:
        """A run, or messages waiting for one: the live session must stay."""
        return self.run is not None or bool(self.collect_buffer) or self.agent.pending_message_count > 0

    def number(self, payloads: Sequence[EventPayload], run_id: str | None) -> list[SessionEvent]:
        """Give payloads the session's next seqs, in order. Call only from the session's lane and
        append the result to the journal before awaiting anything else."""
        out = []
        for payload in payloads:
            self.next_seq += 1
            out.append(
                SessionEvent(
                    session_id=self.record.id,
                    seq=self.next_seq,
                    data=payload,
                    run_id=run_id,
                    session_key=self.session_key,
                )
            )
        return out

    def abort(self, reason: TerminationReason) -> bool:
        """Ask the active run to stop with `reason` (the first reason wins). A pending run stops
        as soon as its agent starts. False when there is no run left to abort."""
        run = self.run
        if run is None or run.phase in (RunPhase.FINISHING, RunPhase.DONE):
            return False
        if run.abort_reason is None:
            run.abort_reason = reason
            run.abort_at = time.monotonic()
        self.agent.abort(reason)
        return True
