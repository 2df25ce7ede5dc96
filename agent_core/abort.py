"""Cancellation that crosses tasks: `AbortController` / `AbortSignal`.

Cancelling an asyncio task is not enough for the engine: an abort is requested by one task (a
client, a parent session, shutdown) and must reach an HTTP stream or a subprocess owned by
another. The signal is a one-shot latch with listeners; owners of blocking work register a
listener (close the response, kill the process group) or race their work against `wait()`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class AbortError(Exception):
    """Raised by `AbortSignal.throw_if_aborted()`; the message is the abort reason's text."""


class AbortSignal:
    """Read side of an abort. Listeners run once, synchronously, when the abort happens."""

    __slots__ = ("_aborted", "_event", "_listeners", "_reason")

    def __init__(self) -> None:
        self._aborted = False
        self._reason: Any = None
        self._listeners: list[Callable[[], None]] = []
        self._event: asyncio.Event | None = None

    @property
    def aborted(self) -> bool:
        return self._aborted

    @property
    def reason(self) -> Any:
        return self._reason

    def add_listener(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` on abort (at once if already aborted). Returns a remover."""
        if self._aborted:
            callback()
            return lambda: None
        self._listeners.append(callback)

        def remove() -> None:
            try:
                self._listeners.remove(callback)
            except ValueError:
                pass

        return remove

    async def wait(self) -> None:
        """Return once the signal is aborted."""
        if self._aborted:
            return
        if self._event is None:
            self._event = asyncio.Event()
        await self._event.wait()

    def throw_if_aborted(self) -> None:
        if self._aborted:
            raise AbortError(_reason_text(self._reason))

    def _abort(self, reason: Any) -> None:
        if self._aborted:
            return
        self._aborted = True
        self._reason = reason
        listeners, self._listeners = self._listeners, []
        if self._event is not None:
            self._event.set()
        for callback in listeners:
            callback()

    @staticmethod
    def any(*signals: AbortSignal | None) -> AbortSignal:
        """A signal that aborts when any of `signals` does (with that signal's reason)."""
        controller = AbortController()
        for signal in signals:
            if signal is None:
                continue
            if signal.aborted:
                controller.abort(signal.reason)
                break
            signal.add_listener(_forward(signal, controller))
        return controller.signal


class AbortController:
    """Write side: `abort(reason)` latches the signal and runs its listeners."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: Any = None) -> None:
        self.signal._abort("This operation was aborted" if reason is None else reason)


def _forward(source: AbortSignal, target: AbortController) -> Callable[[], None]:
    return lambda: target.abort(source.reason)


def _reason_text(reason: Any) -> str:
    if isinstance(reason, BaseException):
        return str(reason)
    return str(reason) if reason is not None else "This operation was aborted"
