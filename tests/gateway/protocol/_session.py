"""A stand-in session that numbers events the way a real one does."""

from __future__ import annotations

from sessions import EventPayload, SessionEvent

SESSION_ID = "add7eb98-277b-496a-8785-256b683221f4"


class Session:
    """Numbers events like a session does."""

    def __init__(self, key: str = "agent:main:main", run_id: str | None = "run-1") -> None:
        self.key = key
        self.run_id = run_id
        self.seq = 0

    def event(self, data: EventPayload, ts: int = 1000) -> SessionEvent:
        self.seq += 1
        return SessionEvent(
            session_id=SESSION_ID, seq=self.seq, data=data, run_id=self.run_id, session_key=self.key, ts=ts
        )
