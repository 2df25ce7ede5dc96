"""The termination reason of a run and what follows from it."""

from __future__ import annotations

import pytest

from sessions.schema import RunStatus
from sessions.termination import Outcome, TerminationReason


def test_the_wire_values_stay_the_same() -> None:
    assert [reason.value for reason in TerminationReason] == [
        "no_tool_calls",
        "error",
        "aborted",
        "max_duration",
        "idle_timeout",
        "gateway_shutdown",
        "interrupted",
    ]


@pytest.mark.parametrize(
    ("reason", "run_status", "outcome"),
    [
        ("no_tool_calls", RunStatus.DONE, Outcome.OK),
        ("error", RunStatus.ERROR, Outcome.ERROR),
        ("aborted", RunStatus.ABORTED, Outcome.ABORTED),
        ("max_duration", RunStatus.ABORTED, Outcome.ABORTED),
        ("idle_timeout", RunStatus.ABORTED, Outcome.ABORTED),
        ("gateway_shutdown", RunStatus.INTERRUPTED, Outcome.ABORTED),
        ("interrupted", RunStatus.INTERRUPTED, Outcome.ABORTED),
    ],
)
def test_each_reason_says_how_the_run_is_recorded_and_what_callers_see(
    reason: str, run_status: RunStatus, outcome: Outcome
) -> None:
    parsed = TerminationReason.parse(reason)
    assert parsed is TerminationReason(reason)
    assert parsed.run_status is run_status
    assert parsed.outcome is outcome
    assert parsed.aborted is (outcome is Outcome.ABORTED)
    assert Outcome.of_run(run_status) is outcome


@pytest.mark.parametrize("value", [None, "", "completed", "timeout", "cancelled", 3])
def test_anything_else_is_no_reason(value: object) -> None:
    assert TerminationReason.parse(value) is None
