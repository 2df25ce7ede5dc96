"""`RunTimeline`: a run's committed session events turned into what metrics and traces record.

Sans-I/O: `feed(event)` takes each `SessionEvent` as the journal publishes it (in `seq` order per
session) and returns the observations it completes: a run started, its first token, a model call,
a tool call, a run finished. Times come from the events' own timestamps (`ts`, wall-clock
milliseconds), not from when they are fed, so the commit's delay does not skew them.

A model call starts with the event before its assistant `message.started` (the turn's start, or the
last tool result the request carries) and ends with the assistant `message.completed`. State per
run lives from `agent.started` to `agent.finished`; at most `max_runs` runs are tracked (the
oldest is forgotten first, so a run whose end was never published cannot grow it).
"""

from __future__ import annotations

from typing import Any

import msgspec

from sessions import (
    AgentFinished,
    AgentStarted,
    MessageCompleted,
    MessageDelta,
    MessageStarted,
    SessionEvent,
    ToolFinished,
    ToolStarted,
)

MAX_RUNS = 10_000


class RunBegan(msgspec.Struct, frozen=True):
    run_id: str
    session_id: str
    session_key: str | None
    ts_ms: int


class FirstToken(msgspec.Struct, frozen=True):
    run_id: str
    seconds: float
    """From the run's start to its first streamed delta."""


class ModelCall(msgspec.Struct, frozen=True):
    run_id: str
    provider: str
    model: str
    start_ms: int
    end_ms: int
    stop_reason: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float
    error_message: str | None = None


class ToolCall(msgspec.Struct, frozen=True):
    run_id: str
    tool_call_id: str
    tool_name: str
    start_ms: int
    end_ms: int
    is_error: bool


class RunEnded(msgspec.Struct, frozen=True):
    run_id: str
    session_id: str
    reason: str
    start_ms: int
    end_ms: int
    total_turns: int
    total_tokens: int
    error_message: str | None = None


Observation = RunBegan | FirstToken | ModelCall | ToolCall | RunEnded


class _Run(msgspec.Struct):
    start_ms: int
    last_ms: int
    first_token: bool = False
    call_start_ms: int | None = None
    tools: dict[str, int] = msgspec.field(default_factory=dict)
    """Running tool calls: call id -> start time."""


class RunTimeline:
    """Per-run state between a run's events; `feed` returns the observations each completes."""

    def __init__(self, *, max_runs: int = MAX_RUNS) -> None:
        self._runs: dict[str, _Run] = {}
        self._max_runs = max_runs

    def __len__(self) -> int:
        return len(self._runs)

    def feed(self, event: SessionEvent) -> list[Observation]:
        run_id = event.run_id
        if run_id is None:
            return []
        data = event.data
        ts = event.ts
        if type(data) is MessageDelta:  # most events: only the first of a run counts
            run = self._runs.get(run_id)
            if run is None or run.first_token:
                return []
            run.first_token = True
            run.last_ms = ts
            return [FirstToken(run_id, max(0, ts - run.start_ms) / 1000)]
        if isinstance(data, AgentStarted):
            self._track(run_id, _Run(start_ms=ts, last_ms=ts))
            return [RunBegan(run_id, event.session_id, event.session_key, ts)]
        run = self._runs.get(run_id)
        if isinstance(data, AgentFinished):
            self._runs.pop(run_id, None)
            start = run.start_ms if run is not None else ts - data.duration_ms
            return [
                RunEnded(
                    run_id=run_id,
                    session_id=event.session_id,
                    reason=data.termination_reason.value,
                    start_ms=start,
                    end_ms=ts,
                    total_turns=data.total_turns,
                    total_tokens=data.total_tokens,
                    error_message=data.error_message,
                )
            ]
        if run is None:
            return []
        out = self._step(run_id, run, event)
        run.last_ms = ts
        return out

    def _step(self, run_id: str, run: _Run, event: SessionEvent) -> list[Observation]:
        data = event.data
        ts = event.ts
        if isinstance(data, MessageStarted) and data.role == "assistant":
            run.call_start_ms = run.last_ms
        elif isinstance(data, MessageCompleted) and data.message.get("role") == "assistant":
            start = run.call_start_ms if run.call_start_ms is not None else run.last_ms
            run.call_start_ms = None
            return [_model_call(run_id, data.message, start, ts)]
        elif isinstance(data, ToolStarted):
            run.tools[data.tool_call_id] = ts
        elif isinstance(data, ToolFinished):
            start = run.tools.pop(data.tool_call_id, ts - data.duration_ms)
            return [ToolCall(run_id, data.tool_call_id, data.tool_name, start, ts, data.is_error)]
        return []

    def _track(self, run_id: str, run: _Run) -> None:
        self._runs.pop(run_id, None)
        while len(self._runs) >= self._max_runs:
            del self._runs[next(iter(self._runs))]
        self._runs[run_id] = run


def _model_call(run_id: str, message: dict[str, Any], start_ms: int, end_ms: int) -> ModelCall:
    usage = message.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    cost = usage.get("cost")
    cost = cost if isinstance(cost, dict) else {}
    error = message.get("errorMessage")
    return ModelCall(
        run_id=run_id,
        provider=str(message.get("provider") or "unknown"),
        model=str(message.get("model") or "unknown"),
        start_ms=start_ms,
        end_ms=end_ms,
        stop_reason=str(message.get("stopReason") or "unknown"),
        input_tokens=_int(usage.get("input")),
        output_tokens=_int(usage.get("output")),
        cache_read_tokens=_int(usage.get("cacheRead")),
        cache_write_tokens=_int(usage.get("cacheWrite")),
        cost_usd=_float(cost.get("total")),
        error_message=error if isinstance(error, str) else None,
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _float(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0
