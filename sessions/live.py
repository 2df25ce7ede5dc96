"""A live session: the in-memory side of one session while it runs or was recently used.

It owns the session's `Agent` (whose queues take steering and follow-up messages at once, even
before a run has started), the next durable `seq`, and the state of its active run. It keeps no
transcript copy: each run rebuilds the agent's messages from the database.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from agent_core import Agent
from sessions.session_events import Draft, RunTranslator, SessionEvent
from sessions.store import SessionRecord


@dataclass(eq=False)
class RunState:
    """One run of a live session, from acceptance to its recorded end."""

    run_id: str
    input_keys: list[str]
    translator: RunTranslator = field(default_factory=RunTranslator)
    abort_reason: str | None = None
    started: bool = False
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    awaiting_model: bool = False
    last_activity: float = field(default_factory=time.monotonic)
    partial_text: str = ""
    partial_message_id: str | None = None

    def touch(self) -> None:
        self.last_activity = time.monotonic()


@dataclass(eq=False)
class LiveSession:
    record: SessionRecord
    next_seq: int
    agent: Agent
    run: RunState | None = None
    collect_buffer: list[tuple[str, Any]] = field(default_factory=list)
    collect_timer: asyncio.TimerHandle | None = None
    consumed_inputs: set[str] = field(default_factory=set)
    last_used: float = field(default_factory=time.monotonic)

    @property
    def session_id(self) -> str:
        return self.record.id

    @property
    def session_key(self) -> str | None:
        keys = self.record.keys
        return keys[0] if keys else None

    @property
    def busy(self) -> bool:
        return self.run is not None or bool(self.collect_buffer)

    def number(self, drafts: list[Draft], run_id: str | None) -> list[SessionEvent]:
        """Give drafts the session's next seqs, in order."""
        out = []
        for draft in drafts:
            self.next_seq += 1
            out.append(
                SessionEvent(
                    session_id=self.record.id,
                    seq=self.next_seq,
                    name=draft.name,
                    data=draft.data,
                    run_id=run_id,
                    session_key=self.session_key,
                )
            )
        return out
