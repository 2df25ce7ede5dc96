"""The connection state every socket protocol of a binding goes through.

`closed -> connecting -> ready`, `ready -> resuming -> ready` after a dropped or zombie
connection, `resuming -> connecting` when the platform refuses the resume, and `closed` at the end
(or before the start). "ready" means the platform said so (Discord READY/RESUMED, Slack `hello`),
never merely that a socket opened.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable

from bindings.errors import StateTransitionError
from bindings.host import StateReporter


class ConnectionState(enum.Enum):
    CONNECTING = "connecting"
    READY = "ready"
    RESUMING = "resuming"
    CLOSED = "closed"


_ALLOWED: dict[ConnectionState, frozenset[ConnectionState]] = {
    ConnectionState.CLOSED: frozenset({ConnectionState.CONNECTING}),
    ConnectionState.CONNECTING: frozenset(
        {ConnectionState.CONNECTING, ConnectionState.READY, ConnectionState.RESUMING, ConnectionState.CLOSED}
    ),
    ConnectionState.READY: frozenset(
        {ConnectionState.RESUMING, ConnectionState.CONNECTING, ConnectionState.CLOSED}
    ),
    ConnectionState.RESUMING: frozenset(
        {ConnectionState.RESUMING, ConnectionState.READY, ConnectionState.CONNECTING, ConnectionState.CLOSED}
    ),
}

StateListener = Callable[[ConnectionState, ConnectionState], None]


class StateMachine:
    """Holds a `ConnectionState` and refuses transitions the table above does not list.

    `transition(to, expected=...)` also checks the caller's own precondition: a protocol that
    handles READY passes `expected=(CONNECTING,)` and gets an error naming that state if it was
    in another one. Listeners run synchronously after each change, with `(old, new)`.
    """

    __slots__ = ("_listeners", "_state")

    def __init__(self, initial: ConnectionState = ConnectionState.CLOSED) -> None:
        self._state = initial
        self._listeners: list[StateListener] = []

    @property
    def state(self) -> ConnectionState:
        return self._state

    def add_listener(self, listener: StateListener) -> Callable[[], None]:
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def transition(self, to: ConnectionState, *, expected: Iterable[ConnectionState] | None = None) -> None:
        """Move to `to`. Raises `StateTransitionError` if the current state is not in `expected`
        (when given) or the move is not in the transition table."""
        old = self._state
        if expected is not None:
            wanted = tuple(expected)
            if old not in wanted:
                names = " or ".join(s.value for s in wanted)
                raise StateTransitionError(
                    f"cannot enter {to.value}: expected state {names}, was {old.value}"
                )
        if to not in _ALLOWED[old]:
            raise StateTransitionError(f"cannot go from {old.value} to {to.value}")
        self._state = to
        if old is not to:
            for listener in list(self._listeners):
                listener(old, to)


class StatusReporter:
    """Tells the host a binding's state and when it last heard from the platform.

    State changes are reported at once; inbound frames at most once per `min_interval_s` (the
    host only needs "time since the last frame" to the second).
    """

    def __init__(
        self,
        reporter: StateReporter,
        binding_id: str,
        *,
        wall_clock: Callable[[], float] = time.time,
        min_interval_s: float = 1.0,
    ) -> None:
        self._reporter = reporter
        self._binding_id = binding_id
        self._wall_clock = wall_clock
        self._min_interval_s = min_interval_s
        self._state = ConnectionState.CLOSED
        self._last_inbound_at: float | None = None
        self._last_report = float("-inf")

    @property
    def last_inbound_at(self) -> float | None:
        return self._last_inbound_at

    def state_changed(self, state: ConnectionState) -> None:
        self._state = state
        self._report()

    def frame_received(self) -> None:
        self._last_inbound_at = self._wall_clock()
        if self._last_inbound_at - self._last_report >= self._min_interval_s:
            self._report()

    def _report(self) -> None:
        self._last_report = self._wall_clock()
        self._reporter.report_state(self._binding_id, self._state.value, self._last_inbound_at)
