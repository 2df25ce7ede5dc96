"""Aborting a run, and the runs of its sub-agents with it.

A sub-agent session (`kind == "subagent"`) works for its parent's run: when that run is aborted,
the runs of its live sub-agent sessions (and theirs, down the tree) are aborted with the same
reason. Aborts reach the running agent at once; they never wait for the session's lane.
"""

from __future__ import annotations

from collections.abc import Iterable

from sessions.live import LiveSession
from sessions.schema import SessionKind
from sessions.termination import TerminationReason

__all__ = ["abort_tree"]


def abort_tree(live: LiveSession, reason: TerminationReason, lives: Iterable[LiveSession]) -> list[str]:
    """Ask the run of `live` and of its sub-agent sessions among `lives` to stop with `reason`;
    return the ids of the runs asked (each records its end as usual)."""
    everyone = list(lives)
    aborted: list[str] = []
    pending = [live]
    while pending:
        current = pending.pop()
        run = current.run
        if run is not None and current.abort(reason):
            aborted.append(run.run_id)
        pending.extend(
            child
            for child in reversed(everyone)
            if child.record.parent_id == current.session_id and child.record.kind == SessionKind.SUBAGENT
        )
    return aborted
