"""Inputs the caller answers itself (chat commands): whoever sees the answer finds it settled."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sessions.manager import SessionManager
from sessions.session_events import SessionEvent
from sessions.store import Store, default_url
from tests.sessions.manager_support import FAST, Directory, StreamLog


class SettledAtPublish:
    """A publisher that reads, the moment a run's end is published, what the ledger says of the
    input (through its own connection, as a client retrying the key would)."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path)
        self.seen: dict[str, str] = {}

    def publish(self, event: SessionEvent) -> None:
        if event.name == "agent.finished" and event.run_id is not None:
            row = self._db.execute(
                "SELECT status FROM inputs WHERE idempotency_key = ?", (event.run_id,)
            ).fetchone()
            self.seen[event.run_id] = row[0] if row else "missing"


async def test_the_answer_is_published_only_with_the_input_settled(gateway_home: Path) -> None:
    async with Store.open(default_url(gateway_home)) as store:
        path = store.database.sqlite_path
        assert path is not None
        publisher = SettledAtPublish(path)
        manager = SessionManager(
            store, directory=Directory(), publisher=publisher, settings=FAST, stream_fn=StreamLog()
        )
        await manager.start()
        try:
            session = await manager.ensure_session("agent:main:commands")
            for n in range(3):
                key = f"command-{n}"
                started = await manager.accept_answer(session=session, message="/status", idempotency_key=key)
                assert started.status == "started"
                await manager.answer(key, session_id=session.id, text=f"status {n}")
                assert publisher.seen[key] == "done"  # a retry of the key now answers its outcome
                again = await manager.accept_answer(session=session, message="/status", idempotency_key=key)
                assert again.status == "ok"
        finally:
            await manager.aclose(grace_s=0.0)
