"""Connection states: guarded transitions and status reports."""

from __future__ import annotations

import pytest

from bindings.errors import StateTransitionError
from bindings.state import ConnectionState, StateMachine, StatusReporter
from tests.bindings.memory_host import MemoryHost

C, R, S, X = (
    ConnectionState.CONNECTING,
    ConnectionState.READY,
    ConnectionState.RESUMING,
    ConnectionState.CLOSED,
)


def test_legal_path_and_listeners() -> None:
    machine = StateMachine()
    seen: list[tuple[str, str]] = []
    remove = machine.add_listener(lambda old, new: seen.append((old.value, new.value)))
    for state in (C, R, S, R, C, R, X):
        machine.transition(state)
    remove()
    machine.transition(C)
    assert seen == [
        ("closed", "connecting"),
        ("connecting", "ready"),
        ("ready", "resuming"),
        ("resuming", "ready"),
        ("ready", "connecting"),
        ("connecting", "ready"),
        ("ready", "closed"),
    ]


def test_illegal_transitions_name_the_states() -> None:
    machine = StateMachine()
    with pytest.raises(StateTransitionError, match="from closed to ready"):
        machine.transition(R)
    machine.transition(C)
    machine.transition(R)
    with pytest.raises(StateTransitionError, match="expected state connecting or resuming, was ready"):
        machine.transition(R, expected=(C, S))
    assert machine.state is R


def test_status_reports_state_changes_and_throttles_frames() -> None:
    host = MemoryHost()
    now = [1000.0]
    reporter = StatusReporter(host, "discord:a", wall_clock=lambda: now[0], min_interval_s=1.0)
    reporter.state_changed(R)
    reporter.frame_received()
    now[0] += 0.5
    reporter.frame_received()
    now[0] += 0.6
    reporter.frame_received()
    assert host.states == [("discord:a", "ready", None), ("discord:a", "ready", 1001.1)]
    assert reporter.last_inbound_at == 1001.1
