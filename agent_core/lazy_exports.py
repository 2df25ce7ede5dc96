"""Names a package exports from modules it imports only when one of those names is first used.

A package's `__init__` lists such names against their modules and sets
``__getattr__ = exports_on_first_use(__name__, globals(), TABLE)`` (PEP 562): the first use of a
name imports its module and keeps the value in the package, so later uses cost nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from importlib import import_module
from typing import Any

__all__ = ["exports_on_first_use"]


def exports_on_first_use(
    package: str, namespace: MutableMapping[str, Any], modules: Mapping[str, str]
) -> Callable[[str], Any]:
    """The module-level `__getattr__` of `package` (whose globals are `namespace`) for the names
    in `modules` (name -> module that defines it); any other name raises AttributeError."""

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
