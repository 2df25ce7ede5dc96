"""The pacer: one scheduler that drives every faux stream of an event loop.

A faux stream is written as `Steps`, a generator: each step pushes the events that are due and
yields how long to wait before the next one (0: only let the rest of the loop run first). Rather
than a task that sleeps on a timer of its own for every chunk of every stream, the pacer advances
all streams from callbacks:

- *ready* streams (a step with no wait) are advanced one step each per loop iteration, all in one
  callback: the cooperative yield of an unpaced stream.
- *timed* streams wait in a heap ordered by when their next step is due. One timer is set for the
  earliest; when it fires, every stream due by then (or within `COALESCE_S`) is advanced, so
  streams with the same pace share a wake-up per tick.

A stream's schedule is anchored: the step after one due at ``t`` is due at ``t + delay``, however
late the callback that ran it was, so a stream that fell behind catches up instead of drifting.
It still takes one step per loop iteration at most (a step already due goes to the ready queue),
so whoever consumes its events can act (abort, say) between any two of them, as with a real
model. An abort of the stream's signal makes it ready at once (its next step sees the signal and
ends the stream).

Lifetimes: one pacer per event loop, made on first use and dropped with the loop. A stream is
held from `drive()` until its steps are exhausted, raise, or the driving task is cancelled; the
pacer keeps no timer while no stream waits. Its queues hold at most one entry per stream being
driven, plus stale heap slots of streams an abort woke early (dropped when they come up);
`len()` tells how many streams it drives.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import weakref
from collections import deque
from collections.abc import Generator
from typing import TypeAlias

from agent_core.abort import AbortSignal

Steps: TypeAlias = Generator[float, None, None]
"""A paced stream: each step pushes what is due and yields the seconds until the next step."""

COALESCE_S = 0.001
"""A step due within this long of a wake-up is taken by it (at most this early)."""

_IDLE, _READY, _TIMED, _FINISHED = range(4)


class _Paced:
    """One stream being driven: its steps, where it waits, and the future its driver awaits."""

    __slots__ = ("done", "due", "place", "steps", "token")

    def __init__(self, steps: Steps, done: asyncio.Future[None]) -> None:
        self.steps = steps
        self.done = done
        self.place = _IDLE
        self.due = 0.0
        """When its next step is due (its schedule's anchor)."""
        self.token = -1
        """The sequence number of its live heap slot while it is timed."""


class Pacer:
    """Drives paced streams on one event loop; see the module docstring."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # A proxy, not the loop itself: the registry of pacers is keyed weakly by their loops,
        # and a pacer holding its loop would keep both alive for ever.
        self._loop = weakref.proxy(loop)
        self._ready: deque[_Paced] = deque()
        self._ready_scheduled = False
        self._timed: list[tuple[float, int, _Paced]] = []
        self._sequence = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._driving = 0

    def __len__(self) -> int:
        return self._driving

    async def drive(self, steps: Steps, signal: AbortSignal | None = None) -> None:
        """Run `steps` to their end: the first step at once, each later one when it is due (at
        once when `signal` aborts). Returns when the steps are exhausted and raises what a step
        raises. Cancelling the caller closes the steps where they wait."""
        entry = _Paced(steps, self._loop.create_future())
        self._driving += 1
        remove = None
        try:
            self._run(entry, self._loop.time())
            if entry.place != _FINISHED and signal is not None:
                remove = signal.add_listener(lambda: self._wake(entry))
            await entry.done
        finally:
            self._driving -= 1
            if remove is not None:
                remove()
            if entry.place != _FINISHED:
                entry.place = _FINISHED
                entry.steps.close()

    # --- advancing --------------------------------------------------------------------------------

    def _run(self, entry: _Paced, due: float) -> None:
        """Take the step of `entry` that was due at `due`, then queue it where its next step
        waits: ready when that is due already (or needs no wait), else timed."""
        try:
            delay = next(entry.steps)
        except StopIteration:
            self._finish(entry, None)
            return
        except Exception as exc:
            self._finish(entry, exc)
            return
        if delay <= 0:
            entry.due = due
            self._make_ready(entry)
            return
        entry.due = due + delay
        if entry.due <= self._loop.time() + COALESCE_S:
            self._make_ready(entry)
        else:
            self._make_timed(entry, entry.due)

    def _finish(self, entry: _Paced, error: Exception | None) -> None:
        entry.place = _FINISHED
        if entry.done.done():
            return
        if error is None:
            entry.done.set_result(None)
        else:
            entry.done.set_exception(error)

    def _wake(self, entry: _Paced) -> None:
        """The stream's signal aborted: its next step runs at the next loop iteration."""
        if entry.place in (_IDLE, _TIMED):
            entry.token = -1  # its heap slot, if any, is now stale
            self._make_ready(entry)

    # --- the ready queue ------------------------------------------------------------------------

    def _make_ready(self, entry: _Paced) -> None:
        entry.place = _READY
        self._ready.append(entry)
        if not self._ready_scheduled:
            self._ready_scheduled = True
            self._loop.call_soon(self._run_ready)

    def _run_ready(self) -> None:
        # Only the streams queued before this callback: one step each, as a sleep(0) would give.
        self._ready_scheduled = False
        for _ in range(len(self._ready)):
            entry = self._ready.popleft()
            if entry.place == _READY:
                entry.place = _IDLE
                self._run(entry, entry.due)

    # --- the timed heap -------------------------------------------------------------------------

    def _make_timed(self, entry: _Paced, due: float) -> None:
        entry.place = _TIMED
        entry.token = next(self._sequence)
        heapq.heappush(self._timed, (due, entry.token, entry))
        if due < self._timer_at:
            self._arm(due)

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(at, self._run_timed)
        self._timer_at = at

    def _run_timed(self) -> None:
        self._timer = None
        self._timer_at = -math.inf  # no re-arming while the due streams step: once, at the end
        horizon = self._loop.time() + COALESCE_S
        timed = self._timed
        while timed and timed[0][0] <= horizon:
            due, token, entry = heapq.heappop(timed)
            if entry.place == _TIMED and entry.token == token:
                entry.place = _IDLE
                self._run(entry, due)
        self._timer_at = math.inf
        if timed:
            self._arm(timed[0][0])


_PACERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pacer] = weakref.WeakKeyDictionary()


def running_pacer() -> Pacer:
    """The pacer of the running event loop (made on first use). Raises `RuntimeError` without a
    running loop."""
    loop = asyncio.get_running_loop()
    pacer = _PACERS.get(loop)
    if pacer is None:
        pacer = _PACERS[loop] = Pacer(loop)
    return pacer
