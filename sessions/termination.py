"""Why a run ended, and what that means for its outcome.

The reason is recorded once per run: in its `agent.finished` event (`terminationReason`) and in
its run record. Everything else a caller needs (the run record's status, the `ok` / `error` /
`aborted` outcome clients see, whether the run counts as aborted) follows from it here, so no
caller keeps a table of its own.
"""

from __future__ import annotations

from enum import StrEnum

from sessions.schema import RunStatus

__all__ = ["Outcome", "TerminationReason"]


class Outcome(StrEnum):
    """How a run ended as a caller sees it: the `status` of its result (`agent.wait`,
    `chat.send` repeats, `gatewayctl sessions send`)."""

    OK = "ok"
    ERROR = "error"
    ABORTED = "aborted"

    @classmethod
    def of_run(cls, status: RunStatus) -> Outcome:
        """The outcome of a finished run record's status."""
        if status is RunStatus.DONE:
            return cls.OK
        if status is RunStatus.ERROR:
            return cls.ERROR
        return cls.ABORTED


class TerminationReason(StrEnum):
    """Why a run ended. The wire values are the member values.

    - `no_tool_calls`: the agent finished on its own (its last reply called no tool).
    - `error`: the model or the agent failed, or the run could not be prepared.
    - `aborted`: someone stopped it: `chat.abort` / `sessions.abort`, the `agent_interrupt` tool,
      a message sent in the `interrupt` queue mode, or the abort of a parent session, which
      reaches its sub-agents' runs.
    - `max_duration`: the run reached `max_duration_s`.
    - `idle_timeout`: the model sent nothing for `idle_timeout_s`.
    - `gateway_shutdown`: the gateway stopped and the run outlived its grace period.
    - `interrupted`: the gateway stopped without closing the run (a crash); the next start
      closed it (`sessions.recovery`).
    """

    NO_TOOL_CALLS = "no_tool_calls"
    ERROR = "error"
    ABORTED = "aborted"
    MAX_DURATION = "max_duration"
    IDLE_TIMEOUT = "idle_timeout"
    GATEWAY_SHUTDOWN = "gateway_shutdown"
    INTERRUPTED = "interrupted"

    @classmethod
    def parse(cls, value: object) -> TerminationReason | None:
        """The reason `value` names; None for anything else (missing, or unknown to this
        version)."""
        if isinstance(value, str):
            try:
                return cls(value)
            except ValueError:
                return None
        return None

    @property
    def run_status(self) -> RunStatus:
        """The status of the run record: `done`, `error`, `interrupted` (the gateway stopped
        during the run) or `aborted`."""
        if self is TerminationReason.NO_TOOL_CALLS:
            return RunStatus.DONE
        if self is TerminationReason.ERROR:
            return RunStatus.ERROR
        if self in (TerminationReason.GATEWAY_SHUTDOWN, TerminationReason.INTERRUPTED):
            return RunStatus.INTERRUPTED
        return RunStatus.ABORTED

    @property
    def outcome(self) -> Outcome:
        return Outcome.of_run(self.run_status)

    @property
    def aborted(self) -> bool:
        """The run was stopped before it could finish (by someone, a limit or the gateway)."""
        return self.outcome is Outcome.ABORTED
