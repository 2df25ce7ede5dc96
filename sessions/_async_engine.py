"""SQLAlchemy's asyncio engine without SQLAlchemy's ORM.

The store speaks SQLAlchemy Core through the engine and connection of `sqlalchemy.ext.asyncio`.
That package's `__init__` also imports its ORM session, and with it the whole ORM (about 40 ms of
a daemon's start-up and 7 MB it keeps) for names the store never uses. When this module is
imported (by `sessions.db`, so by anything that uses the store), it enters the package in
`sys.modules` without running its `__init__`: made from the package's spec, holding the engine
module's public names (`AsyncConnection`, `AsyncEngine`, ...). The real `__init__` runs in it the
first time anyone asks the package for another name, so `from sqlalchemy.ext.asyncio import
AsyncSession` still works anywhere in the process; it loads the ORM at that moment.

A process that imported `sqlalchemy.ext.asyncio` before is left as it is. The store's own modules
name `AsyncConnection` under `TYPE_CHECKING`, so that importing them in any order never imports
the package before this module does.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["create_async_engine"]

_PACKAGE = "sqlalchemy.ext.asyncio"
_ENGINE_NAMES = ("AsyncConnection", "AsyncEngine", "AsyncTransaction", "create_async_engine")
"""What the package holds before its `__init__` runs (all from its `engine` module)."""


def create_async_engine(url: Any, **options: Any) -> AsyncEngine:
    """`sqlalchemy.ext.asyncio.create_async_engine` (loaded without the ORM)."""
    from sqlalchemy.ext.asyncio.engine import create_async_engine as create

    return create(url, **options)


def _enter_engine_alone() -> None:
    """Enter `sqlalchemy.ext.asyncio` in `sys.modules` holding only its engine (idempotent)."""
    if _PACKAGE in sys.modules:
        return
    import sqlalchemy.ext

    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot find {_PACKAGE}")
    package = importlib.util.module_from_spec(spec)
    package.__getattr__ = _completer(package, spec.loader)  # type: ignore[method-assign]
    sys.modules[_PACKAGE] = package
    try:
        engine = importlib.import_module(f"{_PACKAGE}.engine")
    except BaseException:
        del sys.modules[_PACKAGE]
        raise
    for name in _ENGINE_NAMES:
        setattr(package, name, getattr(engine, name))
    sqlalchemy.ext.asyncio = package


def _completer(package: ModuleType, loader: Any) -> Any:
    """The package's module `__getattr__`: runs the real `__init__` once, on the first name the
    package does not hold, then answers from what it defined. A name that is one of its modules
    is left to the import system (`from . import exc` inside the engine module asks for it)."""
    completed = False

    def complete(name: str) -> Any:
        nonlocal completed
        if completed or name.startswith("__") or _is_submodule(package, name):
            raise AttributeError(f"module {_PACKAGE!r} has no attribute {name!r}")
        completed = True
        loader.exec_module(package)
        return getattr(package, name)

    return complete


def _is_submodule(package: ModuleType, name: str) -> bool:
    return importlib.machinery.PathFinder.find_spec(f"{_PACKAGE}.{name}", list(package.__path__)) is not None


_enter_engine_alone()
