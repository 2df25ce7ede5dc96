"""Several API keys for one provider, each with its own cooldown.

A key the server rejected (401/403) or rate-limited (429) rests for a while; `pick` hands out the
keys that are not resting, starting after the last one handed out so the load spreads. When every
key is resting, the one whose rest ends first is handed out anyway (an answer beats no answer).
The pool lives as long as the configuration that listed its keys; its state is in memory only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgspec

DEFAULT_RATE_LIMIT_COOLDOWN_S = 60.0
DEFAULT_AUTH_COOLDOWN_S = 600.0


class _Key(msgspec.Struct, dict=True):
    value: str
    resting_until: float = 0.0
    failures: int = 0


@dataclass
class KeyPool:
    """The keys of one provider. `clock` is monotonic seconds (tests pass their own)."""

    provider: str
    keys: Sequence[str]
    clock: Callable[[], float] = time.monotonic
    rate_limit_cooldown_s: float = DEFAULT_RATE_LIMIT_COOLDOWN_S
    auth_cooldown_s: float = DEFAULT_AUTH_COOLDOWN_S
    _state: list[_Key] = field(init=False, repr=False)
    _next: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        unique = list(dict.fromkeys(k for k in self.keys if k))
        self._state = [_Key(k) for k in unique]

    def __len__(self) -> int:
        return len(self._state)

    def candidates(self) -> list[str]:
        """Keys to try for one request, best first: the rested ones in rotation order, then (only
        when none is rested) the one that is ready soonest."""
        if not self._state:
            return []
        now = self.clock()
        count = len(self._state)
        order = [self._state[(self._next + i) % count] for i in range(count)]
        ready = [k.value for k in order if k.resting_until <= now]
        if ready:
            return ready
        return [min(self._state, key=lambda k: k.resting_until).value]

    def used(self, key: str) -> None:
        """`key` answered: the next request starts with the key after it."""
        for index, state in enumerate(self._state):
            if state.value == key:
                state.failures = 0
                self._next = (index + 1) % len(self._state)
                return

    def rest(self, key: str, *, auth: bool, seconds: float | None = None) -> float:
        """Put `key` to rest (an auth failure rests longer); returns the rest in seconds."""
        for state in self._state:
            if state.value == key:
                state.failures += 1
                base = self.auth_cooldown_s if auth else self.rate_limit_cooldown_s
                rest = seconds if seconds is not None else base
                state.resting_until = self.clock() + rest
                return rest
        return 0.0

    def resting(self) -> int:
        """How many keys are resting now."""
        now = self.clock()
        return sum(1 for k in self._state if k.resting_until > now)


def key_label(key: str) -> str:
    """A key as logs may show it: its last four characters."""
    return f"…{key[-4:]}" if len(key) > 4 else "…"
