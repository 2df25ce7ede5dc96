"""Compacting a session's history: on request, and automatically before a run whose context
comes close to its model's context window.

The algorithm (what to keep, where to cut, how to summarise) is `sessions.compaction`'s; this
module reads what it needs from the store, asks the session's model for the summary and commits
the compaction entry through the journal. A compaction changes the session's history, so callers
run it on the session's lane. It reads only what the context holds (the newest compaction and
what it kept, then the entries after it), never the history an earlier compaction replaced.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from agent_core import AgentMessage, Model, StreamFn
from sessions import compaction
from sessions.context import build_context
from sessions.journal import Journal, JournalItem
from sessions.profiles import AgentDirectory, RunSettings
from sessions.records import NewEntry, SessionRecord
from sessions.store import Store

__all__ = ["Compactor"]

log = structlog.get_logger("sessions.compactor")


class Compactor:
    """Compactions of one manager's sessions. `directory()` and `settings()` return the current
    agent directory and run settings; `on_compacted(session_id)` is told after each one."""

    def __init__(
        self,
        store: Store,
        journal: Journal,
        *,
        directory: Callable[[], AgentDirectory],
        settings: Callable[[], RunSettings],
        stream_fn: StreamFn,
        on_compacted: Callable[[str], None],
    ) -> None:
        self._store = store
        self._journal = journal
        self._directory = directory
        self._settings = settings
        self._stream_fn = stream_fn
        self._on_compacted = on_compacted

    async def compact(self, session: SessionRecord, model: Model) -> compaction.CompactionResult:
        """Summarise what the session's context holds (continuing the previous summary) and
        commit the compaction entry. Raise CompactionError when there is not enough history or
        the summary fails."""
        entries = await self._store.transcript.context_entries(session.id)
        plan = compaction.plan(entries, self._settings().compaction_keep_recent_tokens)
        model = self._summary_model(session, model)
        summary = await compaction.summarize(
            plan.to_summarize,
            model=model,
            stream_fn=self._stream_fn,
            api_key=self._directory().api_key(model.provider),
            previous_summary=plan.previous_summary,
        )
        result = compaction.CompactionResult(
            summary=summary, first_kept_entry_id=plan.first_kept_entry_id, tokens_before=plan.tokens_before
        )
        await self._journal.commit(
            JournalItem(session.id, entries=[NewEntry(kind="compaction", payload=result.payload())])
        )
        self._on_compacted(session.id)
        return result

    def _summary_model(self, session: SessionRecord, model: Model) -> Model:
        """The agent's `compaction_model` (a cheaper model for summaries) when it has one that
        resolves, else `model`."""
        directory = self._directory()
        try:
            ref = directory.profile(session.agent_id).extra.get("compaction_model")
            return directory.resolve_model(ref) if ref else model
        except Exception as exc:
            log.warning("compaction model cannot be used", session_id=session.id, error=str(exc))
            return model

    async def before_run(
        self, session: SessionRecord, model: Model, context: list[AgentMessage]
    ) -> list[AgentMessage]:
        """The context a run starts from: `context`, or, when it comes within
        `compaction_reserve_tokens` of the model's context window, the context after compacting.
        A failed compaction is logged and the run goes on with `context`."""
        settings = self._settings()
        tokens = compaction.context_tokens(context)
        if not compaction.should_compact(tokens, model.context_window, settings.compaction_reserve_tokens):
            return context
        try:
            await self.compact(session, model)
        except compaction.CompactionError as exc:
            log.warning("automatic compaction failed", session_id=session.id, error=str(exc))
            return context
        return build_context(await self._store.transcript.context_entries(session.id))
