"""Method handlers by name (`HANDLERS`). Each `Route` names the params model its handler takes,
which must be the method's model in `gateway.protocol.methods.METHODS` (the scope is there too).

The table and the handlers' modules (`gateway.methods.table`), with the params models they take,
are imported on the table's first use, which is a connection's first method call: a start-up and
a handshake do not need them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gateway.methods.base import Call, ConnState, MethodError, Route


class _Handlers(Mapping[str, Route[Any]]):
    """`gateway.methods.table.ROUTES`, imported when first read."""

    def __init__(self) -> None:
        self._routes: Mapping[str, Route[Any]] | None = None

    def _table(self) -> Mapping[str, Route[Any]]:
        if self._routes is None:
            from gateway.methods.table import ROUTES

            self._routes = ROUTES
        return self._routes

    def __getitem__(self, method: str) -> Route[Any]:
        return self._table()[method]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


HANDLERS: Mapping[str, Route[Any]] = _Handlers()

__all__ = ["HANDLERS", "Call", "ConnState", "MethodError", "Route"]
