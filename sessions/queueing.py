"""What an accepted input becomes: the session's queue mode while a run is active.

With no run, or a run still waiting for its turn, an input starts a run or joins the waiting one
(`queued`). While a run is active the queue mode decides:

- `steer`: the agent takes it at its next model call (`steered`);
- `followup`: a new turn after the run would otherwise stop (`followup`);
- `collect`: messages that arrive within a quiet window (`collect_window_s`, restarted by each
  message) are merged into one follow-up (`followup`);
- `interrupt`: the active run is aborted and a new run starts with it once that one has ended
  (`queued`).

The ledger records `steered` / `followup` before the message reaches the agent, so the agent's
own updates (running, done) always come later. The collect buffer and its timer live on the live
session; when the manager stops, buffered inputs stay `followup` and run after the restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from sessions.aborts import abort_tree
from sessions.input_message import InputMessage, merge_inputs
from sessions.inputs import Inputs
from sessions.live import LiveSession, RunPhase
from sessions.live_cache import LiveSessions
from sessions.profiles import RunSettings
from sessions.runs import Runs
from sessions.schema import InputStatus
from sessions.termination import TerminationReason

__all__ = ["QueueModes"]

# What the ledger records for an input that waits for the active run, per queue mode.
_WAITING_STATUS: Final = {
    "steer": InputStatus.STEERED,
    "followup": InputStatus.FOLLOWUP,
    "collect": InputStatus.FOLLOWUP,
}


class QueueModes:
    """Dispatches recorded inputs of one manager's sessions. `settings()` returns the current
    run settings."""

    def __init__(
        self, runs: Runs, inputs: Inputs, lives: LiveSessions, *, settings: Callable[[], RunSettings]
    ) -> None:
        self._runs = runs
        self._inputs = inputs
        self._lives = lives
        self._settings = settings

    async def dispatch(self, live: LiveSession, message: InputMessage, mode: str) -> str:
        """Act on a recorded input in queue mode `mode`; return what it became (`queued`,
        `steered` or `followup`)."""
        run = live.run
        if run is not None and run.phase is not RunPhase.PENDING and mode in _WAITING_STATUS:
            await self._inputs.mark(message.input_keys, _WAITING_STATUS[mode], run.run_id)
        run = live.run  # it may have ended while the ledger was written
        if run is None or not self._runs.accepting:
            self._runs.start(live, [message])
            return "queued"
        if run.phase is RunPhase.PENDING:
            run.join(message)
            await self._inputs.mark(message.input_keys, InputStatus.QUEUED, run.run_id)
            return "queued"
        if mode == "interrupt":
            abort_tree(live, TerminationReason.ABORTED, self._lives)
            self._runs.start(live, [message], after=run)
            return "queued"
        if mode == "collect":
            live.collect_buffer.append(message)
            self._arm_collect(live)
            return "followup"
        if mode == "steer":
            live.agent.steer(message)
            return "steered"
        live.agent.follow_up(message)
        return "followup"

    def cancel_timers(self) -> None:
        """Stop every collect window (at shutdown; the buffered inputs stay `followup`)."""
        for live in self._lives:
            if live.collect_timer is not None:
                live.collect_timer.cancel()
                live.collect_timer = None

    def _arm_collect(self, live: LiveSession) -> None:
        """Each collected message restarts the quiet window."""
        if live.collect_timer is not None:
            live.collect_timer.cancel()
        loop = asyncio.get_running_loop()
        live.collect_timer = loop.call_later(self._settings().collect_window_s, self._release_collect, live)

    def _release_collect(self, live: LiveSession) -> None:
        live.collect_timer = None
        if not live.collect_buffer or not self._runs.accepting:
            return  # when stopping, the buffered inputs stay `followup` and run after the restart
        merged = merge_inputs(live.collect_buffer)
        live.collect_buffer = []
        run = live.run
        if run is None:
            self._runs.start(live, [merged])
        elif run.phase is RunPhase.PENDING:
            run.join(merged)
        else:
            # A finishing run leaves it in the queue; the next run starts with it.
            live.agent.follow_up(merged)
