"""Values that may or may not need awaiting.

Hooks, sinks, listeners and stream functions handed to the engine may be plain functions or
coroutine functions; the engine calls them and awaits the result only when it is awaitable. Code
outside the engine that accepts the same kinds of callables uses `maybe_await` too.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from typing import Any, TypeAlias, TypeVar, overload

T = TypeVar("T")

MaybeAwaitable: TypeAlias = T | Awaitable[T]
"""A value of type T, or an awaitable of one (the result of a sync or async callable)."""


@overload
async def maybe_await(value: Awaitable[T]) -> T: ...
@overload
async def maybe_await(value: MaybeAwaitable[T]) -> T: ...
async def maybe_await(value: Any) -> Any:
    """`value` itself, or what it gives when awaited if it is awaitable."""
    if value is not None and inspect.isawaitable(value):
        return await value
    return value
