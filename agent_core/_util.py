"""Small helpers shared inside the engine."""

from __future__ import annotations

import inspect
from typing import Any, TypeVar

T = TypeVar("T")


async def resolve(value: Any) -> Any:
    """Await `value` if it is awaitable (hooks and emitters may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value
