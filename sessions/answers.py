"""Inputs answered without the agent: the gateway's own reply to a message (a chat command).

Such an input is a run like any other to everyone who watches the session, only its reply comes
from the caller instead of the model. It takes two steps:

1. `accept` records it before the sender is answered: a run record (`running`, named after the
   idempotency key) and the input (`running` in that run). A key seen before answers as a repeat
   (`in_flight`, then the stored outcome), so nothing is acted on twice.
2. `reply` publishes the answer, once: the events of a one-turn run (`agent.started`, the user
   message, the reply streamed as one delta and completed, `agent.finished`) in the session the
   caller names, committed with the run's result and the input's outcome (`done`): whoever has
   seen the answer finds the input settled.

The exchange is not part of the transcript: the model never sees it, and a message answered
while a run is active never splits that run's messages. Clients that follow events, chat
bindings and `agent.wait` see it as they see any run. Between the two steps the run is open; a
crash there leaves it to recovery, which closes it as interrupted (never runs it again).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agent_core import AssistantMessage, TextContent, Usage, UserMessage
from sessions._direct_write import DirectWrite
from sessions.errors import Conflict, NotFound
from sessions.event_payloads import (
    AgentFinished,
    AgentStarted,
    MessageCompleted,
    MessageDelta,
    MessageStarted,
)
from sessions.ids import new_id
from sessions.input_message import as_input
from sessions.inputs import Inputs, SubmitResult
from sessions.journal import Journal, JournalItem
from sessions.live_cache import LiveSessions
from sessions.records import SessionRecord
from sessions.schema import InputStatus, RunStatus
from sessions.store import Store
from sessions.termination import Outcome, TerminationReason

__all__ = ["Answers", "REPLY_MODEL"]

REPLY_MODEL = ("gateway", "gateway", "command")
"""(api, provider, model) of a reply the gateway wrote itself."""


class Answers:
    """Inputs the caller answers itself, over the manager's store, journal and live sessions."""

    def __init__(self, store: Store, journal: Journal, *, lives: LiveSessions, inputs: Inputs) -> None:
        self._store = store
        self._journal = journal
        self._lives = lives
        self._inputs = inputs

    async def accept(
        self,
        *,
        session: SessionRecord,
        message: str | UserMessage,
        idempotency_key: str,
        source: dict[str, Any] | None = None,
    ) -> SubmitResult:
        """Record the input (step 1). `started`: the caller must `reply` exactly once; anything
        else answers a key seen before."""
        existing = await self._store.inputs.get(idempotency_key)
        if existing is not None:
            return await self._inputs.repeat(existing, session)
        try:
            await self._store.runs.create(idempotency_key, session.id)
        except Conflict:
            # The same key at the same moment: the other call records and answers it.
            return SubmitResult(run_id=idempotency_key, status="in_flight", session=session)
        user = as_input(message, idempotency_key)
        record, created = await self._store.inputs.record(
            idempotency_key,
            session_id=session.id,
            payload=user.dump(),
            source=source,
            status=InputStatus.RUNNING,
            run_id=idempotency_key,
        )
        if not created:
            return await self._inputs.repeat(record, session)
        return SubmitResult(run_id=idempotency_key, status="started", session=session)

    async def reply(
        self,
        idempotency_key: str,
        *,
        session_id: str,
        text: str,
        session_key: str | None = None,
        duration_ms: int = 0,
    ) -> None:
        """Publish `text` as the answer to an input `accept` started (step 2), in the session
        `session_id`, its events under `session_key` (the key the message was sent to; default:
        the session's own, which a command that moved the key no longer is). Raise NotFound
        when the input or the session is unknown, StoreUnavailable when the store cannot take it
        (the run then stays open for recovery)."""
        record = await self._store.inputs.get(idempotency_key)
        if record is None:
            raise NotFound(f"no input {idempotency_key} to answer")
        api, provider, model = REPLY_MODEL
        reply = AssistantMessage(
            content=[TextContent(text=text)], api=api, provider=provider, model=model, stop_reason="stop"
        )
        reply_id = new_id()
        live = await self._lives.load(session_id)
        # Numbered and queued without awaiting in between, so the session's events stay in order
        # next to a run that may be producing its own.
        events = live.number(
            [
                AgentStarted(),
                MessageCompleted(message_id=new_id(), message=record.payload),
                MessageStarted(message_id=reply_id, role="assistant"),
                MessageDelta(message_id=reply_id, content_index=0, kind="text", delta=text),
                MessageCompleted(message_id=reply_id, message=reply.dump()),
                AgentFinished(
                    termination_reason=TerminationReason.NO_TOOL_CALLS,
                    total_turns=1,
                    total_tokens=0,
                    duration_ms=duration_ms,
                    stop_reason="stop",
                ),
            ],
            idempotency_key,
        )
        if session_key is not None:
            events = [dataclasses.replace(event, session_key=session_key) for event in events]
        result = {
            "runId": idempotency_key,
            "status": Outcome.OK.value,
            "text": text,
            "terminationReason": TerminationReason.NO_TOOL_CALLS.value,
            "stopReason": "stop",
        }

        async def outcome(tx: DirectWrite) -> None:
            # With the events, so that no one who has seen the answer finds the input unsettled.
            await self._store.runs.finish_in(
                tx,
                idempotency_key,
                session_id=session_id,
                status=RunStatus.DONE,
                termination_reason=TerminationReason.NO_TOOL_CALLS,
                error=None,
                result=result,
                usage=Usage(),
            )
            await self._store.inputs.move_in(
                tx, [idempotency_key], status=InputStatus.DONE, run_id=idempotency_key
            )

        await self._journal.commit(JournalItem(session_id, events=events, extra=outcome))
        self._inputs.settled([idempotency_key])
