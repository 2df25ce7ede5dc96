"""Import uvicorn's server without its command line.

The `uvicorn` package's `__init__` imports `uvicorn.main`, its command line: click, the reloader
and the multiprocess supervisors (multiprocessing, tempfile, shutil), none of which a daemon that
runs `Server` on its own socket uses: some fifty modules, a few milliseconds of every start and
about 2 MiB kept for the daemon's lifetime.

`import_uvicorn()` registers the package without running its `__init__`, then imports
`uvicorn.config` and `uvicorn.server` as usual and sets `Config`, `Server` and `__version__` on it
(the version of the installed distribution, which uvicorn's build takes from that `__init__`; it
is read off the name of the distribution's `.dist-info` folder beside the package, since
`importlib.metadata` and the e-mail parser it brings cost more than the rest of this import).
Any other name of the package (`uvicorn.run`, `uvicorn.main`) runs the package's own `__init__`
on first use, so the package behaves as usual for code that asks for more. Submodule imports
(`uvicorn.protocols...`) are unaffected. Without distribution metadata the package is imported
as usual. Call it before anything imports `uvicorn`; a package already imported is returned as
it is.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable
from types import ModuleType
from typing import Any

_PACKAGE = "uvicorn"


def import_uvicorn() -> ModuleType:
    """The `uvicorn` package with `Config`, `Server` and `__version__` (see the module
    docstring)."""
    loaded = sys.modules.get(_PACKAGE)
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or spec.loader is None:
        return importlib.import_module(_PACKAGE)  # not importable: its usual error
    version = _installed_version(spec.submodule_search_locations)
    if version is None:
        return importlib.import_module(_PACKAGE)
    package = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def run_init_on_first_use(name: str) -> Any:
        # Module-level `__getattr__` (PEP 562): called only for a name the package lacks.
        # Removed first, so that the package's own `__init__` (which imports `uvicorn.main`)
        # runs once and a name it does not define raises AttributeError as usual.
        del vars(package)["__getattr__"]
        loader.exec_module(package)
        try:
            return vars(package)[name]
        except KeyError:
            raise AttributeError(f"module {_PACKAGE!r} has no attribute {name!r}") from None

    sys.modules[_PACKAGE] = package
    try:
        from uvicorn.config import Config
        from uvicorn.server import Server
    except BaseException:
        del sys.modules[_PACKAGE]
        raise
    vars(package).update(Config=Config, Server=Server, __version__=version, __getattr__=run_init_on_first_use)
    return package


def _installed_version(locations: Iterable[str] | None) -> str | None:
    """The version in the name of the one `uvicorn-<version>.dist-info` folder beside the
    package, or None (no such folder, or several)."""
    for location in locations or ():
        site = os.path.dirname(os.path.abspath(location))
        try:
            names = os.listdir(site)
        except OSError:
            continue
        prefix, suffix = f"{_PACKAGE}-", ".dist-info"
        found = [
            name[len(prefix) : -len(suffix)]
            for name in names
            if name.startswith(prefix) and name.endswith(suffix)
        ]
        return found[0] if len(found) == 1 else None
    return None
